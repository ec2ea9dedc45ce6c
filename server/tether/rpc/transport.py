"""Byte transports for the server: stdio (the default) and TCP.

stdout is reserved for protocol frames: the server writes to a duplicate of the original stdout
and points file descriptor 1 at stderr, so a stray ``print`` in any library lands in the log.
Reads and writes are non-blocking on the event loop; stdin is not read on a worker thread (pygls's
reader shares its thread pool with ``@thread`` handlers) unless it is a regular file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from tether.rpc.server import TetherServer

logger = logging.getLogger(__name__)


class _Stream(asyncio.Protocol):
    def __init__(self, on_data: Callable[[bytes], None], on_close: Callable[[], None]) -> None:
        self._on_data = on_data
        self._on_close = on_close

    def data_received(self, data: bytes) -> None:
        self._on_data(data)

    def eof_received(self) -> bool | None:
        self._on_close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_close()


class _Drained(asyncio.Protocol):
    """Write side of a pipe: ``closed`` resolves once the buffer is flushed and the pipe closed."""

    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _reserve_stdout() -> int:
    """A private descriptor for protocol output; fd 1 (and ``sys.stdout``) now go to stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    return protocol_fd


def _on_client_gone(server: TetherServer) -> None:
    protocol = server.protocol
    if protocol.exit_code is None:
        protocol.exit_code = 0 if protocol._shutdown else 1
    server.stop()


async def serve_stdio(server: TetherServer, stdin_fd: int = 0, stdout_fd: int | None = None) -> int:
    loop = asyncio.get_running_loop()
    out_fd = _reserve_stdout() if stdout_fd is None else stdout_fd
    close_writer = await _connect_writer(loop, server, out_fd)
    reader = await _connect_reader(loop, server, stdin_fd)
    try:
        await server.stopped.wait()
    finally:
        reader()
        with contextlib.suppress(TimeoutError):  # what still runs is answered -32800
            await asyncio.wait_for(server.protocol.settle(cancel=True), 5)
        await close_writer()
    return server.protocol.exit_code or 0


async def _connect_writer(
    loop: asyncio.AbstractEventLoop, server: TetherServer, fd: int
) -> Callable[[], Any]:
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, drained = await loop.connect_write_pipe(_Drained, pipe)
    except ValueError:  # a regular file: plain blocking writes are fine there

        def write_file(data: bytes) -> None:
            pipe.write(data)

        server.protocol.connect(write_file)
        return _noop_async
    server.protocol.connect(transport.write)

    async def close() -> None:
        transport.close()  # flushes what is buffered first, then reports the loss
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained.closed, 5)

    return close


async def _connect_reader(
    loop: asyncio.AbstractEventLoop, server: TetherServer, fd: int
) -> Callable[[], None]:
    protocol = server.protocol
    pipe = os.fdopen(fd, "rb", buffering=0)
    stream = _Stream(protocol.data_received, lambda: _on_client_gone(server))
    try:
        transport, _ = await loop.connect_read_pipe(lambda: stream, pipe)
    except ValueError:  # a regular file cannot be polled: read it on a thread
        task = asyncio.ensure_future(_read_file(loop, pipe, stream))

        def stop_reading() -> None:
            task.cancel()

        return stop_reading
    return transport.close


async def _read_file(loop: asyncio.AbstractEventLoop, pipe: Any, stream: _Stream) -> None:
    while chunk := await loop.run_in_executor(None, pipe.read, 65536):
        stream.data_received(chunk)
    stream.eof_received()


async def _noop_async() -> None:
    return None


async def serve_tcp(server: TetherServer, host: str, port: int) -> int:
    """Serve one client on a TCP socket; the server ends when that client leaves."""
    loop = asyncio.get_running_loop()

    def connect() -> _Stream:
        return _Connection(server)

    listener = await loop.create_server(connect, host, port)
    logger.info("listening on %s:%d", host, port)
    try:
        await server.stopped.wait()
    finally:
        listener.close()
    return server.protocol.exit_code or 0


class _Connection(_Stream):
    def __init__(self, server: TetherServer) -> None:
        super().__init__(server.protocol.data_received, lambda: _on_client_gone(server))
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self._server.protocol.connect(transport.write)
