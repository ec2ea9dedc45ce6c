"""The fake MCP server of :mod:`tests.fakes.mcp_server` (same tools) over the HTTP+SSE transport.

Run it as ``python tests/fakes/sse_mcp_server.py``: it listens on 127.0.0.1 on a port the system
picks and prints ``http://127.0.0.1:PORT/sse`` (its endpoint) as one line on stdout once the
socket listens (connections made before the server runs wait in the backlog). The
``Authorization`` header of every request is appended to the file named by
``TETHER_MCP_HEADERS``, when that is set.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).parent))
from mcp_server import server


def recording(app: Any, path: str | None) -> Any:
    """``app``, noting each request's ``Authorization`` header in ``path``."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if path is not None and scope["type"] == "http":
            _note(path, dict(scope["headers"]).get(b"authorization", b"").decode())
        await app(scope, receive, send)

    return wrapped


def _note(path: str, line: str) -> None:
    with open(path, "a") as file:
        file.write(line + "\n")


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    print(f"http://127.0.0.1:{port}/sse", flush=True)
    app = recording(server.sse_app(host="127.0.0.1"), os.environ.get("TETHER_MCP_HEADERS"))
    await uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
