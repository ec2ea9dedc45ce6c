"""Byte transports for the server: stdio (the default) and TCP.

stdout is reserved for protocol frames: the server writes to a duplicate of the original stdout
and points file descriptor 1 at stderr, so a stray ``print`` in any library lands in the log.
Reads and writes are non-blocking on the event loop (pygls's own reader runs on a worker thread),
except for a stdin or stdout that is a regular file.

Output is flow-controlled: while the client is not reading what the server writes (the transport's
buffer is over its high-water mark), the server stops reading requests, so a client that floods it
without reading the answers cannot make it buffer them without end. A big frame is handed to the
transport a slice at a time as it drains, never copied whole into its buffer.

After the handshake a thread imports, in the background, the kernel's modules, and pygls once a
message for it arrives; the pygls server is then built on the event loop. tether's own methods
never wait for it (see :mod:`tether.rpc.wire`). That server is the LSP face's (:mod:`tether.lsp`):
the caller hands it in as an :class:`LspFace`, so nothing here imports pygls or the LSP face.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from tether.rpc.app import App
from tether.rpc.wire import Wire

logger = logging.getLogger(__name__)


SESSION_MODULES = (
    "tether.sessions.service",
    "tether.sessions.in_memory",
    "tether.rpc.handlers",
    "tether.rpc.checkpoint_methods",
)
"""What the session methods need (their models), imported in the background first after the
handshake: the first ``session/*`` request waits for these alone."""

KERNEL_MODULES = (
    "tether.rpc.kernel_methods",
    "tether.kernel.approval",
    "tether.memory",
    "tether.providers",
    "tether.tools",
    "tether.tools.builtin",
)
"""What the first ``kernel/run`` needs, imported in the background after the handshake."""


@dataclass(frozen=True)
class LspFace:
    """The standard LSP methods (pygls), joined to a wire once a message for them arrives.

    ``load`` runs on the background thread (importing pygls holds the interpreter for most of a
    second), then ``attach`` on the event loop, which builds the pygls server on the wire.
    """

    load: Callable[[], None]
    attach: Callable[[App, Wire], object]


QUIET = 0.05
"""Seconds without input from the client before the collector's pass after the imports."""
FREEZE_WAIT = 5.0
"""Seconds the collector's pass waits for the requests in flight to be answered, at most."""

_KERNEL_IMPORT_TIMEOUT = 30.0

COLLECTOR_THRESHOLDS = (50_000, 20, 10)
"""The cycle collector's generation thresholds once the server has loaded (Python's are 700,
10, 10). Nearly all the garbage of a run is freed by reference counting; at 700, 100 runs at
once made ~40 young passes and ~4 middle ones (~2 ms each: what the runs in flight hold
survives into the middle generation) per 100 runs, ~13% of the server's CPU for finding
nothing. At 50,000 a young pass comes every few hundred runs' worth of allocations; cyclic
garbage still goes, just later (a young pass walks at most 50,000 objects, ~20 ms)."""

READ_SIZE = 64 * 1024
"""Bytes asked of each read. asyncio asks 256 KB, a buffer over glibc's mmap threshold
(128 KB): every read, however small, then costs an mmap, an mremap and a munmap, ~15-25 µs per
request in a process of tether's size. A pipe holds 64 KB, so no read returns more anyway."""

_BACKGROUND_SWITCH_INTERVAL = 0.001
"""While the background imports run, the event loop's thread gets the interpreter back within
1 ms of wanting it (Python's default is 5 ms)."""


def open_wire(app: App, lsp: LspFace) -> Wire:
    """A wire whose kernel modules are imported in the background after the handshake, and
    whose pygls server (``lsp``) is loaded in the background on first use."""
    wire = Wire(
        app,
        before_kernel=lambda: loader.wait_for_kernel_modules(),
        before_sessions=lambda: loader.wait_for_session_modules(),
    )
    loader = _Loader(app, wire, lsp)
    wire.on_initialized = loader.start
    wire.on_waiting = loader.want_pygls
    return wire


class _Loader:
    """Imports what the handshake did not need on a thread of its own.

    First the kernel's modules, at once. pygls only once a message for it arrives (a standard
    LSP request or notification, but ``initialized``, which every client sends and which can
    wait): its import holds the interpreter for most of a second, which a client that speaks
    only tether's methods should never share. The pygls server is then built on the loop.
    """

    def __init__(self, app: App, wire: Wire, lsp: LspFace) -> None:
        self._app, self._wire, self._lsp = app, wire, lsp
        self._pygls_wanted = threading.Event()
        self._sessions_imported = threading.Event()
        self._kernel_imported = threading.Event()
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._run, name="tether-imports", daemon=True)
        thread.start()

    def wait_for_kernel_modules(self) -> None:
        """Block until the thread has imported the kernel's modules, so that the two threads
        never import the same modules at once (two imports waiting on each other's module
        locks would fail one of them with a deadlock error)."""
        if self._started and not self._kernel_imported.wait(_KERNEL_IMPORT_TIMEOUT):
            logger.warning("the kernel's modules are still being imported; going on")

    def wait_for_session_modules(self) -> None:
        """Block until the thread has imported the session service's modules (the first of
        its imports), for the same reason."""
        if self._started and not self._sessions_imported.wait(_KERNEL_IMPORT_TIMEOUT):
            logger.warning("the session modules are still being imported; going on")

    def want_pygls(self, message: dict[str, Any]) -> None:
        """A message waits for pygls: load it (``initialized`` alone does not ask for it)."""
        if message.get("method") != "initialized":
            self._pygls_wanted.set()

    def _run(self) -> None:
        with _switching_often():
            _import(SESSION_MODULES)
            self._sessions_imported.set()
            _import(KERNEL_MODULES)
            _warm_tools()
        self._kernel_imported.set()
        self._wait_for_quiet()
        self._call_soon(functools.partial(self._freeze_when_idle, time.monotonic() + FREEZE_WAIT))
        self._pygls_wanted.wait()
        with _switching_often():
            self._load_lsp()
        self._call_soon(self._attach)

    def _call_soon(self, callback: Callable[[], None]) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed: the server has stopped
            self._loop.call_soon_threadsafe(callback)

    def _freeze_when_idle(self, deadline: float) -> None:
        """:func:`_freeze` once no request is in flight (a full collection is ~20 ms the first
        run should not wait for), or at ``deadline`` whatever runs."""
        assert self._loop is not None
        if self._wire.busy and time.monotonic() < deadline:
            self._loop.call_later(QUIET, self._freeze_when_idle, deadline)
        else:
            _freeze()

    def _wait_for_quiet(self) -> None:
        while not self._pygls_wanted.is_set():
            quiet_for = time.monotonic() - self._wire.last_received
            if quiet_for >= QUIET:
                return
            self._pygls_wanted.wait(QUIET - quiet_for)

    def _load_lsp(self) -> None:
        try:
            self._lsp.load()
        except Exception:  # loaded again when attached, which reports the error there
            logger.exception("could not load the LSP face in the background")

    def _attach(self) -> None:
        if not self._wire.attached:
            self._lsp.attach(self._app, self._wire)
            _freeze()


def _warm_tools() -> None:
    """Build the built-in tools the runs share, as the first run would (their argument models
    and JSON schemas are built then)."""
    try:
        from tether.tools.builtin import shared_builtin_tools

        shared_builtin_tools()
    except Exception:  # built again where they are needed, which reports the error there
        logger.exception("could not build the built-in tools in the background")


def _freeze() -> None:
    """What is loaded by now lives as long as the server: out of the collector's full passes,
    which then walk only what requests make (a big append's were 30-90 ms each otherwise).
    From then on the collector runs at :data:`COLLECTOR_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


@contextlib.contextmanager
def _switching_often() -> Iterator[None]:
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(_BACKGROUND_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(switch_interval)


def _import(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # imported again where it is needed, which reports the error there
            logger.exception("could not import %s in the background", name)


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
        elif len(data) <= self.SLICE and not self._transport.is_closing():
            self._transport.write(data)  # the usual answer: one piece, as it is
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


class _WireInput(asyncio.Protocol):
    """Bytes from the client (stdin, or a TCP socket) into the wire."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire

    def data_received(self, data: bytes) -> None:
        self._wire.data_received(data)

    def eof_received(self) -> bool | None:
        self._wire.connection_lost()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._wire.connection_lost()


class _TcpClient(_WireInput):
    """A TCP client: the socket is both ends of the wire. Only the first one is served."""

    def __init__(self, wire: Wire, listener: _Listener) -> None:
        super().__init__(wire)
        self._listener = listener
        self._served = False
        self._output: _Output | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a socket's transport; uvloop's do not derive from asyncio's classes
        transport = cast(asyncio.Transport, transport)
        if self._listener.taken:
            logger.warning("refused a second client: this server serves one")
            transport.close()
            return
        self._listener.taken = self._served = True
        _read_in_heap_sized_pieces(transport)
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


async def serve_stdio(
    app: App, lsp: LspFace, stdin_fd: int = 0, stdout_fd: int | None = None
) -> int:
    """Serve one client on stdin/stdout until ``exit`` or end of input; the exit code."""
    loop = asyncio.get_running_loop()
    wire = open_wire(app, lsp)
    out_fd = _reserve_stdout() if stdout_fd is None else stdout_fd
    close_writer, output = await _connect_writer(loop, wire, out_fd)
    stop_reading = await _connect_reader(loop, wire, stdin_fd, output)
    try:
        await wire.stopped.wait()
    finally:
        stop_reading()
        await _settle(wire)
        wire.flush()
        await close_writer()
        await app.aclose()
    return wire.exit_code or 0


async def serve_tcp(app: App, lsp: LspFace, host: str, port: int) -> int:
    """Serve one client on a TCP socket; the server ends when that client leaves."""
    loop = asyncio.get_running_loop()
    wire = open_wire(app, lsp)
    state = _Listener()
    listener = await loop.create_server(lambda: _TcpClient(wire, state), host, port)
    logger.info("listening on %s:%d", host, port)
    try:
        await wire.stopped.wait()
    finally:
        listener.close()
        await _settle(wire)
        wire.flush()
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
    stream = _WireInput(wire)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: stream, pipe)
    except ValueError:  # a regular file cannot be polled: read it on a thread
        task = asyncio.ensure_future(_read_file(loop, pipe, stream))

        def stop_reading() -> None:
            task.cancel()

        return stop_reading
    _read_in_heap_sized_pieces(transport)
    if output is not None:
        output.backed_up = _pause_reading(transport)
    return transport.close


def _read_in_heap_sized_pieces(transport: asyncio.BaseTransport) -> None:
    """Have the transport read :data:`READ_SIZE` bytes at a time (asyncio's own transports
    take their read size from ``max_size``; another transport is left as it is)."""
    if isinstance(getattr(transport, "max_size", None), int):
        transport.max_size = READ_SIZE  # type: ignore[attr-defined]


async def _read_file(loop: asyncio.AbstractEventLoop, pipe: Any, stream: _WireInput) -> None:
    while chunk := await loop.run_in_executor(None, pipe.read, 65536):
        stream.data_received(chunk)
    stream.eof_received()


async def _nothing_to_flush() -> None:
    return None
