"""The stdio transport of an MCP server, reading through tether's :mod:`guard`.

It works like the SDK's ``stdio_client``: the server runs in a process group of its own with a
minimal environment, two tasks bridge its pipes to the session's memory streams (without buffer,
so a server is read only as fast as tether handles its messages), and leaving closes its stdin,
waits, then kills the whole group, every wait bounded and shielded from cancellation. Unlike it,
the server's stdout is split into lines in linear time under a size limit, and each line passes
the :class:`~tether.tools.mcp.guard.Guard` before the session sees it: the SDK's reader keeps a
line without a newline in a string it copies at every chunk, so one endless line stalls the
event loop and takes all memory. The server's stderr is relayed to tether's a line at a time,
each line named after its server and with its control characters escaped (a server is not
trusted to write to the terminal or log viewer that shows tether's stderr).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

import anyio
import anyio.lowlevel
from anyio.abc import Process
from mcp.client._transport import TransportStreams
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from tether.escapes import inert, printable
from tether.tools.mcp.guard import MAX_MESSAGE_BYTES, Guard, read_lines

logger = logging.getLogger(__name__)

EXIT_TIMEOUT = 2.0  # for the server to exit once its stdin is closed, then after SIGTERM
FLUSH_TIMEOUT = 0.5  # for messages already accepted to be written before stdin closes
STDERR_LINE_BYTES = 8192  # a longer stderr line is cut, with the count of bytes left out
_PIPE_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str,
    args: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    errlog: TextIO,
    guard: Guard,
    name: str = "",
    limit: int = MAX_MESSAGE_BYTES,
) -> AsyncIterator[TransportStreams]:
    """Run the server and yield the (read, write) streams of its messages; its stderr lines go
    to ``errlog``, escaped, after ``[mcp NAME]``."""
    if sys.platform == "win32":  # no process groups: the SDK's own transport
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=command, args=args, env=env or None, cwd=cwd)
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams
        return
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | env,
        cwd=cwd,
        start_new_session=True,
    )
    pipes = _Pipes(process, guard, limit)
    prefix = f"[mcp {printable(name or command)}] "
    async with anyio.create_task_group() as group:
        group.start_soon(pipes.read)
        group.start_soon(pipes.write)
        group.start_soon(relay_stderr, process.stderr, errlog, prefix)
        try:
            yield pipes.read_stream, pipes.write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await pipes.shutdown()
            group.cancel_scope.cancel()


class _Pipes:
    """The two pipe tasks of one server process and their memory streams."""

    def __init__(self, process: Process, guard: Guard, limit: int) -> None:
        self.process = process
        self.guard = guard
        self.limit = limit
        self.to_session, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self.from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self.written = anyio.Event()

    async def read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            async with self.to_session:
                async for line in read_lines(stdout, self.limit):
                    message = self.guard.inbound(line)
                    if message is not None:
                        await self.to_session.send(message)
        except _PIPE_ERRORS:
            pass  # the session is gone, or the pipe was closed under the read
        finally:
            await self._drain()

    async def write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            async with self.from_session:
                async for message in self.from_session:
                    self.guard.outbound(message)
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(text.encode() + b"\n")
        except _PIPE_ERRORS:
            # the server may still run: end the session's read so no request waits forever
            await self.to_session.aclose()
        finally:
            self.written.set()

    async def shutdown(self) -> None:
        """Stop traffic, let accepted messages out, stop the server, release the streams."""
        self.read_stream.close()  # the reader goes on draining, so a server stuck writing can exit
        self.write_stream.close()
        with anyio.move_on_after(FLUSH_TIMEOUT):
            await self.written.wait()
        await self._stop()
        for stream in (self.read_stream, self.write_stream, self.to_session, self.from_session):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async def _stop(self) -> None:
        process = self.process
        await _close(process.stdin)
        if not await _exited(process, EXIT_TIMEOUT):
            await terminate_posix_process_tree(process, EXIT_TIMEOUT)
            if not await _exited(process, EXIT_TIMEOUT):
                logger.warning("MCP server process %d survived its kill; left", process.pid)
        await _close(process.stdout)
        transport = getattr(getattr(process, "_process", None), "_transport", None)
        close = getattr(transport, "close", None)
        if callable(close):  # else asyncio warns when a surviving child holds a pipe
            with contextlib.suppress(PermissionError):
                close()

    async def _drain(self) -> None:
        """Read and drop what the server still writes, until its stdout is closed."""
        stdout = self.process.stdout
        assert stdout is not None
        with anyio.CancelScope(shield=True), contextlib.suppress(anyio.EndOfStream, *_PIPE_ERRORS):
            while True:
                await stdout.receive()


async def relay_stderr(
    stream: anyio.abc.ByteReceiveStream | None, errlog: TextIO, prefix: str
) -> None:
    """Write each line of ``stream`` to ``errlog`` after ``prefix``, escaped (:func:`inert`), a
    line cut at :data:`STDERR_LINE_BYTES`; a last line without its newline is written too."""
    if stream is None:
        return
    pending = bytearray()
    dropped = 0
    with contextlib.suppress(*_PIPE_ERRORS):
        async for chunk in stream:
            *lines, rest = chunk.split(b"\n")
            for line in lines:
                room = max(STDERR_LINE_BYTES - len(pending), 0)
                pending += line[:room]
                _write_line(errlog, prefix, pending, dropped + len(line) - len(line[:room]))
                pending.clear()
                dropped = 0
            room = max(STDERR_LINE_BYTES - len(pending), 0)
            pending += rest[:room]
            dropped += len(rest) - len(rest[:room])
    if pending or dropped:
        _write_line(errlog, prefix, pending, dropped)


def _write_line(errlog: TextIO, prefix: str, line: bytes | bytearray, dropped: int) -> None:
    text = inert(bytes(line).decode("utf-8", "replace"))
    cut = f" [{dropped} more bytes]" if dropped else ""
    with contextlib.suppress(OSError, ValueError):
        errlog.write(f"{prefix}{text}{cut}\n")
        errlog.flush()


async def _close(stream: anyio.abc.AsyncResource | None) -> None:
    if stream is not None:
        with contextlib.suppress(*_PIPE_ERRORS):
            await stream.aclose()


async def _exited(process: Process, seconds: float) -> bool:
    """Whether the process ended within ``seconds`` (polled: ``wait`` also waits for the pipes'
    end, which a surviving child can hold open)."""
    with anyio.move_on_after(seconds):
        while process.returncode is None:  # noqa: ASYNC110 - no event tells the exit alone
            await anyio.sleep(0.01)
        return True
    return False
