"""One connection to an MCP server through the official ``mcp`` SDK, held open by a task of its own.

The SDK's transports and ``ClientSession`` are anyio context managers that must be entered and
left in the same task, while a connection outlives the run that opened it. So a dedicated task
enters them, hands the session over, and holds them open until :meth:`McpConnection.aclose`;
calls are made from any task. Leaving the stdio transport closes the server's stdin and, after a
grace period, kills its process group (the SDK bounds every wait).

The server's stderr goes to tether's stderr, never to its stdout (which carries protocol frames).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import httpx2
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client._transport import TransportStreams
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from tether import __version__
from tether.protocol.tools import McpServerSpec
from tether.tools.confinement import McpSandbox, wrap

logger = logging.getLogger(__name__)

START_TIMEOUT = 30.0  # seconds to start a server, initialize it and list its tools
CLOSE_TIMEOUT = 10.0  # the SDK's own shutdown takes at most about 6 s
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
CONNECTION_CLOSED = types.CONNECTION_CLOSED
REQUEST_TIMEOUT = types.REQUEST_TIMEOUT

Progress = ProgressFnT
T = TypeVar("T")

__all__ = [
    "CONNECTION_CLOSED",
    "REQUEST_TIMEOUT",
    "MCPError",
    "McpConnection",
    "Progress",
    "describe",
]


class McpConnection:
    """A running, initialized MCP server. ``stopped`` turns true when it is found gone."""

    def __init__(self, spec: McpServerSpec, cwd: Path, sandbox: McpSandbox | None = None) -> None:
        self.spec = spec
        self.cwd = cwd
        self.sandbox = sandbox
        self.stopped = False
        self._session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, spec: McpServerSpec, cwd: Path, sandbox: McpSandbox | None = None
    ) -> McpConnection:
        """Start the server and initialize it; raises (after cleaning up) when that fails.
        A stdio server runs in ``sandbox`` when one is given (and Landlock is there)."""
        connection = cls(spec, cwd, sandbox)
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        connection._task = asyncio.create_task(connection._hold(ready), name=f"mcp {spec.name}")
        try:
            async with asyncio.timeout(START_TIMEOUT):
                connection._session = await ready
        except BaseException:
            await connection.aclose()
            raise
        return connection

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server offers (all pages)."""
        session = self._require()
        tools: list[types.Tool] = []
        cursor: str | None = None
        async with asyncio.timeout(START_TIMEOUT):
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._watch(session.list_tools(params=params))
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], progress: Progress
    ) -> types.CallToolResult:
        """Forward a call; cancelling the calling task sends ``notifications/cancelled``."""
        session = self._require()
        return await self._watch(
            session.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.spec.timeout,
                progress_callback=progress,
            )
        )

    async def aclose(self) -> None:
        """Stop the server (its process, for stdio) and release the transport."""
        self.stopped = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if self._session is None:  # still starting: nothing waits on the stop event yet
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self, request: Awaitable[T]) -> T:
        try:
            return await request
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self.stopped = True
            raise

    def _require(self) -> ClientSession:
        if self._session is None or self.stopped:
            raise MCPError(CONNECTION_CLOSED, "Connection closed")
        return self._session

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(
                    ClientSession(
                        read,
                        write,
                        client_info=types.Implementation(name="tether", version=__version__),
                    )
                )
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                logger.warning("MCP server %s: connection ended: %s", self.spec.name, describe(exc))
        finally:
            self.stopped = True
            if not ready.done():
                ready.cancel()

    @contextlib.asynccontextmanager
    async def _transport(self, stack: contextlib.AsyncExitStack) -> AsyncIterator[TransportStreams]:
        spec = self.spec
        if spec.url is not None:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=spec.headers, timeout=HTTP_TIMEOUT)
            )
            async with streamable_http_client(spec.url, http_client=http) as streams:
                yield streams
            return
        assert spec.command is not None
        params = StdioServerParameters(
            command=spec.command, args=spec.args, env=spec.env or None, cwd=self.cwd
        )
        if self.sandbox is not None and self.sandbox.policy.confines:
            params = await _confined(params, self.sandbox, stack)
        async with stdio_client(params, errlog=_stderr()) as streams:
            yield streams


async def _confined(
    params: StdioServerParameters, sandbox: McpSandbox, stack: contextlib.AsyncExitStack
) -> StdioServerParameters:
    """``params`` that start the server through the Landlock wrapper, with a temporary
    directory of its own (``TMPDIR``), removed once the server has stopped."""
    tmpdir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="tether-mcp-"))
    stack.push_async_callback(asyncio.to_thread, shutil.rmtree, tmpdir, True)
    env = {**(params.env or {}), "TMPDIR": str(tmpdir), "TMP": str(tmpdir), "TEMP": str(tmpdir)}
    argv = wrap(
        sandbox.policy,
        [params.command, *params.args],
        workspace=sandbox.workspace,
        tmpdir=tmpdir,
        environ=get_default_environment() | env,
    )
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=params.cwd)


def describe(exc: BaseException) -> str:
    """A one-line account of a failure (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stderr() -> TextIO:
    """Where a server's stderr goes: tether's stderr (a real file descriptor)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or sys.stderr
    return sys.stderr
