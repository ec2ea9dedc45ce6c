"""The ACP methods, each translated onto the session service and the kernel of :class:`Backend`.

Handlers validate their params into a model of :mod:`tether.acp.models`, call one service and
return a model; the connection turns exceptions into error responses in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, assert_never

from tether import __version__
from tether.acp import modes
from tether.acp.models import (
    PROTOCOL_VERSION,
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandsUpdate,
    CommandInput,
    ConfigOption,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    Empty,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    ListSessionsRequest,
    ListSessionsResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionRequest,
    NewSessionResponse,
    PromptCapabilities,
    PromptRequest,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionInfoUpdate,
    SessionNotification,
    SessionRequest,
    SessionUpdate,
    SetConfigOptionRequest,
    SetConfigOptionResponse,
    SetModeRequest,
)
from tether.acp.servers import mcp_servers
from tether.acp.wire import AcpError, AcpWire, method_not_found
from tether.backend import Backend
from tether.protocol import (
    ConfigureSessionParams,
    CreateSessionParams,
    DeleteSessionParams,
    ErrorCode,
    ForkSessionParams,
    GetSessionParams,
    InvalidParams,
    ListSessionsParams,
    Message,
    MessagesParams,
    Session,
    TetherError,
)
from tether.protocol.checkpoints import RewindParams, RewindResult, UndoParams
from tether.protocol.kernel import StopReason
from tether.sessions import SessionStore
from tether.sessions.workspaces import local_path

if TYPE_CHECKING:
    from tether.config import TetherConfig
    from tether.kernel.kernel import Kernel
    from tether.protocol.commands import CommandInfo
    from tether.protocol.kernel import (
        PermissionParams,
        PermissionResult,
        ProgressParams,
    )
    from tether.protocol.usage import Usage
    from tether.tools.base import ToolExecutor

logger = logging.getLogger(__name__)

Method = Callable[[Any], Coroutine[Any, Any, Any]]  # a handler the wire starts (jsonrpc.router)
REWIND = "_tether/rewind"  # tether's session/rewind, as an extension method
AcpStopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


@dataclass
class AcpSessionState:
    """What the ACP face keeps about a session while this process serves it (what its client
    was last shown); the session itself is the store's."""

    kinds: dict[str, str] = field(default_factory=dict)  # tool call id -> tether tool kind
    terminals: dict[str, str] = field(default_factory=dict)  # tool call id -> editor terminal
    written: dict[str, str] = field(default_factory=dict)  # path -> text the editor last wrote
    options: list[ConfigOption] | None = None  # the config options the client last got
    title: str | None = None  # the title the client was last told
    commands: list[AvailableCommand] | None = None  # the slash commands the client last got
    profiles: list[tuple[str, str | None]] = field(default_factory=list)  # agent profiles, as read


class AcpAgent(Backend):
    """The agent side of ACP over tether's services."""

    def __init__(
        self,
        store: SessionStore | None = None,
        environ: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        super().__init__(store, environ)
        self._cwd = cwd or Path.cwd()
        self.connection: AcpWire | None = None
        self.client: InitializeRequest | None = None
        self._states: dict[str, AcpSessionState] = {}
        # a sub-agent's session -> the ACP session whose turn started it (the one the client
        # knows: its questions and its editor requests go there)
        self._roots: dict[str, str] = {}
        self._listings: set[asyncio.Task[None]] = set()  # available_commands_update on the way
        self._methods: dict[str, Method] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/resume": self.resume_session,
            "session/list": self.list_sessions,
            "session/delete": self.delete_session,
            "session/close": self.close_session,
            "session/fork": self.fork_session,
            "session/prompt": self.prompt,
            "session/set_mode": self.set_mode,
            "session/set_config_option": self.set_config_option,
            REWIND: self.rewind,
        }

    # -- dispatch ---------------------------------------------------------------------------

    def handler(self, method: str) -> Method:
        """The handler of ``method``, for the wire to start (it answers what this raises)."""
        handler = self._methods.get(method)
        if handler is None:
            raise method_not_found(method)
        if self.client is None and method != "initialize":
            raise AcpError(ErrorCode.INVALID_REQUEST, f"{method} before initialize")
        return handler

    def notification(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            self._cancel(SessionRequest.model_validate(params).session_id)

    def _cancel(self, session_id: str) -> None:
        """Stop the session's runs, at whatever stage they are (see :class:`RunHandle`)."""
        if self.kernel is not None:
            self.kernel.cancel(session_id)

    # -- lifecycle --------------------------------------------------------------------------

    async def initialize(self, params: Any) -> InitializeResponse:
        request = InitializeRequest.model_validate(params)
        if self.client is not None:
            raise AcpError(ErrorCode.INVALID_REQUEST, "initialize was already answered")
        workspace = str(self._cwd) if self._cwd.is_dir() else None
        self.load_config(workspace)
        self.client = request
        asyncio.get_running_loop().call_soon(self._kernel)  # after the answer is written
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,  # the one version served, whatever was asked
            agent_info=Implementation(name="tether", title="tether", version=__version__),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True, sse=True),
                session_capabilities=SessionCapabilities(
                    list=Empty(), delete=Empty(), resume=Empty(), close=Empty(), fork=Empty()
                ),
            ),
        )

    async def authenticate(self, params: Any) -> Empty:
        return Empty()  # no auth methods are offered: the provider's key comes from the config

    # -- sessions ---------------------------------------------------------------------------

    async def new_session(self, params: Any) -> NewSessionResponse:
        request = NewSessionRequest.model_validate(params)
        _absolute(request.cwd, "cwd")
        session = await self.sessions.create(
            CreateSessionParams(workspace=request.cwd, mcp_servers=mcp_servers(request.mcp_servers))
        )
        await self._read_profiles(session)
        self._list_commands(session.session_id)
        return NewSessionResponse(
            session_id=session.session_id,
            modes=self._modes(session),
            config_options=self._options(session),
        )

    async def load_session(self, params: Any) -> LoadSessionResponse:
        """Replays the whole history as ``session/update``\\ s, then answers."""
        from tether.acp.updates import plan_update, replay

        request = LoadSessionRequest.model_validate(params)
        session = await self._resume(request)
        workspace = _workspace(session)
        messages: list[Message] = []
        cursor: str | None = None
        while True:
            page = await self.sessions.messages(
                MessagesParams(session_id=session.session_id, cursor=cursor, limit=1000)
            )
            messages += page.messages
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        size = self.config(workspace).context.max_tokens
        compaction = self._takes_compaction()
        for update in replay(messages, workspace, compaction=compaction, context_size=size):
            self._send(session.session_id, update)
        if session.plan:  # the plan as it is now, after the history that made it
            self._send(session.session_id, plan_update(session.plan))
        if session.title:
            self._state(session.session_id).title = session.title
            self._send(session.session_id, SessionInfoUpdate(title=session.title))
        self._list_commands(session.session_id)
        return self._loaded(session)

    async def resume_session(self, params: Any) -> LoadSessionResponse:
        session = await self._resume(LoadSessionRequest.model_validate(params))
        self._list_commands(session.session_id)
        return self._loaded(session)

    async def _resume(self, request: LoadSessionRequest) -> Session:
        session = await self.sessions.get(GetSessionParams(session_id=request.session_id))
        self._prewarm_checkpoints(session)  # its next run's first edit need not wait
        await self._read_profiles(session)
        servers = mcp_servers(request.mcp_servers)
        if servers:
            self.mcp.set_session_servers(session.session_id, servers)
            self.start_mcp_servers_soon(session.session_id, session.workspace)
        return session

    async def list_sessions(self, params: Any) -> ListSessionsResponse:
        request = ListSessionsRequest.model_validate(params)
        if request.cwd is not None:
            _absolute(request.cwd, "cwd")
        page = await self.sessions.list_sessions(
            ListSessionsParams(workspace=request.cwd, cursor=request.cursor)
        )
        return ListSessionsResponse(
            sessions=[_info(session) for session in page.sessions], next_cursor=page.next_cursor
        )

    async def delete_session(self, params: Any) -> Empty:
        request = SessionRequest.model_validate(params)
        await self.sessions.delete(DeleteSessionParams(session_id=request.session_id))
        return Empty()

    async def close_session(self, params: Any) -> Empty:
        """Stops the session's run and its MCP servers; the session itself is kept."""
        request = SessionRequest.model_validate(params)
        await self.sessions.get(GetSessionParams(session_id=request.session_id))
        self._cancel(request.session_id)
        await self.close_mcp_servers(request.session_id)
        self._states.pop(request.session_id, None)
        return Empty()

    async def fork_session(self, params: Any) -> NewSessionResponse:
        request = LoadSessionRequest.model_validate(params)
        session = await self.sessions.fork(ForkSessionParams(session_id=request.session_id))
        servers = mcp_servers(request.mcp_servers)
        if servers:
            self.mcp.set_session_servers(session.session_id, servers)
        await self._read_profiles(session)
        self._list_commands(session.session_id)
        return NewSessionResponse(
            session_id=session.session_id,
            modes=self._modes(session),
            config_options=self._options(session),
        )

    async def rewind(self, params: Any) -> RewindResult:
        """``_tether/rewind``: tether's ``session/rewind`` (same params and result); without
        ``messageId``, the files of the last turn that changed any (``/undo``)."""
        if isinstance(params, dict) and "messageId" not in params:
            request = UndoParams.model_validate(params)
            return await self.checkpoints().undo(request.session_id, force=request.force)
        return await self.checkpoints().rewind(RewindParams.model_validate(params))

    async def set_mode(self, params: Any) -> Empty:
        """Sets the session's mode, in the store; the client is told of the mode and of the
        config options, which show it too."""
        request = SetModeRequest.model_validate(params)
        session = await self.sessions.get(GetSessionParams(session_id=request.session_id))
        if request.mode_id not in modes.MODES:
            raise InvalidParams.field("modeId", f"unknown mode {request.mode_id!r}")
        change = ConfigureSessionParams(session_id=session.session_id, mode=request.mode_id)
        configured = await self.sessions.configure(change)
        self._mode_changed(session, configured)
        if self._state(session.session_id).options is not None:
            options = self._options(configured)
            self._send(session.session_id, ConfigOptionUpdate(config_options=options))
        return Empty()

    async def set_config_option(self, params: Any) -> SetConfigOptionResponse:
        """Sets the session's mode, model, thinking level or agent profile, in the store."""
        from tether.acp.config_options import configure

        request = SetConfigOptionRequest.model_validate(params)
        session = await self.sessions.get(GetSessionParams(session_id=request.session_id))
        profiles = await self._read_profiles(session)
        model = self._configured_model(session)
        change = configure(session, model, request.config_id, request.value, profiles)
        configured = await self.sessions.configure(change)
        self._mode_changed(session, configured)
        return SetConfigOptionResponse(config_options=self._options(configured))

    def _mode_changed(self, before: Session, after: Session) -> None:
        if after.mode != before.mode:
            self._send(after.session_id, CurrentModeUpdate(current_mode_id=after.mode))

    # -- a turn -----------------------------------------------------------------------------

    async def prompt(self, params: Any) -> PromptResponse:
        from tether.acp.content import prompt_content
        from tether.acp.updates import RunUpdates
        from tether.kernel.commands import invocation
        from tether.protocol.kernel import RunParams

        request = PromptRequest.model_validate(params)
        session_id = request.session_id
        run = RunParams(session_id=session_id, prompt=prompt_content(request.prompt))
        kernel = self._kernel()
        known = session_id in self._states
        state = self._state(session_id)
        if not kernel.is_running(session_id):
            state.kinds.clear()  # only the calls of the turn that runs can be asked about
            state.terminals.clear()
            state.written.clear()
        # Started before anything is awaited, so that a session/cancel stops it from now on.
        updates = _Deferred()
        handle = kernel.start(run, updates)
        try:
            session = await self.sessions.get(GetSessionParams(session_id=session_id))
        except Exception:
            handle.cancel()
            with contextlib.suppress(Exception):  # it fails as the lookup did, or never began
                await handle.result()
            if not known:  # made for this request: nothing to keep
                self._states.pop(session_id, None)
            raise
        await self._read_profiles(session)  # a profile added or removed since
        self._options_changed(session, state)
        updates.attach(
            RunUpdates(
                send=partial(self._send, session_id),
                workspace=_workspace(session),
                compaction=self._takes_compaction(),
                notices=self.client is not None and self.client.client_capabilities.notices,
                notify=self.connection.notify if self.connection is not None else None,
                kinds=state.kinds,
                terminals=state.terminals,
                written=state.written,
                spawned=partial(self._spawned, session_id),
            )
        )
        self._list_commands(session_id, changed=True)  # a command file added or edited since
        result = await handle.result()
        self._usage(session, result.usage)
        if invocation(run.prompt) is not None:  # a command may have changed the session
            await self._commanded(session_id, state)
        if state.title is None:
            await self._titled(session_id, state)
        return PromptResponse(stop_reason=acp_stop_reason(result.stop_reason))

    async def _commanded(self, session_id: str, state: AcpSessionState) -> None:
        """Tell the client what a command changed of the session (``/mode``: its mode)."""
        try:
            session = await self.sessions.get(GetSessionParams(session_id=session_id))
        except TetherError:  # deleted meanwhile, say: the turn itself went well
            return
        await self._read_profiles(session)
        self._options_changed(session, state)

    def _list_commands(self, session_id: str, *, changed: bool = False) -> None:
        """Send ``available_commands_update`` once the commands are read (after the answer is
        written: the client knows the session then); with ``changed``, only when they differ
        from what the client last got."""
        task = asyncio.ensure_future(self._send_commands(session_id, changed))
        self._listings.add(task)
        task.add_done_callback(self._listings.discard)

    async def _send_commands(self, session_id: str, changed: bool) -> None:
        from tether.protocol.commands import CommandsParams

        try:
            listing = await self._kernel().commands(CommandsParams(session_id=session_id))
        except Exception as exc:  # a session deleted meanwhile, a store fault: no update
            logger.info("no commands listed for session %s: %s", session_id, exc)
            return
        available = [_available(command) for command in listing.commands]
        state = self._states.get(session_id)
        if state is None:  # closed or deleted meanwhile
            return
        if not changed or available != state.commands:
            state.commands = available
            self._send(session_id, AvailableCommandsUpdate(available_commands=available))

    def _usage(self, session: Session, usage: Usage | None) -> None:
        """A ``usage_update`` with the tokens the turn's model calls used, when the context
        window's size is known (``context.max_tokens``: ACP requires a size)."""
        from tether.acp.models import UsageUpdate

        size = self.config(_workspace(session)).context.max_tokens
        if usage is None or size is None:
            return
        used = usage.input_tokens + usage.output_tokens
        if used:
            self._send(session.session_id, UsageUpdate(used=used, size=size))

    async def _titled(self, session_id: str, state: AcpSessionState) -> None:
        """Tell the client the title the kernel gave the session from its first prompt (read
        once the turn has ended: the face cannot know whether the run or its own look-up
        of the session came first)."""
        try:
            session = await self.sessions.get(GetSessionParams(session_id=session_id))
        except TetherError:  # deleted meanwhile, say: the turn itself went well
            return
        if session.title is not None:
            state.title = session.title
            updated = session.updated_at.isoformat().replace("+00:00", "Z")
            self._send(session_id, SessionInfoUpdate(title=session.title, updated_at=updated))

    # -- permission -------------------------------------------------------------------------

    def _spawned(self, root: str, child: str) -> None:
        self._roots[child] = root

    async def _ask(self, params: PermissionParams) -> PermissionResult:
        from tether.acp.permission import ask

        assert self.connection is not None
        root = self._roots.get(params.session_id)
        if root is not None:  # a sub-agent's call: asked in the session the client knows
            params = params.model_copy(update={"session_id": root})
        state = self._state(params.session_id)
        workspace = await self._workspace_of(params.session_id)
        return await ask(self.connection, params, state, workspace)

    def _takes_compaction(self) -> bool:
        return self.client is not None and self.client.client_capabilities.compaction

    async def _workspace_of(self, session_id: str) -> Path | None:
        return _workspace(await self.sessions.get(GetSessionParams(session_id=session_id)))

    # -- tools ------------------------------------------------------------------------------

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        """The session's tools; ``read_file`` goes through the editor when it offers to read,
        and ``run_command`` through its terminal when it offers one and the user opted in."""
        executor = await super()._tools(config, session_id, workspace)
        if self.client is None or self.connection is None:
            return executor
        capabilities = self.client.client_capabilities
        if capabilities.terminal and config.acp.editor_terminal:
            from tether.acp.editor_terminal import EditorTerminal

            executor = EditorTerminal(
                executor,
                self.connection,
                self._send,
                lambda session: self._state(session).terminals,
                timeout=config.acp.request_timeout,
            )
        fs = capabilities.fs
        if fs.read_text_file or fs.write_text_file:
            from tether.acp.editor_files import EditorFiles

            executor = EditorFiles(
                executor,
                self.connection,
                read=fs.read_text_file,
                write=fs.write_text_file,
                written=lambda session: self._state(session).written,
                timeout=config.acp.request_timeout,
            )
        from tether.acp.subagents import RootedTools

        return RootedTools(executor, self._roots)

    # -- helpers ----------------------------------------------------------------------------

    def _kernel(self) -> Kernel:
        return self.kernel or self.build_kernel(self._ask)

    def _state(self, session_id: str) -> AcpSessionState:
        state = self._states.get(session_id)
        if state is None:
            state = self._states[session_id] = AcpSessionState()
        return state

    def _modes(self, session: Session) -> Any:
        return modes.mode_state(session.mode)

    def _loaded(self, session: Session) -> LoadSessionResponse:
        options = self._options(session)
        return LoadSessionResponse(modes=self._modes(session), config_options=options)

    def _configured_model(self, session: Session) -> str | None:
        """The model of the session's workspace folder's configuration."""
        return self.config(_workspace(session)).provider.model

    def _options(self, session: Session) -> list[ConfigOption]:
        """The session's config options, remembered as the ones the client has."""
        from tether.acp.config_options import config_options

        state = self._state(session.session_id)
        options = config_options(session, self._configured_model(session), state.profiles)
        state.options = options
        return options

    async def _read_profiles(self, session: Session) -> list[tuple[str, str | None]]:
        """Read the agent profiles ``session`` may run under, which its ``agent`` option offers."""
        listed = await self.agent_profiles(session.workspace)
        profiles = [(profile.name, profile.description) for profile in listed]
        self._state(session.session_id).profiles = profiles
        return profiles

    def _options_changed(self, session: Session, state: AcpSessionState) -> None:
        """Tell the client of options changed elsewhere (another process, ``tether serve``)
        since it last got them."""
        known = state.options
        if known is not None and self._options(session) != known:
            self._send(session.session_id, ConfigOptionUpdate(config_options=state.options or []))
            if _current_mode(known) != session.mode:
                self._send(session.session_id, CurrentModeUpdate(current_mode_id=session.mode))

    async def _session_deleted(self, session_id: str) -> None:
        self._states.pop(session_id, None)
        await super()._session_deleted(session_id)

    def _send(self, session_id: str, update: SessionUpdate) -> None:
        if self.connection is not None:
            notification = SessionNotification(session_id=session_id, update=update)
            self.connection.notify("session/update", notification.to_wire())


class _Deferred:
    """The emitter of a run started before the face knows how to show its events (the
    session's workspace): they wait here until :meth:`attach`."""

    __slots__ = ("_emit", "_waiting")

    def __init__(self) -> None:
        self._emit: Callable[[ProgressParams], None] | None = None
        self._waiting: list[ProgressParams] = []

    def __call__(self, params: ProgressParams) -> None:
        if self._emit is None:
            self._waiting.append(params)
        else:
            self._emit(params)

    def attach(self, emit: Callable[[ProgressParams], None]) -> None:
        for params in self._waiting:
            emit(params)
        self._waiting.clear()
        self._emit = emit


@functools.lru_cache(maxsize=256)
def _available(command: CommandInfo) -> AvailableCommand:
    """ACP's form of a command (the same built-ins for every session: made once)."""
    hint = command.argument_hint
    return AvailableCommand(
        name=command.name,
        description=command.description,
        input=CommandInput(hint=hint) if hint else None,
    )


def _current_mode(options: list[ConfigOption]) -> str | None:
    return next((option.current_value for option in options if option.id == modes.MODE), None)


def _absolute(path: str, name: str) -> None:
    if not os.path.isabs(path):
        raise InvalidParams.field(name, "must be an absolute path")


def acp_stop_reason(reason: StopReason) -> AcpStopReason:
    """ACP's stop reason for a run's (exhaustive: mypy fails when a reason is left out)."""
    match reason:
        case StopReason.END_TURN | StopReason.OUTPUT_INVALID:  # ACP asks for no output schema
            return "end_turn"
        case StopReason.MAX_TOKENS:
            return "max_tokens"
        case StopReason.REFUSAL:
            return "refusal"
        case StopReason.MAX_ITERATIONS:
            return "max_turn_requests"
        case StopReason.CANCELLED:
            return "cancelled"
        case StopReason.ERROR:  # a failed run raises instead of returning a result
            raise RuntimeError("the run failed")
        case _:
            assert_never(reason)


def _workspace(session: Session) -> Path | None:
    if not session.workspace.startswith("file://"):
        return None
    return local_path(session.workspace)


def _info(session: Session) -> SessionInfo:
    workspace = _workspace(session)
    return SessionInfo(
        session_id=session.session_id,
        cwd=str(workspace) if workspace is not None else session.workspace,
        title=session.title,
        updated_at=session.updated_at.isoformat().replace("+00:00", "Z"),
    )
