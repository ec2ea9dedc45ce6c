"""Byte transports for the server: stdio (the default) and TCP.

stdout is reserved for protocol frames: the server writes to a duplicate of the original stdout
and points file descriptor 1 at stderr, so a stray ``print`` in any library lands in the log.
Reads and writes are non-blocking on the event loop (pygls's own reader runs on a worker thread),
except for a stdin or stdout that is a regular file.

Output is flow-controlled: while the client is not reading what the server writes (the transport's
buffer is over its high-water mark), the server stops reading requests, so a client that floods it
without reading the answers cannot make it buffer them without end. A big frame is handed to the
transport a slice at a time as it drains, never copied whole into its buffer.

The pygls server is built once ``initialize`` has been answered (see :mod:`tether.rpc.wire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
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
        # What is loaded by now lives as long as the server: out of the collector's full passes,
        # which then walk only what requests make (a big append's were 30-90 ms each otherwise).
        gc.collect()
        gc.freeze()

    def after_handshake() -> None:
        asyncio.get_running_loop().call_soon(load_server)

    wire = Wire(app, on_initialized=after_handshake)
    return wire


class _Output:
    """Writes to a transport, holding back what it cannot take yet; tells when it backs up.

    ``backed_up(True)`` is called when the transport's buffer goes over its high-water mark and
    ``backed_up(False)`` once everything held back has been handed to it and it drained.
    """

    SLICE = 256 * 1024

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        # views of frames not yet handed on (no copies), and iterators that make the rest of one
        self._held: deque[memoryview | Iterator[bytes]] = deque()
        self._paused = False
        self._emptied = asyncio.Event()
        self.backed_up: Callable[[bool], None] = _ignore

    def write(self, data: bytes) -> None:
        if self._paused or self._held:
            self._held.append(memoryview(data))
        else:
            self._hand_on(memoryview(data))

    def write_parts(self, parts: Iterator[bytes]) -> None:
        """Write what ``parts`` makes, pulling the next piece only once the transport took the
        last one (so a big answer is made as it goes out, never held whole)."""
        self._held.append(parts)
        self._flush()

    def pause_writing(self) -> None:
        if not self._paused:
            self._paused = True
            self.backed_up(True)

    def resume_writing(self) -> None:
        self._paused = False
        self._flush()
        if not self._paused:
            self._emptied.set()
            self.backed_up(False)

    async def flushed(self) -> None:
        """Return once everything held back has been handed to the transport."""
        while self._held and not self._transport.is_closing():
            self._emptied.clear()
            await self._emptied.wait()

    def _flush(self) -> None:
        """Hand on what is held, in order, until the transport backs up."""
        while self._held and not self._paused and not self._transport.is_closing():
            item = self._held.popleft()
            if isinstance(item, memoryview):
                self._hand_on(item)
                continue
            part = next(item, None)
            if part is not None:
                self._held.appendleft(item)
                self._held.appendleft(memoryview(part))

    def _hand_on(self, view: memoryview) -> None:
        """Slice by slice until the transport backs up; the rest is held, in front."""
        while view:
            if self._paused or self._transport.is_closing():
                self._held.appendleft(view)
                return
            self._transport.write(view[: self.SLICE])
            view = view[self.SLICE :]


def _ignore(backed_up: bool) -> None:
    return None


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
        self._output: _Output | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self._listener.taken:
            logger.warning("refused a second client: this server serves one")
            transport.close()
            return
        self._listener.taken = self._served = True
        self._output = _Output(transport)
        self._output.backed_up = _pause_reading(transport)
        self._wire.connect(self._output.write, self._output.write_parts)

    def pause_writing(self) -> None:
        if self._output is not None:
            self._output.pause_writing()

    def resume_writing(self) -> None:
        if self._output is not None:
            self._output.resume_writing()

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


def _pause_reading(transport: asyncio.ReadTransport) -> Callable[[bool], None]:
    """What to do when the output backs up: stop reading ``transport`` until it drains."""

    def backed_up(full: bool) -> None:
        if transport.is_closing():
            return
        if full:
            transport.pause_reading()
        else:
            transport.resume_reading()

    return backed_up


class _Drained(asyncio.Protocol):
    """Write side of a pipe: ``closed`` resolves once the buffer is flushed and the pipe closed."""

    def __init__(self) -> None:
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.output: _Output | None = None

    def pause_writing(self) -> None:
        if self.output is not None:
            self.output.pause_writing()

    def resume_writing(self) -> None:
        if self.output is not None:
            self.output.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def serve_stdio(app: App, stdin_fd: int = 0, stdout_fd: int | None = None) -> int:
    """Serve one client on stdin/stdout until ``exit`` or end of input; the exit code."""
    loop = asyncio.get_running_loop()
    wire = open_wire(app)
    out_fd = _reserve_stdout() if stdout_fd is None else stdout_fd
    close_writer, output = await _connect_writer(loop, wire, out_fd)
    stop_reading = await _connect_reader(loop, wire, stdin_fd, output)
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
) -> tuple[Callable[[], Awaitable[None]], _Output | None]:
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, drained = await loop.connect_write_pipe(_Drained, pipe)
    except ValueError:  # a regular file: plain blocking writes are fine there

        def write_file(data: bytes) -> None:
            pipe.write(data)

        wire.connect(write_file)
        return _nothing_to_flush, None
    output = drained.output = _Output(transport)
    wire.connect(output.write, output.write_parts)

    async def close() -> None:
        with contextlib.suppress(TimeoutError):  # hand on what is held back, then close
            await asyncio.wait_for(output.flushed(), 5)
        transport.close()  # flushes what is buffered first, then reports the loss
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drained.closed, 5)

    return close, output


async def _connect_reader(
    loop: asyncio.AbstractEventLoop, wire: Wire, fd: int, output: _Output | None
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
    if output is not None:
        output.backed_up = _pause_reading(transport)
    return transport.close


async def _read_file(loop: asyncio.AbstractEventLoop, pipe: Any, stream: _Stream) -> None:
    while chunk := await loop.run_in_executor(None, pipe.read, 65536):
        stream.data_received(chunk)
    stream.eof_received()


async def _nothing_to_flush() -> None:
    return None
