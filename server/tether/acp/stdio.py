"""``tether acp``: one client on stdin/stdout until stdin closes.

stdout carries protocol lines only: the server writes to a duplicate of the original stdout and
points file descriptor 1 at stderr, so a stray ``print`` in any library lands in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable

from tether.acp.agent import AcpAgent
from tether.acp.wire import AcpWire, Write


class _Reader(asyncio.Protocol):
    def __init__(self, connection: AcpWire) -> None:
        self._connection = connection

    def data_received(self, data: bytes) -> None:
        self._connection.data_received(data)

    def eof_received(self) -> bool | None:
        self._connection.connection_lost()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection.connection_lost()


class _Drained(asyncio.Protocol):
    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def serve_acp(agent: AcpAgent, stdin_fd: int = 0) -> int:
    """Serve until the client closes stdin; what still runs is cancelled first."""
    loop = asyncio.get_running_loop()
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    write, close_writer = await _connect_writer(loop, out_fd)
    connection = agent.connection = AcpWire(agent, write)
    reader = os.fdopen(stdin_fd, "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: _Reader(connection), reader)
        stop_reading: Callable[[], object] = transport.close
    except ValueError:  # a regular file cannot be polled: read it on a thread
        task = asyncio.ensure_future(_read_file(loop, reader, connection))
        stop_reading = task.cancel
    try:
        await connection.closed.wait()
    finally:
        stop_reading()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(connection.cancel_all(), 5)
        await close_writer()
        await agent.aclose()
    return 0


async def _connect_writer(
    loop: asyncio.AbstractEventLoop, fd: int
) -> tuple[Write, Callable[[], Awaitable[None]]]:
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, drained = await loop.connect_write_pipe(_Drained, pipe)
    except ValueError:  # a regular file: plain blocking writes are fine there

        def write_file(data: bytes) -> None:
            pipe.write(data)

        return write_file, _nothing

    async def close() -> None:
        transport.close()  # flushes what is buffered first
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained.closed, 5)

    return transport.write, close


async def _read_file(loop: asyncio.AbstractEventLoop, pipe: object, connection: AcpWire) -> None:
    read = pipe.read  # type: ignore[attr-defined]
    while chunk := await loop.run_in_executor(None, read, 65536):
        connection.data_received(chunk)
    connection.connection_lost()


async def _nothing() -> None:
    return None
