"""One connection to an MCP server through the official ``mcp`` SDK, held open by a task of its own.

The SDK's transports and ``ClientSession`` are anyio context managers that must be entered and
left in the same task, while a connection outlives the run that opened it. So a dedicated task
enters them, hands the session over, and holds them open until :meth:`McpConnection.aclose`;
calls are made from any task. An HTTP server speaks streamable HTTP, or the older HTTP+SSE
transport (``transport: "sse"``: a GET stream of events, messages POSTed to the endpoint it
names). On Linux a stdio server is started through the command wrapper
(:mod:`tether.tools.wrapper`), confined as ``tools.mcp_sandbox`` says or not at all, so that its
whole process tree ends when it stops and when tether dies, whatever its processes do to
detach. Leaving the stdio transport closes the server's stdin and, after a grace period, kills
its process group (every wait is bounded). A stdio server's messages pass a
:class:`~tether.tools.mcp.guard.Guard` (:mod:`tether.tools.mcp.stdio`).

The server's stderr goes to tether's stderr, never to its stdout (which carries protocol frames).
A server's ``notifications/tools/list_changed`` calls ``on_tools_changed`` (the tools are listed
again before the next model call).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from tether import __version__
from tether.protocol.tools import McpServerSpec
from tether.tools.confinement import (
    WRAPPED,
    McpSandbox,
    SandboxPolicy,
    hard_links_refusal,
    wrap,
)
from tether.tools.mcp.guard import INVALID_ANSWER, Guard
from tether.tools.mcp.stdio import stdio_transport
from tether.tools.mcp.tools import trim_tool

logger = logging.getLogger(__name__)

PING_TIMEOUT = 5.0  # seconds a server has to answer a ping after one of its calls timed out
MAX_TOOLS = 128  # tools taken from one server
MAX_PROMPTS = 128  # prompts taken from one server
MAX_RESOURCES = 1024  # resources taken from one server's list
MAX_LIST_PAGES = 16  # pages of tools/list read from one server
CLOSE_TIMEOUT = 10.0  # the SDK's own shutdown takes at most about 6 s
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
SSE_TIMEOUT = 30.0  # seconds for the HTTP requests of an SSE server
SSE_READ_TIMEOUT = 300.0  # seconds its event stream may stay silent (servers ping more often)
CONNECTION_CLOSED = types.CONNECTION_CLOSED
REQUEST_TIMEOUT = types.REQUEST_TIMEOUT

Progress = ProgressFnT
T = TypeVar("T")

__all__ = [
    "CONNECTION_CLOSED",
    "INVALID_ANSWER",
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
        self.guard = Guard(spec.name)
        self.on_tools_changed: Callable[[], None] = _nothing
        self._session: ClientSession | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, seconds: float) -> None:
        """Start the server and initialize it, within ``seconds``; raises
        :class:`TimeoutError` when it takes longer, or why it failed. A stdio server runs in
        ``sandbox`` when one is given (and Landlock is there). The caller closes the connection
        (:meth:`aclose`) when this raises, cancellation included."""
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp {self.spec.name}")
        # ``ready`` is not awaited itself: a cancelled wait would cancel it, and its end
        # (cancelled by a connection that ended first) is no cancellation of the caller's.
        done, _ = await asyncio.wait({ready}, timeout=seconds)
        if not done:
            raise TimeoutError(f"no answer to initialize within {seconds:g} s")
        if ready.cancelled():
            raise ConnectionError("the connection ended while the server was starting")
        self._session = ready.result()

    async def list_tools(self, seconds: float) -> list[types.Tool]:
        """The tools the server offers (trimmed: see :func:`trim_tool`): the pages of its list,
        up to :data:`MAX_LIST_PAGES` pages (the rest is not asked for, and logged), all within
        ``seconds`` seconds."""
        session = self._require()
        tools: list[types.Tool] = []
        cursor: str | None = None
        async with asyncio.timeout(seconds):
            for _ in range(MAX_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._watch(session.list_tools(params=params))
                trimmed = (trim_tool(self.spec.name, tool) for tool in page.tools)
                tools.extend(tool for tool in trimmed if tool is not None)
                cursor = page.next_cursor
                if not cursor or len(tools) > MAX_TOOLS:
                    return tools
        logger.warning(
            "MCP server %s: its list of tools goes on past %d pages; the rest is not read",
            self.spec.name,
            MAX_LIST_PAGES,
        )
        return tools

    @property
    def capabilities(self) -> types.ServerCapabilities | None:
        return None if self._session is None else self._session.server_capabilities

    async def list_prompts(self, seconds: float) -> list[types.Prompt]:
        """The prompts the server offers (none when it declares no ``prompts`` capability): at
        most :data:`MAX_PROMPTS`, read within ``seconds``."""
        session = self._require()
        capabilities = session.server_capabilities
        if capabilities is None or capabilities.prompts is None:
            return []
        prompts: list[types.Prompt] = []
        cursor: str | None = None
        async with asyncio.timeout(seconds):
            for _ in range(MAX_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._watch(session.list_prompts(params=params))
                prompts.extend(page.prompts)
                cursor = page.next_cursor
                if not cursor or len(prompts) >= MAX_PROMPTS:
                    break
        return prompts[:MAX_PROMPTS]

    async def list_resources(self, seconds: float) -> list[types.Resource]:
        """The resources the server lists (none without a ``resources`` capability): at most
        :data:`MAX_RESOURCES`, read within ``seconds``."""
        session = self._require()
        capabilities = session.server_capabilities
        if capabilities is None or capabilities.resources is None:
            return []
        resources: list[types.Resource] = []
        cursor: str | None = None
        async with asyncio.timeout(seconds):
            for _ in range(MAX_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._watch(session.list_resources(params=params))
                resources.extend(page.resources)
                cursor = page.next_cursor
                if not cursor or len(resources) >= MAX_RESOURCES:
                    break
        return resources[:MAX_RESOURCES]

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> types.GetPromptResult:
        session = self._require()
        async with asyncio.timeout(self.spec.timeout):
            return await self._watch(session.get_prompt(name, arguments))

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        session = self._require()
        async with asyncio.timeout(self.spec.timeout):
            return await self._watch(session.read_resource(uri))

    async def _on_message(self, message: types.ServerNotification | Exception) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            logger.info("MCP server %s: its list of tools changed", self.spec.name)
            self.on_tools_changed()

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

    async def ping(self) -> bool:
        """Whether the server answers a ping within :data:`PING_TIMEOUT` seconds (or its call
        timeout, when that is shorter)."""
        try:
            session = self._require()
            async with asyncio.timeout(min(PING_TIMEOUT, self.spec.timeout)):
                await self._watch(session.send_ping())
        except Exception:
            return False
        return True

    async def aclose(self) -> None:
        """Stop the server (its process, for stdio) and release the transport. The end of the
        task that holds the connection (cancelled, say) is not raised: only the cancellation of
        the caller is."""
        self.stopped = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if self._session is None:  # still starting: nothing waits on the stop event yet
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            await asyncio.wait({task})

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
                        message_handler=self._on_message,
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
        if spec.url is not None and spec.transport == "sse":
            async with sse_client(
                spec.url,
                headers=spec.headers,
                timeout=SSE_TIMEOUT,
                sse_read_timeout=SSE_READ_TIMEOUT,
            ) as streams:
                yield streams
            return
        if spec.url is not None:
            auth = None
            if spec.oauth:
                from tether.tools.mcp.oauth import oauth_provider

                auth = await stack.enter_async_context(oauth_provider(spec.name, spec.url))
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=spec.headers, timeout=HTTP_TIMEOUT, auth=auth)
            )
            async with streamable_http_client(spec.url, http_client=http) as streams:
                yield streams
            return
        assert spec.command is not None
        argv, env = [spec.command, *spec.args], dict(spec.env)
        if WRAPPED:
            sandbox = self.sandbox or McpSandbox(SandboxPolicy(mode="off"), self.cwd)
            argv, env = await _wrapped(argv, env, sandbox, self.cwd, stack)
        async with stdio_transport(
            argv[0],
            argv[1:],
            env=env,
            cwd=self.cwd,
            errlog=_stderr(),
            guard=self.guard,
            name=spec.name,
        ) as streams:
            yield streams


async def _wrapped(
    argv: list[str],
    env: dict[str, str],
    sandbox: McpSandbox,
    cwd: Path,
    stack: contextlib.AsyncExitStack,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start the server through the command wrapper
    (:mod:`tether.tools.wrapper`: the server's whole process tree ends with it), confined when
    its policy confines, with a temporary directory of its own then (``TMPDIR``), removed once
    the server has stopped."""
    path = (get_default_environment() | env).get("PATH", os.defpath)
    await asyncio.to_thread(_runnable, argv[0], path, cwd)
    if sandbox.policy.confines:
        refusal = await asyncio.to_thread(hard_links_refusal, sandbox.policy, sandbox.workspace)
        if refusal is not None:
            raise PermissionError(refusal)
        tmpdir = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="tether-mcp-"))
        stack.push_async_callback(asyncio.to_thread, shutil.rmtree, tmpdir, True)
        env = {**env, "TMPDIR": str(tmpdir), "TMP": str(tmpdir), "TEMP": str(tmpdir)}
    else:
        tmpdir = None
    wrapped = await asyncio.to_thread(
        wrap,
        sandbox.policy,
        argv,
        workspace=sandbox.workspace,
        tmpdir=tmpdir,
        environ=get_default_environment() | env,
    )
    return wrapped, env


def _runnable(program: str, path: str, cwd: Path) -> None:
    """Raise as starting ``program`` directly would where it cannot be run: through the wrapper
    it would start, then fail, and say why only on the server's stderr."""
    if "/" not in program:
        if shutil.which(program, path=path) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        return
    found = cwd / program
    if not found.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if not (found.is_file() and os.access(found, os.X_OK)):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)


def _nothing() -> None:
    pass


def describe(exc: BaseException) -> str:
    """A one-line account of a failure (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, ValidationError) and exc.error_count():
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"not a valid {exc.title}: {where + ': ' if where else ''}{first['msg']}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _stderr() -> TextIO:
    """Where a server's stderr goes: tether's stderr (a real file descriptor)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or sys.stderr
    return sys.stderr
