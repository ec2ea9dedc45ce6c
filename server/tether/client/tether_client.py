"""An async client of ``tether serve`` for tools and test harnesses: the contract, typed.

::

    async with TetherClient.spawn(workspace=path, options=config) as client:
        session = await client.create_session()
        run = client.run(session.session_id, "What is this?")
        async for progress in run:      # ProgressParams, run_started ... run_finished
            ...
        result = await run              # RunResult

Every method sends one request of ``docs/protocol.md`` and returns its result as the protocol's
model. Error responses raise the exception class of their code (:mod:`tether.client.errors`); a
server that went away raises ``ConnectionError``. Requests may be sent concurrently.
"""

from __future__ import annotations

import enum
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

from pydantic import BaseModel
from typing_extensions import TypeVar

from tether.client.connection import Connection
from tether.client.errors import InvalidParamsError, MethodNotFoundError, SessionNotFoundError
from tether.client.run import Run, RunRouter
from tether.protocol.base import WireModel
from tether.protocol.checkpoints import CheckpointInfo, CheckpointsResult, RewindResult
from tether.protocol.commands import CommandsResult
from tether.protocol.kernel import (
    CancelResult,
    CompactResult,
    PermissionParams,
    PermissionResult,
)
from tether.protocol.lifecycle import PROTOCOL_VERSION, InitializeResult
from tether.protocol.messages import ContentBlock, Message, MessageInput
from tether.protocol.plans import PlanEntry
from tether.protocol.sessions import (
    AppendResult,
    ListSessionsResult,
    MessagesResult,
    Session,
    ToolPermissions,
)
from tether.protocol.tools import McpServerSpec

logger = logging.getLogger(__name__)

ModelT = TypeVar("ModelT", bound=BaseModel, default=Any)
"""The output model of a run (``Any`` without one)."""

PermissionOutcome = Literal["allow", "allow_always", "reject", "reject_always"]
PermissionHandler = Callable[[PermissionParams], Awaitable[PermissionOutcome] | PermissionOutcome]
"""Answers ``tool/requestPermission``: gets its params, returns the outcome (may be async). An
edit's params carry the change it proposes (``params.diff``: path, old and new text)."""


class _Unset(enum.Enum):
    UNSET = "UNSET"


UNSET: Final = _Unset.UNSET
"""The default of :meth:`TetherClient.configure`'s fields: left out, so left as it is."""


def workspace_uri(workspace: Path | str) -> str:
    """A workspace as the server names it: a path becomes its absolute ``file://`` URI."""
    if isinstance(workspace, str) and "://" in workspace:
        return workspace
    return Path(workspace).expanduser().resolve().as_uri()


def _wire(value: WireModel | Mapping[str, Any]) -> dict[str, Any]:
    return value.to_wire() if isinstance(value, WireModel) else dict(value)


def _listed(values: Sequence[str] | _Unset | None) -> list[str] | _Unset | None:
    return values if values is None or isinstance(values, _Unset) else list(values)


def _params(**fields: Any) -> dict[str, Any]:
    """Params with the fields that are not None (wire names given by the caller)."""
    return {name: value for name, value in fields.items() if value is not None}


class TetherClient:
    """A client of one ``tether serve`` process; make it with :meth:`spawn` (or :meth:`connect`
    for one listening on TCP)."""

    def __init__(
        self,
        connection: Connection,
        on_permission: PermissionHandler | None = None,
    ) -> None:
        """Drive an existing, not yet initialized connection (:meth:`spawn` does it all)."""
        self.connection = connection
        self.initialize_result: InitializeResult | None = None
        self._on_permission = on_permission
        self._router = RunRouter()
        connection.on_notification = self._router.notification
        connection.on_request = self._answer

    @classmethod
    def spawn(
        cls,
        workspace: Path | str | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        argv: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        on_permission: PermissionHandler | None = None,
        client_name: str = "tether-python-client",
    ) -> _Spawn:
        """Start ``tether serve`` and initialize it.

        ``workspace`` (a path or URI) is the workspace folder, the default of
        :meth:`create_session`; ``options`` the ``initializationOptions`` (a configuration
        overlay, e.g. ``{"provider": {"type": "scripted", "script": path}}``); ``argv`` the
        server's command line (default: this Python's ``tether serve``) and ``env`` variables
        added to this process's environment. With ``on_permission`` the client declares
        ``capabilities.tether.permissions`` and answers ``tool/requestPermission`` with it.

        Use it as ``async with TetherClient.spawn(...) as client:`` (shut down on exit), or
        ``client = await TetherClient.spawn(...)`` and later ``await client.close()``. An
        invalid ``options`` raises ``ConfigInvalidError``, with the server stopped.
        """

        def opened() -> Awaitable[Connection]:
            return Connection.spawn(
                argv, env=dict(env or {}), cwd=None if cwd is None else str(cwd)
            )

        return cls._started(opened, on_permission, workspace, options, client_name)

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        workspace: Path | str | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        on_permission: PermissionHandler | None = None,
        client_name: str = "tether-python-client",
    ) -> _Spawn:
        """Connect to a server started with ``tether serve --tcp HOST:PORT`` and initialize it;
        the rest as :meth:`spawn`. Such a server serves one client and ends when it leaves, so
        :meth:`close` (or leaving ``async with``) ends it too."""

        return cls._started(
            lambda: Connection.connect(host, port), on_permission, workspace, options, client_name
        )

    @classmethod
    def _started(
        cls,
        opened: Callable[[], Awaitable[Connection]],
        on_permission: PermissionHandler | None,
        workspace: Path | str | None,
        options: Mapping[str, Any] | None,
        client_name: str,
    ) -> _Spawn:
        """A client on the connection ``opened`` makes, initialized (closed when that fails)."""

        async def start() -> TetherClient:
            connection = await opened()
            client = cls(connection, on_permission)
            try:
                await client._initialize(workspace, options, client_name)
            except BaseException:
                await connection.close()
                raise
            return client

        return _Spawn(start)

    async def _initialize(
        self, workspace: Path | str | None, options: Mapping[str, Any] | None, client_name: str
    ) -> None:
        params: dict[str, Any] = {
            "processId": os.getpid(),
            "clientInfo": {"name": client_name},
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tether": {"permissions": self._on_permission is not None}},
        }
        if workspace is not None:
            params["workspaceFolders"] = [{"uri": workspace_uri(workspace)}]
        if options is not None:
            params["initializationOptions"] = dict(options)
        result = await self.connection.request("initialize", params)
        self.initialize_result = InitializeResult.model_validate(result)
        self.connection.notify("initialized", {})

    async def close(self) -> int | None:
        """Cancel the runs still going, shut the server down (``shutdown``, ``exit``) and wait for
        it to end; its exit code (None for a server reached by :meth:`connect`)."""
        for run in list(self._router.runs):
            run.cancel()
        return await self.connection.close()

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    # -- sessions --------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        workspace: Path | str | None = None,
        title: str | None = None,
        agent_id: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        settings: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        tools: Sequence[str] | None = None,
        allowed_models: Sequence[str] | None = None,
        state: Mapping[str, Any] | None = None,
        mode: str | None = None,
        permissions: ToolPermissions | Mapping[str, Any] | None = None,
        agent: str | None = None,
        plan: Sequence[PlanEntry | Mapping[str, Any]] | None = None,
        mcp_servers: Sequence[McpServerSpec | Mapping[str, Any]] | None = None,
    ) -> Session:
        """``session/create``; ``workspace`` defaults to the client's workspace folder,
        ``session_id`` to a new id the server makes."""
        params = _params(
            sessionId=session_id,
            workspace=None if workspace is None else workspace_uri(workspace),
            title=title,
            agentId=agent_id,
            model=model,
            systemPrompt=system_prompt,
            settings=None if settings is None else dict(settings),
            metadata=None if metadata is None else dict(metadata),
            tools=None if tools is None else list(tools),
            allowedModels=None if allowed_models is None else list(allowed_models),
            state=None if state is None else dict(state),
            mode=mode,
            permissions=None if permissions is None else _wire(permissions),
            agent=agent,
            plan=None if plan is None else [_wire(entry) for entry in plan],
            mcpServers=None if mcp_servers is None else [_wire(s) for s in mcp_servers],
        )
        return Session.model_validate(await self.request("session/create", params))

    async def open_session(self, session_id: str, **fields: Any) -> Session:
        """Session ``session_id``, created (with ``fields``, as :meth:`create_session` takes
        them) when there is none yet."""
        try:
            return await self.get_session(session_id)
        except SessionNotFoundError:
            pass
        try:
            return await self.create_session(session_id=session_id, **fields)
        except InvalidParamsError as exc:
            if not isinstance(exc.data, dict) or exc.data.get("sessionId") != session_id:
                raise
            return await self.get_session(session_id)  # created meanwhile by another client

    async def get_session(self, session_id: str) -> Session:
        """``session/get``."""
        return Session.model_validate(await self.request("session/get", {"sessionId": session_id}))

    async def list_sessions(
        self,
        *,
        workspace: Path | str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> ListSessionsResult:
        """``session/list``: one page, newest ``updated_at`` first; ``next_cursor`` for the next."""
        params = _params(
            workspace=None if workspace is None else workspace_uri(workspace),
            cursor=cursor,
            limit=limit,
        )
        return ListSessionsResult.model_validate(await self.request("session/list", params))

    async def messages(
        self,
        session_id: str,
        *,
        cursor: str | None = None,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
    ) -> MessagesResult:
        """``session/messages``: one page of the history and its ``total``."""
        params = _params(sessionId=session_id, cursor=cursor, limit=limit, order=order)
        return MessagesResult.model_validate(await self.request("session/messages", params))

    async def append(
        self, session_id: str, messages: Sequence[MessageInput | Mapping[str, Any]]
    ) -> list[Message]:
        """``session/append`` (all or nothing): the messages with their ids and timestamps."""
        params = {"sessionId": session_id, "messages": [_wire(m) for m in messages]}
        return AppendResult.model_validate(await self.request("session/append", params)).messages

    async def configure(
        self,
        session_id: str,
        *,
        title: str | _Unset | None = UNSET,
        model: str | _Unset | None = UNSET,
        system_prompt: str | _Unset | None = UNSET,
        settings: Mapping[str, Any] | _Unset | None = UNSET,
        metadata: Mapping[str, Any] | _Unset | None = UNSET,
        tools: Sequence[str] | _Unset | None = UNSET,
        allowed_models: Sequence[str] | _Unset | None = UNSET,
        state: Mapping[str, Any] | _Unset | None = UNSET,
        mode: str | _Unset | None = UNSET,
        permissions: ToolPermissions | Mapping[str, Any] | _Unset | None = UNSET,
        plan: Sequence[PlanEntry | Mapping[str, Any]] | _Unset | None = UNSET,
        agent: str | _Unset | None = UNSET,
    ) -> Session:
        """``session/configure``: a field left out stays as it is, ``None`` clears it (the
        mode back to ``ask``, the remembered answers forgotten, no agent profile);
        ``settings``, ``metadata``, ``state``, ``permissions`` and ``plan`` are replaced
        whole."""
        fields = {
            "title": title,
            "model": model,
            "systemPrompt": system_prompt,
            "settings": settings if not isinstance(settings, Mapping) else dict(settings),
            "metadata": metadata if not isinstance(metadata, Mapping) else dict(metadata),
            "tools": _listed(tools),
            "allowedModels": _listed(allowed_models),
            "state": state if not isinstance(state, Mapping) else dict(state),
            "mode": mode,
            "permissions": _wire(permissions)
            if isinstance(permissions, ToolPermissions | Mapping)
            else permissions,
            "agent": agent,
            "plan": plan if plan is None or isinstance(plan, _Unset) else [_wire(e) for e in plan],
        }
        params: dict[str, Any] = {"sessionId": session_id}
        params.update({name: v for name, v in fields.items() if not isinstance(v, _Unset)})
        return Session.model_validate(await self.request("session/configure", params))

    async def fork(
        self,
        session_id: str,
        *,
        at_message_id: str | None = None,
        title: str | None = None,
        tools: Sequence[str] | None = None,
        allowed_models: Sequence[str] | None = None,
        restore_files: bool = False,
    ) -> Session:
        """``session/fork``: a new session sharing the history up to ``at_message_id``; with
        ``restore_files``, the workspace's files are put back to that point too."""
        params = _params(
            sessionId=session_id,
            atMessageId=at_message_id,
            title=title,
            tools=None if tools is None else list(tools),
            allowedModels=None if allowed_models is None else list(allowed_models),
            restoreFiles=restore_files or None,
        )
        return Session.model_validate(await self.request("session/fork", params))

    async def checkpoints(self, session_id: str) -> list[CheckpointInfo]:
        """``session/checkpoints``: what each turn of the session changed in its files."""
        result = await self.request("session/checkpoints", {"sessionId": session_id})
        return CheckpointsResult.model_validate(result).checkpoints

    async def rewind(
        self,
        session_id: str,
        message_id: str,
        *,
        files: bool = True,
        history: bool = False,
        force: bool = False,
    ) -> RewindResult:
        """``session/rewind``: back to the state before the turn whose prompt is
        ``message_id`` (``run_started.userMessageId``): its files and the later turns' put back,
        with ``history`` that prompt and every later message removed."""
        params = {
            "sessionId": session_id,
            "messageId": message_id,
            "files": files,
            "history": history,
            "force": force,
        }
        return RewindResult.model_validate(await self.request("session/rewind", params))

    async def clear(self, session_id: str) -> Session:
        """``session/clear``: the session without its messages, settings kept."""
        return Session.model_validate(
            await self.request("session/clear", {"sessionId": session_id})
        )

    async def delete(self, session_id: str) -> None:
        """``session/delete``."""
        await self.request("session/delete", {"sessionId": session_id})

    async def compact(
        self,
        session_id: str,
        *,
        keep_tokens: int | None = None,
        work_done_token: str | int | None = None,
    ) -> CompactResult:
        """``session/compact``: the model summarizes the older turns now (the summary is sent
        in their place from then on; ``messages`` still lists them all)."""
        params = _params(
            sessionId=session_id, keepTokens=keep_tokens, workDoneToken=work_done_token
        )
        return CompactResult.model_validate(await self.request("session/compact", params))

    async def commands(self, session_id: str) -> CommandsResult:
        """``session/commands``: the slash commands a prompt of the session may start with."""
        result = await self.request("session/commands", {"sessionId": session_id})
        return CommandsResult.model_validate(result)

    # -- the kernel ------------------------------------------------------------------------

    def run(
        self,
        session_id: str,
        prompt: str | Sequence[ContentBlock | Mapping[str, Any]],
        *,
        max_iterations: int | None = None,
        model: str | None = None,
        tools: Sequence[str] | None = None,
        output_schema: type[ModelT] | Mapping[str, Any] | None = None,
        output_retries: int | None = None,
        author: str | None = None,
        directory: Path | str | None = None,
        work_done_token: str | int | None = None,
    ) -> Run[ModelT]:
        """Send ``kernel/run`` now; the :class:`Run` iterates its progress events and awaits to its
        :class:`~tether.protocol.kernel.RunResult`.

        ``output_schema`` is a JSON Schema, or a pydantic model class: its schema is sent, and
        the result's ``output`` is then an instance of it, typed so (``Run[Model]`` awaits to a
        ``RunResult[Model]``; ``None`` when the run ended without
        a valid answer: see ``stop_reason`` and ``output_errors``). ``author`` names who writes
        the run's messages (default: the session's ``agentId``); ``directory`` the folder of
        the workspace the turn works in (its ``AGENTS.md`` files are read); with
        ``work_done_token`` the server also reports LSP ``$/progress`` on that token."""
        model_class: type[ModelT] | None = None
        schema: dict[str, Any] | None = None
        if isinstance(output_schema, type):
            model_class = output_schema
            schema = output_schema.model_json_schema()
        elif output_schema is not None:
            schema = dict(output_schema)
        params = _params(
            sessionId=session_id,
            prompt=prompt if isinstance(prompt, str) else [_wire(block) for block in prompt],
            maxIterations=max_iterations,
            model=model,
            tools=None if tools is None else list(tools),
            outputSchema=schema,
            outputRetries=output_retries,
            author=author,
            directory=None if directory is None else str(directory),
            workDoneToken=work_done_token,
        )
        request_id, future = self.connection.start_request("kernel/run", params)
        run: Run[ModelT] = Run(
            self.connection, session_id, request_id, future, output_type=model_class
        )
        self._router.add(run)  # before any await: no event of it can have been read yet
        return run

    async def cancel(self, session_id: str) -> bool:
        """``kernel/cancel``: whether a run was going (it then ends with ``cancelled``)."""
        result = await self.request("kernel/cancel", {"sessionId": session_id})
        return CancelResult.model_validate(result).cancelled

    # -- anything else ---------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """Any request, its result as plain JSON."""
        return await self.connection.request(method, params)

    @property
    def returncode(self) -> int | None:
        """The server's exit code once it has ended (None for one reached by :meth:`connect`)."""
        process = self.connection.process
        return None if process is None else process.returncode

    async def _answer(self, method: str, params: Any) -> Any:
        """Server-to-client requests."""
        if method == "tool/requestPermission" and self._on_permission is not None:
            request = PermissionParams.model_validate(params)
            outcome = self._on_permission(request)
            if inspect.isawaitable(outcome):
                outcome = await outcome
            return PermissionResult.model_validate({"outcome": outcome}).to_wire()
        raise MethodNotFoundError(f"this client does not answer {method}")


class _Spawn:
    """What :meth:`TetherClient.spawn` and :meth:`TetherClient.connect` return: awaitable, or an
    async context manager."""

    def __init__(self, start: Callable[[], Awaitable[TetherClient]]) -> None:
        self._start = start
        self._client: TetherClient | None = None

    def __await__(self) -> Generator[Any, None, TetherClient]:
        return self._start().__await__()

    async def __aenter__(self) -> TetherClient:
        self._client = await self._start()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._client is not None
        await self._client.close()
