"""An MCP server that misbehaves on request, for the tests of what tether does about it.

It speaks newline-delimited JSON-RPC on stdio by hand (an SDK server would not misbehave), one
message at a time. Run it as ``python tests/fakes/hostile_mcp_server.py [options]``:

- ``--tools N``: offer N more tools ``t0`` … (default 0);
- ``--names a,b``: offer more tools with these names (``read_file``, a colliding name…);
- ``--description-bytes N``: each tool's description is N bytes long;
- ``--endless-pages``: ``tools/list`` answers page after page, each with a cursor to a next one;
- ``--flood-at-start N``: send N notifications before answering ``initialize``;
- ``--never-initialize``: read every message and never answer ``initialize``;
- ``--slow-start S``: answer ``initialize``, and then the first ``tools/list``, S seconds late each.

Tools (``tools/call`` by name; the others of the options above answer ``ok``):

- ``echo {text}``: returns ``text``;
- ``huge {bytes}``: a text result of that many bytes, on one line;
- ``endless``: starts a result and never ends its line;
- ``never``: never answers (the server goes on answering other requests);
- ``wedge``: the server stops reading and answering anything;
- ``garbage``: answers with a line that is not JSON;
- ``bad_response``: answers with JSON-RPC whose ``result`` is not an object;
- ``bad_result``: answers with a result that is not a ``CallToolResult``;
- ``flood {count}``: sends ``count`` log notifications (1 KiB each), then answers;
- ``progress_flood {count}``: sends ``count`` progress notifications for the call, then answers;
- ``request_flood {count}``: sends ``count`` requests to tether without reading its answers;
- ``exit``: the process ends at once.

On start it appends its pid to the file named by ``TETHER_MCP_PIDS``, when that is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

OUT = sys.stdout.buffer
FILLER = "x" * 1024


def send(message: dict[str, Any]) -> None:
    OUT.write(json.dumps(message).encode() + b"\n")
    OUT.flush()


def answer(request_id: Any, result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def text(request_id: Any, value: str) -> None:
    answer(request_id, {"content": [{"type": "text", "text": value}]})


def log_notification(index: int) -> dict[str, Any]:
    params = {"level": "info", "logger": "flood", "data": f"{index} {FILLER}"}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


class Server:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        names = ["echo", "huge", "endless", "never", "wedge", "garbage", "bad_response"]
        names += ["bad_result", "flood", "progress_flood", "request_flood", "exit"]
        names += [f"t{index}" for index in range(options.tools)]
        names += [name for name in options.names.split(",") if name]
        self.names = names
        self.pages = 0

    def tool(self, name: str) -> dict[str, Any]:
        size = self.options.description_bytes
        description = "d" * size if size else name
        return {
            "name": name,
            "description": description,
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": True},
        }

    def handle(self, message: dict[str, Any]) -> None:
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None or method is None:
            return  # a notification, or an answer to one of our requests
        if method == "initialize" and self.options.never_initialize:
            return
        if method in ("initialize", "tools/list") and self.options.slow_start:
            time.sleep(self.options.slow_start)
            if method == "tools/list":
                self.options.slow_start = 0.0
        if method == "initialize":
            for index in range(self.options.flood_at_start):
                send(log_notification(index))
            answer(
                request_id,
                {
                    "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                    "capabilities": {"tools": {}, "logging": {}},
                    "serverInfo": {"name": "hostile", "version": "0"},
                },
            )
        elif method == "tools/list":
            self.list_tools(request_id)
        elif method == "tools/call":
            self.call(request_id, params.get("name", ""), params)
        elif method == "ping":
            answer(request_id, {})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": method}})

    def list_tools(self, request_id: Any) -> None:
        if self.options.endless_pages:
            self.pages += 1
            page = [self.tool(f"p{self.pages}")]
            answer(request_id, {"tools": page, "nextCursor": f"page-{self.pages}"})
            return
        answer(request_id, {"tools": [self.tool(name) for name in self.names]})

    def call(self, request_id: Any, name: str, params: dict[str, Any]) -> None:
        arguments = params.get("arguments") or {}
        if name == "echo":
            text(request_id, str(arguments.get("text", "")))
        elif name == "huge":
            text(request_id, "y" * int(arguments.get("bytes", 1 << 20)))
        elif name == "endless":
            start = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": []}})
            OUT.write(start[:-2].encode() + b'[{"type": "text", "text": "')
            while True:
                OUT.write(FILLER.encode() * 64)
        elif name == "never":
            return
        elif name == "wedge":
            while True:
                time.sleep(3600)
        elif name == "garbage":
            OUT.write(b"this is not JSON at all\n")
            OUT.flush()
        elif name == "bad_response":
            send({"jsonrpc": "2.0", "id": request_id, "result": 42})
        elif name == "bad_result":
            answer(request_id, {"content": "not a list of blocks"})
        elif name == "exit":
            os._exit(3)
        else:
            self.call_flood(request_id, name, params)

    def call_flood(self, request_id: Any, name: str, params: dict[str, Any]) -> None:
        count = int((params.get("arguments") or {}).get("count", 0))
        token = (params.get("_meta") or {}).get("progressToken")
        for index in range(count):
            if name == "flood":
                send(log_notification(index))
            elif name == "progress_flood" and token is not None:
                progress = {"progressToken": token, "progress": index, "message": FILLER}
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress})
            elif name == "request_flood":
                send({"jsonrpc": "2.0", "id": f"flood-{index}", "method": "roots/list"})
        text(request_id, f"{name} {count}" if count else "ok")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--names", default="")
    parser.add_argument("--description-bytes", type=int, default=0)
    parser.add_argument("--endless-pages", action="store_true")
    parser.add_argument("--flood-at-start", type=int, default=0)
    parser.add_argument("--never-initialize", action="store_true")
    parser.add_argument("--slow-start", type=float, default=0.0)
    options = parser.parse_args()
    pids = os.environ.get("TETHER_MCP_PIDS")
    if pids:
        with open(pids, "a") as file:
            file.write(f"{os.getpid()}\n")
    server = Server(options)
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            server.handle(message)


if __name__ == "__main__":
    main()
