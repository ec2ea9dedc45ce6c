"""MCP servers as tool sources: which servers a session has, starting them, and its executor.

A session's servers are those of ``tools.mcp_servers`` (shared by the sessions of a workspace)
plus those it was created with (``session/create {mcpServers}``, which win on a name clash). The
latter are kept here, in memory, for the life of the process: they never enter the session or
the store, since their ``env`` and ``headers`` may hold credentials.

A session's servers start in the background when the session is made (:meth:`McpManager.start`),
or else when a run first needs the tool list; each is asked for its tools (and its prompts and
resources, when it declares them) at the start of every run, but for the first run after a start
in the background, which takes what that start listed (waiting for it when it is still under
way). A server that says its tools changed (``notifications/tools/list_changed``) is asked again
before the run's next model call. Its prompts are the session's slash commands
``/mcp__server__prompt``; a prompt's resource link to a URI a server lists is read through that
server.

A server that fails to start (or does not initialize within ``mcp.start_timeout``), or that
stopped (it crashed), is logged and restarted at the next run; meanwhile its tools (as last
listed) answer with an error result saying so, and the run goes on with the other tools.
Nothing here raises but cancellation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

from tether.protocol.tools import McpServerSpec, ProposedChange, ToolSpec
from tether.tools.base import (
    SourceFailure,
    SourcePrompt,
    SourceResource,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
)
from tether.tools.confinement import McpSandbox, SandboxPolicy
from tether.tools.registry import ToolRegistry

if TYPE_CHECKING:
    import mcp_types as types

    from tether.tools.mcp.connection import McpConnection, MCPError

logger = logging.getLogger(__name__)

SEPARATOR = "__"
DEFAULT_START_TIMEOUT = 10.0  # seconds: mcp.start_timeout


class McpServer:
    """One server: its connection while it runs, and the tools it listed last."""

    def __init__(self, spec: McpServerSpec, cwd: Path, sandbox: McpSandbox | None = None) -> None:
        self.spec = spec
        self.cwd = cwd
        self.sandbox = sandbox  # the OS sandbox of a stdio server (tools.mcp_sandbox)
        self.error: str | None = None  # why it is not running, when it is not
        self._connection: McpConnection | None = None
        self._tools: list[types.Tool] = []
        self.prompts: list[types.Prompt] = []
        self.resources: list[types.Resource] = []
        self.tools_changed = False  # the server said so since its tools were last listed
        self._lock = asyncio.Lock()
        self._closed = False
        self._stopping: set[asyncio.Future[None]] = set()  # connections being stopped
        self._started_early = False  # by start_early, and no run has listed its tools since

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def tools(self) -> list[types.Tool]:
        """The tools it listed last."""
        return self._tools

    @property
    def running(self) -> bool:
        return self._connection is not None and not self._connection.stopped

    async def refresh(self, start_timeout: float = DEFAULT_START_TIMEOUT) -> list[types.Tool]:
        """Start the server if it is not running (again, if it stopped) and list its tools; the
        last listing when that fails. Starting it, initializing it and listing its tools have
        ``start_timeout`` seconds in all (``mcp.start_timeout``; listing the tools of a server
        that runs has as much); a server that fails is stopped in the background, so the run
        goes on at once without it."""
        from tether.tools.mcp.connection import describe

        async with self._lock:
            if self._closed:
                return []
            if self._started_early:  # its listing (or why it failed) is this run's
                self._started_early = False
                if self.running or self.error is not None:
                    return self._tools
            connection = self._connection
            if connection is not None and not connection.stopped:
                try:
                    self.tools_changed = False
                    self._tools = await connection.list_tools(start_timeout)
                    await self._list_the_rest(connection, start_timeout)
                    return self._tools
                except Exception as exc:
                    logger.warning("MCP server %s stopped answering (%s)", self.name, describe(exc))
            if connection is not None:
                logger.info("restarting MCP server %s", self.name)
                self._stop(connection)
            return await self._start(start_timeout)

    async def start_early(self, start_timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start the server before a run needs it (when its session is made), within
        ``start_timeout`` seconds; the next :meth:`refresh` takes what it listed, or the reason
        it failed, rather than asking (or trying) again. Nothing when it runs already."""
        async with self._lock:
            if self._closed or self.running:
                return
            await self._start(start_timeout)
            self._started_early = True

    async def _start(self, seconds: float) -> list[types.Tool]:
        from tether.tools.mcp.connection import McpConnection

        logger.debug("starting MCP server %s (%s)", self.name, self._described())
        connection = McpConnection(self.spec, self.cwd, self.sandbox)
        connection.on_tools_changed = self._note_tools_changed
        if self.spec.oauth:  # a person may have to sign in first
            from tether.tools.mcp.oauth import SIGN_IN_TIMEOUT

            seconds = max(seconds, SIGN_IN_TIMEOUT)
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + seconds  # for the start and the listing together
        try:
            await connection.start(seconds)
        except BaseException as exc:
            self._stop(connection)
            if not isinstance(exc, Exception):
                raise
            return self._failed(exc, "did not initialize", "failed to start", seconds)
        try:
            self.tools_changed = False
            self._tools = await connection.list_tools(max(0.0, deadline - loop.time()))
            await self._list_the_rest(connection, max(0.0, deadline - loop.time()))
        except BaseException as exc:
            self._stop(connection)
            if not isinstance(exc, Exception):
                raise
            return self._failed(exc, "did not list its tools", "did not list its tools", seconds)
        self._connection, self.error = connection, None
        logger.info(
            "MCP server %s started with %d tools in %.0f ms",
            self.name,
            len(self._tools),
            (loop.time() - started) * 1000,
        )
        return self._tools

    def _described(self) -> str:
        """How the server is reached, for the log: the program (not its arguments, which may
        carry a token) or the URL without credentials or query; never its env or headers."""
        from tether.secrets import shown_url

        spec = self.spec
        if spec.url is not None:
            return f"{spec.transport or 'streamable-http'} {shown_url(spec.url)}"
        mode = self.sandbox.policy.mode if self.sandbox is not None else "off"
        sandbox = f", sandbox {mode}"
        program = Path(spec.command or "").name
        return f"stdio {program}, {len(spec.args)} args, cwd {self.cwd}{sandbox}"

    def _note_tools_changed(self) -> None:
        self.tools_changed = True

    async def _list_the_rest(self, connection: McpConnection, seconds: float) -> None:
        """The server's prompts and resources (kept as they were when it fails to list them:
        its tools matter more, and go on)."""
        from tether.tools.mcp.connection import describe

        try:
            self.prompts = await connection.list_prompts(seconds)
            self.resources = await connection.list_resources(seconds)
        except Exception as exc:
            logger.warning(
                "MCP server %s: could not list its prompts or resources: %s",
                self.name,
                describe(exc),
            )

    async def render_prompt(self, name: str, arguments: Mapping[str, str]) -> str:
        """The prompt ``name`` of the server with ``arguments`` (``prompts/get``), as the text
        of one user message; :class:`ToolError` saying why when the server fails."""
        from tether.tools.mcp.connection import describe
        from tether.tools.mcp.tools import prompt_text

        connection = self._connection
        if connection is None or connection.stopped:
            raise ToolError(f"{self._unavailable()} ({self.error or 'it stopped'})")
        try:
            result = await connection.get_prompt(name, dict(arguments))
        except Exception as exc:
            raise ToolError(
                f"MCP server {self.name!r} did not give its prompt {name!r}: {describe(exc)}"
            ) from exc
        return prompt_text(result)

    async def read_resource(self, uri: str) -> SourceResource:
        """The resource ``uri`` (``resources/read``) as text; an error resource saying why when
        the server fails."""
        from tether.tools.mcp.connection import describe
        from tether.tools.mcp.tools import resource_text

        source = f"MCP server {self.name!r}"
        connection = self._connection
        if connection is None or connection.stopped:
            reason = f"{self._unavailable()} ({self.error or 'it stopped'})"
            return SourceResource(uri=uri, source=source, text=reason, is_error=True)
        try:
            result = await connection.read_resource(uri)
        except Exception as exc:
            text = f"{source} could not read {uri}: {describe(exc)}"
            return SourceResource(uri=uri, source=source, text=text, is_error=True)
        return SourceResource(uri=uri, source=source, text=resource_text(result))

    def _failed(
        self, exc: Exception, timed_out: str, failed: str, timeout: float
    ) -> list[types.Tool]:
        """Note why the server is not running; its last listing."""
        from tether.tools.mcp.connection import describe

        if isinstance(exc, TimeoutError):
            self.error = f"it {timed_out} within {timeout:g} s (mcp.start_timeout)"
        else:
            self.error = f"it {failed}: {describe(exc)}"
        logger.error("MCP server %s %s", self.name, self.error.removeprefix("it "))
        return self._tools

    async def call(self, tool: str, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """Forward a call; every failure is an error result. The whole call (sending it
        included: a server that does not read would hold the send) has ``timeout`` seconds."""
        from tether.tools.mcp.connection import MCPError, describe
        from tether.tools.mcp.tools import render_result

        connection = self._connection
        if connection is None or connection.stopped:
            reason = self.error or "it stopped"
            return ToolResult(f"{self._unavailable()} ({reason}); {_RESTART}", is_error=True)

        async def report(progress: float, total: float | None, message: str | None) -> None:
            context.progress(message or (f"{progress:g}/{total:g}" if total else f"{progress:g}"))

        invalid = connection.guard.invalid
        try:
            async with asyncio.timeout(self.spec.timeout):
                result = await connection.call_tool(tool, arguments, report)
        except TimeoutError:
            return await self._timed_out(connection, tool, invalid)
        except MCPError as exc:
            return await self._refused(connection, tool, exc, invalid)
        except Exception as exc:  # an answer the SDK could not take as a CallToolResult
            logger.warning("MCP server %s: invalid result for %s: %s", self.name, tool, exc)
            return ToolResult(
                f"MCP server {self.name!r} sent an invalid result for {tool!r}: {describe(exc)}",
                is_error=True,
            )
        return render_result(result)

    async def _refused(
        self, connection: McpConnection, tool: str, exc: MCPError, invalid: int
    ) -> ToolResult:
        from tether.tools.mcp.connection import CONNECTION_CLOSED, INVALID_ANSWER, REQUEST_TIMEOUT

        if exc.code == CONNECTION_CLOSED:
            self.error = f"it stopped while running {tool!r}"
            logger.error("MCP server %s stopped while running %s", self.name, tool)
            return ToolResult(
                f"MCP server {self.name!r} stopped (it crashed or exited) while running "
                f"{tool!r}; {_RESTART}",
                is_error=True,
            )
        if exc.code == REQUEST_TIMEOUT:
            return await self._timed_out(connection, tool, invalid)
        if exc.code == INVALID_ANSWER:
            return ToolResult(
                f"MCP server {self.name!r} sent an invalid answer to {tool!r}: {exc.message}",
                is_error=True,
            )
        return ToolResult(f"MCP server {self.name!r} refused the call: {exc}", is_error=True)

    async def _timed_out(self, connection: McpConnection, tool: str, invalid: int) -> ToolResult:
        """The result of a call that timed out. A server that then does not answer a ping either
        is stopped (and started again at the next run): its other calls fail at once instead of
        each waiting out its timeout."""
        message = f"{tool!r} on MCP server {self.name!r} timed out after {self.spec.timeout:g} s"
        sent = connection.guard.invalid - invalid
        if sent:
            message += (
                f"; meanwhile it sent {sent} invalid message(s), the last: "
                f"{connection.guard.last_invalid}"
            )
        if not await connection.ping():
            self.error = f"it stopped answering: {tool!r} timed out and a ping got no answer"
            logger.error("MCP server %s stopped answering; stopping it", self.name)
            self._stop(connection)
            message += f"; the server does not answer a ping either, so it was stopped; {_RESTART}"
        return ToolResult(message, is_error=True)

    def _stop(self, connection: McpConnection) -> None:
        """Stop ``connection`` in the background (it takes seconds); :meth:`aclose` awaits it."""
        logger.debug("stopping MCP server %s", self.name)
        connection.stopped = True
        if self._connection is connection:
            self._connection = None
        task = asyncio.ensure_future(connection.aclose())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def aclose(self) -> None:
        async with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
            if connection is not None:
                logger.debug("stopping MCP server %s", self.name)
                await connection.aclose()
                logger.debug("MCP server %s stopped", self.name)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    def _unavailable(self) -> str:
        return f"MCP server {self.name!r} is not running"


_RESTART = "it is started again at the next run"


class McpTool(Tool):
    """A tool of an MCP server, offered under its prefixed name."""

    def __init__(self, server: McpServer, spec: ToolSpec, remote_name: str) -> None:
        self.spec = spec
        self.server = server
        self.remote_name = remote_name

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await self.server.call(self.remote_name, arguments, context)


class McpExecutor:
    """The tool registry of a run, telling calls to a server that offered no tools why; the
    servers' prompts and resources; the tools listed again when a server says they changed."""

    def __init__(
        self,
        registry: ToolRegistry,
        failures: Mapping[str, str],
        servers: Sequence[McpServer] = (),
        rebuild: Callable[[], ToolRegistry] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.registry = registry
        self._failures = [
            SourceFailure(f"MCP server {server!r}", reason, f"{server}{SEPARATOR}")
            for server, reason in failures.items()
        ]
        self._servers = servers
        self._rebuild = rebuild
        self._start_timeout = start_timeout

    async def refreshed(self) -> Sequence[ToolSpec] | None:
        changed = [server for server in self._servers if server.tools_changed]
        if not changed or self._rebuild is None:
            return None
        await asyncio.gather(*(server.refresh(self._start_timeout) for server in changed))
        self.registry = self._rebuild()
        return self.registry.list()

    def prompts(self) -> Sequence[SourcePrompt]:
        from tether.tools.mcp.tools import prompt_command

        return [
            prompt_command(server.name, prompt, partial(server.render_prompt, prompt.name))
            for server in self._servers
            for prompt in server.prompts
        ]

    async def read_resource(self, uri: str) -> SourceResource | None:
        for server in self._servers:
            if any(resource.uri == uri for resource in server.resources):
                return await server.read_resource(uri)
        return None

    def list(self) -> list[ToolSpec]:
        return self.registry.list()

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        return self.registry.protected(name, arguments, workspace)

    def failures(self) -> Sequence[SourceFailure]:
        return self._failures

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        return await self.registry.proposed_change(name, arguments, context)

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        if self.registry.get(name) is None:
            for failure in self._failures:
                if name.startswith(failure.prefix):
                    return ToolResult(f"{failure.describe()}; {_RESTART}", is_error=True)
        return await self.registry.execute(name, arguments, context)


class McpManager:
    """Every MCP server of the process: shared ones by spec and workspace, others by session."""

    def __init__(self) -> None:
        self._shared: dict[tuple[str, Path, SandboxPolicy | None], McpServer] = {}
        self._session_specs: dict[str, list[McpServerSpec]] = {}
        self._session_servers: dict[str, dict[str, McpServer]] = {}

    def set_session_servers(self, session_id: str, specs: Sequence[McpServerSpec]) -> None:
        """The servers of ``session_id`` alone (``session/create {mcpServers}``)."""
        self._session_specs[session_id] = list(specs)

    def share_session_servers(self, parent_id: str, child_id: str) -> None:
        """Give a fork the servers of the session it was forked from (started anew for it)."""
        specs = self._session_specs.get(parent_id)
        if specs:
            self._session_specs[child_id] = list(specs)

    def has_session_servers(self, session_id: str) -> bool:
        return bool(self._session_specs.get(session_id))

    def session_specs(self, session_id: str) -> Sequence[McpServerSpec]:
        """The servers ``session_id`` was given (``session/create {mcpServers}``)."""
        return self._session_specs.get(session_id, ())

    async def close_session(self, session_id: str) -> None:
        """Forget the session's own servers and stop those that run."""
        self._session_specs.pop(session_id, None)
        servers = self._session_servers.pop(session_id, {})
        await asyncio.gather(*(server.aclose() for server in servers.values()))

    async def aclose(self) -> None:
        """Stop every server."""
        servers = list(self._shared.values())
        for by_name in self._session_servers.values():
            servers.extend(by_name.values())
        self._shared.clear()
        self._session_servers.clear()
        self._session_specs.clear()
        await asyncio.gather(*(server.aclose() for server in servers))

    async def start(
        self,
        *,
        servers: Sequence[McpServerSpec],
        enabled: Collection[str] | None,
        session_id: str,
        workspace: Path,
        sandbox: SandboxPolicy | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        """Start the servers a run of ``session_id`` would (:meth:`executor`'s arguments)
        that do not run yet, each within ``start_timeout`` seconds: the session's first run
        then waits only for those still starting."""
        chosen = self._chosen(servers, enabled, session_id, workspace, sandbox)
        await asyncio.gather(*(server.start_early(start_timeout) for server in chosen))

    async def executor(
        self,
        builtin: Iterable[Tool],
        *,
        servers: Sequence[McpServerSpec],
        enabled: Collection[str] | None,
        session_id: str,
        workspace: Path,
        sandbox: SandboxPolicy | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> McpExecutor:
        """The built-in tools and those of the session's servers (started as needed, each
        within ``start_timeout`` seconds), limited to ``enabled`` (``tools.enabled``; ``None``:
        all). A server none of whose tools could be enabled is not started."""
        chosen = self._chosen(servers, enabled, session_id, workspace, sandbox)
        builtin = list(builtin)
        await asyncio.gather(*(server.refresh(start_timeout) for server in chosen))
        failures = {server.name: server.error for server in chosen if server.error is not None}

        def registry() -> ToolRegistry:
            tools: list[Tool] = list(builtin)
            taken = {tool.spec.name for tool in tools}
            for server in chosen:
                tools.extend(_mcp_tools(server, server.tools, taken))
            return ToolRegistry(tools).restricted(enabled)

        return McpExecutor(registry(), failures, chosen, registry, start_timeout)

    def _chosen(
        self,
        configured: Sequence[McpServerSpec],
        enabled: Collection[str] | None,
        session_id: str,
        workspace: Path,
        policy: SandboxPolicy | None,
    ) -> list[McpServer]:
        """The session's servers, but those none of whose tools could be enabled."""
        return [
            server
            for server in self._servers(configured, session_id, workspace, policy)
            if enabled is None or any(name.startswith(f"{server.name}__") for name in enabled)
        ]

    def _servers(
        self,
        configured: Sequence[McpServerSpec],
        session_id: str,
        workspace: Path,
        policy: SandboxPolicy | None,
    ) -> list[McpServer]:
        sandbox = McpSandbox(policy, workspace) if policy is not None else None
        by_name: dict[str, McpServer] = {}
        for spec in configured:
            cwd = server_cwd(spec, workspace)
            key = (spec.model_dump_json(), cwd, policy)
            by_name[spec.name] = self._shared.get(key) or self._shared.setdefault(
                key, McpServer(spec, cwd, sandbox)
            )
        own = self._session_servers.setdefault(session_id, {})
        for spec in self._session_specs.get(session_id, []):
            server = own.get(spec.name)
            if server is None:
                server = own[spec.name] = McpServer(spec, server_cwd(spec, workspace), sandbox)
            by_name[spec.name] = server
        if not own:
            del self._session_servers[session_id]
        return list(by_name.values())


def _mcp_tools(server: McpServer, listing: list[types.Tool], taken: set[str]) -> list[Tool]:
    """The tools of ``listing`` as tether tools: the first :data:`MAX_TOOLS` of them, each
    named ``server__tool`` (made unique among ``taken``, which holds the built-in names, so no
    MCP tool is ever offered under a built-in's name or another tool's)."""
    from tether.tools.mcp.connection import MAX_TOOLS
    from tether.tools.mcp.tools import tool_name, tool_spec

    if len(listing) > MAX_TOOLS:
        dropped = [remote.name for remote in listing[MAX_TOOLS:]]
        shown = ", ".join(repr(name[:64]) for name in dropped[:20])
        more = f" and {len(dropped) - 20} more" if len(dropped) > 20 else ""
        logger.warning(
            "MCP server %s offers %d tools; only the first %d are taken; dropped: %s%s",
            server.name,
            len(listing),
            MAX_TOOLS,
            shown,
            more,
        )
    tools: list[Tool] = []
    for remote in listing[:MAX_TOOLS]:
        name = tool_name(server.name, remote.name, taken)
        try:
            spec = tool_spec(name, server.name, remote)
        except ValueError as exc:
            logger.warning(
                "MCP server %s: skipping tool %r (%s)", server.name, remote.name[:64], exc
            )
            continue
        if name != tool_name(server.name, remote.name):
            logger.warning(
                "MCP server %s: tool %r is offered as %r, its name being taken already",
                server.name,
                remote.name[:64],
                name,
            )
        taken.add(name)
        tools.append(McpTool(server, spec, remote.name))
    return tools


def server_cwd(spec: McpServerSpec, workspace: Path) -> Path:
    """The server's working directory: ``cwd`` (relative to the workspace), else the workspace."""
    if spec.cwd is None:
        return workspace
    return workspace / Path(spec.cwd).expanduser()
