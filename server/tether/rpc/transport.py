"""Byte transports for the server: stdio (the default) and TCP.

stdout is reserved for protocol frames: the server writes to a duplicate of the original stdout
and points file descriptor 1 at stderr, so a stray ``print`` in any library lands in the log.
Reads and writes are non-blocking on the event loop (pygls's own reader runs on a worker thread),
except for a stdin or stdout that is a regular file.

The pygls server is built once ``initialize`` has been answered (see :mod:`tether.rpc.wire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from tether.rpc.app import App
from tether.rpc.wire import Wire

logger = logging.getLogger(__name__)


def open_wire(app: App) -> Wire:
    """A wire whose pygls server is loaded right after the handshake."""
    wire: Wire

    def load_server() -> None:
        from tether.rpc.server import TetherServer  # imports pygls: the slow part of a start

        TetherServer(app, wire)

    def after_handshake() -> None:
        asyncio.get_running_loop().call_soon(load_server)

    wire = Wire(app, on_initialized=after_handshake)
    return wire


class _Stream(asyncio.Protocol):
    def __init__(self, wire: Wire) -> None:
        self._wire = wire

    def data_received(self, data: bytes) -> None:
        self._wire.data_received(data)

    def eof_received(self) -> bool | None:
        self._wire.connection_lost()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._wire.connection_lost()


class _Connection(_Stream):
    """A TCP client: the socket is both ends of the wire. Only the first one is served."""

    def __init__(self, wire: Wire, listener: _Listener) -> None:
        super().__init__(wire)
        self._listener = listener
        self._served = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        if self._listener.taken:
            logger.warning("refused a second client: this server serves one")
            transport.close()
            return
        self._listener.taken = self._served = True
        self._wire.connect(transport.write)

    def data_received(self, data: bytes) -> None:
        if self._served:
            super().data_received(data)

    def eof_received(self) -> bool | None:
        return super().eof_received() if self._served else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._served:
            super().connection_lost(exc)


class _Listener:
    taken = False


class _Drained(asyncio.Protocol):
    """Write side of a pipe: ``closed`` resolves once the buffer is flushed and the pipe closed."""

    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def serve_stdio(app: App, stdin_fd: int = 0, stdout_fd: int | None = None) -> int:
    """Serve one client on stdin/stdout until ``exit`` or end of input; the exit code."""
    loop = asyncio.get_running_loop()
    wire = open_wire(app)
    out_fd = _reserve_stdout() if stdout_fd is None else stdout_fd
    close_writer = await _connect_writer(loop, wire, out_fd)
    stop_reading = await _connect_reader(loop, wire, stdin_fd)
    try:
        await wire.stopped.wait()
    finally:
        stop_reading()
        await _settle(wire)
        await close_writer()
        await app.aclose()
    return wire.exit_code or 0


async def serve_tcp(app: App, host: str, port: int) -> int:
    """Serve one client on a TCP socket; the server ends when that client leaves."""
    loop = asyncio.get_running_loop()
    wire = open_wire(app)
    state = _Listener()
    listener = await loop.create_server(lambda: _Connection(wire, state), host, port)
    logger.info("listening on %s:%d", host, port)
    try:
        await wire.stopped.wait()
    finally:
        listener.close()
        await _settle(wire)
        await app.aclose()
    return wire.exit_code or 0


async def _settle(wire: Wire) -> None:
    """Answer what still runs (-32800) before the output closes; never hang the exit."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wire.settle(cancel=True), 5)


def _reserve_stdout() -> int:
    """A private descriptor for protocol output; fd 1 (and ``sys.stdout``) now go to stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    return protocol_fd


async def _connect_writer(
    loop: asyncio.AbstractEventLoop, wire: Wire, fd: int
) -> Callable[[], Awaitable[None]]:
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, drained = await loop.connect_write_pipe(_Drained, pipe)
    except ValueError:  # a regular file: plain blocking writes are fine there

        def write_file(data: bytes) -> None:
            pipe.write(data)

        wire.connect(write_file)
        return _nothing_to_flush
    wire.connect(transport.write)

    async def close() -> None:
        transport.close()  # flushes what is buffered first, then reports the loss
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained.closed, 5)

    return close


async def _connect_reader(
    loop: asyncio.AbstractEventLoop, wire: Wire, fd: int
) -> Callable[[], None]:
    pipe = os.fdopen(fd, "rb", buffering=0)
    stream = _Stream(wire)
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


async def _nothing_to_flush() -> None:
    return None
