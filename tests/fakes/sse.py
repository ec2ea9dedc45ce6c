"""Start :mod:`tests.fakes.sse_mcp_server` as a process and learn its endpoint."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

SSE_FAKE = Path(__file__).parent / "sse_mcp_server.py"


@asynccontextmanager
async def sse_server(env: Mapping[str, str] | None = None) -> AsyncIterator[str]:
    """The fake MCP server over HTTP+SSE on loopback, for the block; its endpoint URL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SSE_FAKE),
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 20)
        url = line.decode().strip()
        assert url.startswith("http://127.0.0.1:"), f"the SSE fake said {line!r}"
        yield url
    finally:
        process.kill()
        await process.wait()
