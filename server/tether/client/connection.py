"""A minimal JSON-RPC 2.0 client over LSP framing, talking to a ``tether serve``: one it spawned
(stdio), or one listening on TCP (``tether serve --tcp HOST:PORT``).

It pipelines freely (many requests in flight), keeps every server notification in order, and
answers server-to-client requests through an optional callback. Error responses raise the
exception class of their code (:mod:`tether.client.errors`), all subclasses of :class:`RpcError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from tether.client.errors import RpcError, error_from
from tether.protocol.errors import ErrorCode
from tether.protocol.framing import Frame, FrameDecoder, encode_frame

logger = logging.getLogger(__name__)

RequestHandler = Callable[[str, Any], Awaitable[Any]]
"""Answers a server-to-client request: ``(method, params)`` → result; raise an ``RpcError`` to
answer with its code, any other exception answers ``-32603``. A request the server withdraws
(``$/cancelRequest``) cancels the handler, and is answered ``-32800``."""

NotificationHandler = Callable[[str, Any], bool]
"""Sees each server notification as it is read, before any response read after it: ``(method,
params)`` → True when it took the notification, False to leave it in ``notifications``."""

__all__ = ["Connection", "NotificationHandler", "RequestHandler", "RpcError"]


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        process: asyncio.subprocess.Process | None = None,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> None:
        """Talk over ``reader``/``writer``; ``process`` is the server when this side spawned it
        (waited for on :meth:`close`)."""
        self.process = process
        self._stdin = writer
        self._stdout = reader
        self._ids = itertools.count(1)
        self._pending: dict[int | str, asyncio.Future[Any]] = {}
        self.on_request = on_request
        self.on_notification = on_notification
        self.notifications: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.stray: list[dict[str, Any]] = []  # responses that matched no request
        self._tasks: set[asyncio.Future[None]] = set()
        self._answering: dict[Any, asyncio.Future[None]] = {}  # server requests being answered
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> Connection:
        # -P: the working directory is not put on sys.path, so a repository's own "tether"
        # package cannot stand in for this one.
        argv = list(argv or [sys.executable, "-P", "-m", "tether", "serve"])
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            # Ctrl-C in a terminal is the client's to handle (it cancels the run): the server
            # is left out of the terminal's process group, and ends when its stdin closes.
            start_new_session=True,
        )
        assert process.stdin is not None and process.stdout is not None
        return cls(process.stdout, process.stdin, process, on_request, on_notification)

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> Connection:
        """Connect to a server listening on TCP (``tether serve --tcp HOST:PORT``)."""
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, None, on_request, on_notification)

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; an error response raises :class:`RpcError`
        (the subclass of its code)."""
        _, future = self.start_request(method, params)
        return await future

    def start_request(self, method: str, params: Any = None) -> tuple[int, asyncio.Future[Any]]:
        """Send a request; its id (for ``$/cancelRequest``) and the future of its result."""
        msg_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        future.add_done_callback(lambda _: self._pending.pop(msg_id, None))
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return msg_id, future

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(encode_frame(orjson.dumps(message)))

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are: for framing tests."""
        self._stdin.write(data)

    async def close(self, grace: float = 5.0) -> int | None:
        """Shut the server down politely (``shutdown`` then ``exit``); its exit code when this
        side spawned it (None over TCP: the server ends when its one client leaves)."""
        if self.process is None or self.process.returncode is None:
            with contextlib.suppress(RpcError, ConnectionError, asyncio.TimeoutError):
                await asyncio.wait_for(self.request("shutdown"), grace)
                self.notify("exit")
            with contextlib.suppress(ConnectionError):
                self._stdin.close()
        if self.process is None:
            with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), grace)
            self._reader.cancel()
            return None
        try:
            code = await asyncio.wait_for(self.process.wait(), grace)
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
        self._reader.cancel()
        return code

    async def _read(self) -> None:
        decoder = FrameDecoder(max_body=sys.maxsize)  # the server's answers may be big
        while chunk := await self._read_some():
            for item in decoder.feed(chunk):
                if isinstance(item, Frame):
                    self._receive(orjson.loads(item.body))
                else:
                    logger.error("bad frame from server: %s", item.reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("server closed its output"))

    async def _read_some(self) -> bytes:
        """The next bytes from the server; empty at the end (a reset socket ends too)."""
        try:
            return await self._stdout.read(65536)
        except ConnectionError:
            return b""

    def _receive(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if "id" in message:
                msg_id = message["id"]
                task = asyncio.ensure_future(self._answer(message))
                self._tasks.add(task)
                self._answering[msg_id] = task
                task.add_done_callback(self._tasks.discard)
                task.add_done_callback(lambda _: self._answering.pop(msg_id, None))
            else:
                if message["method"] == "$/cancelRequest":
                    self._withdraw(message.get("params"))
                self._notification(message["method"], message.get("params"))
            return
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            self.stray.append(message)
        elif "error" in message:
            error = message["error"]
            future.set_exception(error_from(error["code"], error["message"], error.get("data")))
        else:
            future.set_result(message.get("result"))

    def _notification(self, method: str, params: Any) -> None:
        if self.on_notification is not None:
            try:
                if self.on_notification(method, params):
                    return
            except Exception:
                logger.exception("the notification handler failed on %s", method)
        self.notifications.put_nowait((method, params))

    def _withdraw(self, params: Any) -> None:
        """The server's ``$/cancelRequest``: stop answering that request (the callback sees a
        ``CancelledError``). The notification is still handed on, so callers can see it."""
        task = self._answering.get(params.get("id")) if isinstance(params, dict) else None
        if task is not None:
            task.cancel()

    async def _answer(self, message: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if self.on_request is None:
            reply["error"] = {
                "code": int(ErrorCode.METHOD_NOT_FOUND),
                "message": f"no handler for {message['method']}",
            }
        else:
            try:
                reply["result"] = await self.on_request(message["method"], message.get("params"))
            except asyncio.CancelledError:  # the server withdrew it (see _withdraw)
                reply["error"] = {
                    "code": int(ErrorCode.REQUEST_CANCELLED),
                    "message": "cancelled by the server",
                }
            except RpcError as exc:
                reply["error"] = {"code": exc.code, "message": exc.message}
                if exc.data is not None:
                    reply["error"]["data"] = exc.data
            except Exception as exc:
                logger.exception("the request handler failed on %s", message["method"])
                reply["error"] = {"code": int(ErrorCode.INTERNAL_ERROR), "message": str(exc)}
        with contextlib.suppress(ConnectionError):
            self.send(reply)
