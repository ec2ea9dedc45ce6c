"""The floor: the least a JSON-RPC server over LSP-framed stdio can do (raw asyncio + orjson).

With ``--pydantic`` it also validates ``initialize``'s params with a pydantic model before it
answers, as any server whose protocol is declared with pydantic must: the least such a server
takes to start (``first_prompt.py`` reports it beside the floor)."""

from __future__ import annotations

import asyncio
import itertools
import sys
from typing import Any

import orjson


class FloorServer(asyncio.Protocol):
    def __init__(self, out: asyncio.WriteTransport, done: asyncio.Future[None]) -> None:
        self.out, self.done, self.buffer = out, done, bytearray()
        self.ids = itertools.count(1)
        self.sessions: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            start = end + 4
            length = int(self.buffer[:end].partition(b":")[2])  # one header: Content-Length
            if len(self.buffer) < start + length:
                return
            message = orjson.loads(self.buffer[start : start + length])
            del self.buffer[: start + length]
            result = self.handle(message["method"], message.get("params") or {})
            if "id" in message:
                body = orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
                self.out.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/get":
            return self.sessions[params["sessionId"]][0]
        if method == "session/append":
            session, history = self.sessions[params["sessionId"]]
            stored = [{"id": f"m{next(self.ids)}", **m} for m in params["messages"]]
            history.extend(stored)
            session["messageCount"] = len(history)
            return {"messages": stored}
        if method == "session/create":
            session_id = f"s{next(self.ids)}"
            session = {"sessionId": session_id, "workspace": "floor", "messageCount": 0}
            self.sessions[session_id] = (session, [])
            return session
        if method == "initialize":
            if VALIDATE is not None:
                VALIDATE(params)
            return {"capabilities": {}, "serverInfo": {"name": "floor", "version": "0"}}
        if method == "exit" and not self.done.done():
            self.done.set_result(None)
        return None  # shutdown, and the notifications (initialized, exit)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


VALIDATE: Any = None
"""``--pydantic``: validates initialize's params (a model of the fields the floor reads)."""


def pydantic_validator() -> Any:
    from pydantic import BaseModel, ConfigDict

    class WorkspaceFolder(BaseModel):
        uri: str
        name: str | None = None

    class InitializeParams(BaseModel):
        model_config = ConfigDict(extra="allow")
        processId: int | None = None
        capabilities: dict[str, Any] = {}
        workspaceFolders: list[WorkspaceFolder] | None = None
        initializationOptions: dict[str, Any] | None = None

    return InitializeParams.model_validate


async def main() -> None:
    loop = asyncio.get_running_loop()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    done: asyncio.Future[None] = loop.create_future()
    await loop.connect_read_pipe(lambda: FloorServer(out, done), sys.stdin.buffer)
    await done
    out.close()


if __name__ == "__main__":
    if "--pydantic" in sys.argv[1:]:
        VALIDATE = pydantic_validator()
    asyncio.run(main())
