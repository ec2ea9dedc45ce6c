"""The kernel service: starts runs on sessions, keeps one run per session, cancels them.

A run is started with :meth:`Kernel.start`, which answers at once with its :class:`RunHandle`:
the face registers the handle before it waits on anything, so that a cancel that comes at any
time (before the run has its lease, while it takes it, or while it runs) stops it. Stopped before
its lease, a run records nothing and answers ``stopReason: "cancelled"``.

One run per session holds across processes: a run leases its session in the store before it
records anything, renews the lease while it goes on, and releases it when it ends (see
:mod:`tether.sessions.lease`). A run that finds its lease lost stops: it is cancelled, its
writes are refused, and ``kernel/run`` answers ``RunLeaseLost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tether.config import (
    CheckpointsConfig,
    ProviderConfig,
    TetherConfig,
    data_home,
    user_config_path,
)
from tether.kernel import commands as slash
from tether.kernel import compaction, structured
from tether.kernel.access import check_access
from tether.kernel.agents import AgentProfile, Profiles
from tether.kernel.approval import Approver, Gate, offered
from tether.kernel.checkpoints import Checkpoints
from tether.kernel.history import in_model_order
from tether.kernel.hooks import Hooks
from tether.kernel.plans import StorePlan
from tether.kernel.resources import attach_resources
from tether.kernel.run import Emit, LeaseState, Run, RunSetup, cancelling, not_cancelled
from tether.kernel.state import StoreState
from tether.kernel.subagents import (
    MAX_DEPTH,
    PLAIN_TASK_SPEC,
    TASK_TOOL,
    Lineage,
    Subagents,
    TaskRequest,
    narrowed,
    task_spec,
)
from tether.kernel.tracing import run_telemetry
from tether.kernel.window import EstimatingCounter, TokenCounter, window
from tether.memory import Memory
from tether.memory.instructions import InstructionLoader, Instructions
from tether.protocol import (
    Content,
    CreateSessionParams,
    InvalidParams,
    Message,
    MessageInput,
    RequestCancelled,
    RunLeaseLost,
    Session,
    StoreError,
    TetherError,
    TextBlock,
    WorkspaceError,
)
from tether.protocol.commands import CommandsParams, CommandsResult
from tether.protocol.kernel import (
    CompactParams,
    CompactResult,
    ProgressEvent,
    ProgressParams,
    RunParams,
    RunResult,
    RunWarning,
    StopReason,
)
from tether.protocol.sessions import SessionFields, SpawnedBy
from tether.protocol.tools import ToolSpec
from tether.protocol.usage import Usage
from tether.providers.base import Provider
from tether.secrets import Secrets, configured_secrets
from tether.sessions.ids import uuid7
from tether.sessions.store import SessionStore
from tether.sessions.workspaces import local_path
from tether.tools.base import SourcePrompt, ToolContext, ToolExecutor
from tether.tools.confinement import SandboxPolicy

logger = logging.getLogger(__name__)

ProviderFactory = Callable[[ProviderConfig], Provider]
# The configuration of the sessions of a workspace folder (None: the default workspace's).
ConfigSource = Callable[[Path | None], TetherConfig]
# Reads a folder's configuration off the event loop, so that ConfigSource then reads no file.
ConfigLoader = Callable[[Path | None], Awaitable[None]]
# The warnings each run in a workspace folder reports (None: the default workspace's).
WarningSource = Callable[[Path | None], Sequence[RunWarning]]
MemoryLoader = Callable[[Path, list[str]], Memory]
# Whether a workspace surely has no memory under the configured paths (asked on the event loop).
NoMemory = Callable[[Path, list[str]], bool]
# The tools of a run in a session (configuration, session id, workspace root); may start servers.
ToolsFactory = Callable[[TetherConfig, str, Path], Awaitable[ToolExecutor]]
# The secrets of a run in a session (configuration, session id): see tether.secrets.
SecretsOf = Callable[[TetherConfig, str], Secrets]

STOP_WAIT = 10.0
"""Seconds :meth:`Kernel.stop` waits for a stopped run to end and give its session back. A
cancelled run ends at once (its model request and tools stop at their next chance); only a
store that does not answer holds it longer, and the lease then expires on its own."""


class Kernel:
    def __init__(
        self,
        store: SessionStore,
        *,
        config: ConfigSource,
        load_config: ConfigLoader | None = None,
        providers: ProviderFactory,
        tools: ToolsFactory,
        memory: MemoryLoader,
        no_memory: NoMemory | None = None,
        approver: Approver | None = None,
        counter: TokenCounter | None = None,
        warnings: WarningSource = lambda workspace: (),
        secrets: SecretsOf | None = None,
        profiles: Profiles | None = None,
        instructions: InstructionLoader | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        """``config`` gives the configuration of a run from its session's workspace folder,
        after ``load_config`` (when given) has read it off the event loop.
        ``approver`` asks the user about calls of tools that edit or execute (policy
        ``tools.approval = "ask"``); without one, such calls are refused under ``ask``.
        ``warnings`` are problems each run reports (read after ``config``, at the start of each
        run), beside the memory files left out. ``memory`` runs on a thread, unless
        ``no_memory`` says there is none to load. ``secrets`` are what no command sees and every
        tool result has redacted (default: those of the configuration, with the API keys of
        ``os.environ``). ``profiles`` are the agent profiles sessions run under (default: those
        of ``os.environ``'s user configuration directory and of each workspace).
        ``instructions`` reads the instruction files (``AGENTS.md``; None: none are read)."""
        self._store = store
        self._config = config
        self._load_config = load_config
        self._providers = providers
        self._tools = tools
        self._memory = memory
        self._no_memory = no_memory
        self._instructions = instructions
        self._warnings = warnings
        self._secrets = secrets or _configured_secrets
        self._approver = approver
        self._profiles = profiles or Profiles()
        # a sub-agent's session -> what it takes from its parent's run, while it runs
        self._lineages: dict[str, Lineage] = {}
        self._checkpoints = checkpoints  # None: runs record none
        self._counter = counter or EstimatingCounter()  # for the history window
        self._runs: dict[str, asyncio.Task[RunResult]] = {}
        self._giving_back: set[asyncio.Future[None]] = set()  # leases of cancelled claims
        # session -> the handles of its runs in this process that have not ended
        self._handles: dict[str, list[RunHandle]] = {}
        # session -> the ends of its runs in this process (each done once the lease is given back)
        self._ends: dict[str, list[asyncio.Future[None]]] = {}
        self._slash = slash.SlashCommands(
            store, self._compact, self, checkpoints, self._source_prompts
        )

    def is_running(self, session_id: str) -> bool:
        return session_id in self._runs

    def start(self, params: RunParams, emit: Emit) -> RunHandle:
        """Start a run and answer its handle at once (before anything is awaited): cancelling
        the handle stops the run whenever it comes. Awaiting :meth:`RunHandle.result` gives what
        :meth:`run` would."""
        handle = self._handle(params.session_id)
        handle.task = asyncio.ensure_future(self._run_handled(params, emit, handle))
        return handle

    async def run(self, params: RunParams, emit: Emit) -> RunResult:
        """Run to the end. If this call is cancelled (``$/cancelRequest``), the run stops and
        :class:`RequestCancelled` carries its partial result. ``SessionBusy`` when a run (of any
        process) holds the session; ``RunLeaseLost`` when this one lost it on the way."""
        return await self._run_handled(params, emit, self._handle(params.session_id))

    def _handle(self, session_id: str) -> RunHandle:
        handle = RunHandle(session_id)
        self._handles.setdefault(session_id, []).append(handle)
        return handle

    async def _run_handled(self, params: RunParams, emit: Emit, handle: RunHandle) -> RunResult:
        """:meth:`run` under ``handle``, which keeps track of its end."""
        ended = asyncio.get_running_loop().create_future()
        ends = self._ends.setdefault(params.session_id, [])
        ends.append(ended)
        try:
            return await self._run(params, emit, handle)
        finally:
            self._forget_handle(handle)
            ends.remove(ended)
            if not ends and self._ends.get(params.session_id) is ends:
                del self._ends[params.session_id]
            ended.set_result(None)

    async def _run(self, params: RunParams, emit: Emit, handle: RunHandle) -> RunResult:
        session_id = params.session_id
        run_id = uuid7()
        if handle.cancelled:  # cancelled before it could claim: it never starts
            return _cancelled_before(run_id, session_id)
        lease = self._config(None).sessions.lease_delta()  # never a workspace file's
        try:
            await self._claim(session_id, run_id, lease)
        except TetherError as exc:
            self._add_warnings(exc)
            raise
        if handle.cancelled:  # cancelled while the lease was being claimed
            await self._release(session_id, run_id)
            return _cancelled_before(run_id, session_id)
        state = LeaseState()
        task = asyncio.ensure_future(self._start_and_run(params, emit, run_id, state))
        handle.running = task
        self._runs[session_id] = task
        renewal = _Renewal(lambda: self._renew(session_id, run_id, lease, state, task), lease)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()
            result = await task
            if not state.lost:
                raise RequestCancelled("run cancelled", result.to_wire()) from None
        finally:
            renewal.cancel()
            if self._runs.get(session_id) is task:
                del self._runs[session_id]
            await self._release(session_id, run_id)
        if state.lost:
            raise RunLeaseLost(session_id, run_id)
        return result

    def cancel(self, session_id: str) -> bool:
        """Stop the session's runs in this process (:meth:`RunHandle.cancel`); they then answer
        ``stopReason: "cancelled"``. True when there was one to stop."""
        return any([handle.cancel() for handle in self._handles.get(session_id, ())])

    async def stop(self, session_id: str) -> bool:
        """:meth:`cancel`, answered once the session's runs in this process have ended and
        given the session back (:data:`STOP_WAIT` at most: a run still ending then keeps it a
        while), so that it takes the next run at once."""
        cancelled = self.cancel(session_id)
        ends = list(self._ends.get(session_id, ()))
        if ends:
            _, pending = await asyncio.wait(ends, timeout=STOP_WAIT)
            if pending:
                logger.warning(
                    "a stopped run of session %s has not ended after %g s", session_id, STOP_WAIT
                )
        return cancelled

    def _forget_handle(self, handle: RunHandle) -> None:
        handles = self._handles.get(handle.session_id, [])
        if handle in handles:
            handles.remove(handle)
        if not handles:
            self._handles.pop(handle.session_id, None)

    async def _claim(self, session_id: str, run_id: str, lease: timedelta) -> None:
        """Lease the session to the run before it records anything. Cancelled meanwhile: a lease
        the store took all the same is given back, and nothing was recorded."""
        claim = asyncio.ensure_future(self._store.claim_run(session_id, run_id, lease))
        try:
            await asyncio.shield(claim)
        except asyncio.CancelledError:
            # Given back by a task of its own, so a second cancellation cannot leave it held.
            give_back = asyncio.ensure_future(self._give_back(claim, session_id, run_id))
            self._giving_back.add(give_back)
            give_back.add_done_callback(self._giving_back.discard)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(give_back)
            result = RunResult(
                run_id=run_id, session_id=session_id, stop_reason=StopReason.CANCELLED, iterations=0
            )
            raise RequestCancelled("run cancelled", result.to_wire()) from None

    async def _renew(
        self,
        session_id: str,
        run_id: str,
        lease: timedelta,
        state: LeaseState,
        task: asyncio.Task[Any],
    ) -> None:
        """Renew the lease now, then every third of it while the run goes on (started by
        :class:`_Renewal` a third of the lease after the run began); stop the run when the store
        says it no longer holds it. A renewal that fails (the database is away) is tried again
        at the next tick: the lease is only lost once it has expired."""
        while True:
            try:
                held = await self._store.renew_run(session_id, run_id, lease)
            except Exception as exc:  # a store fault is logged by the store, without traceback
                logger.warning(
                    "could not renew the lease of run %s: %s",
                    run_id,
                    exc,
                    exc_info=not isinstance(exc, StoreError),
                )
                held = True
            if not held:
                logger.warning("run %s lost its lease on session %s", run_id, session_id)
                state.lost = True
                task.cancel()
                return
            await asyncio.sleep(renewal_interval(lease))

    async def set_agent(self, session_id: str, agent: str | None) -> Session:
        """Run the session's next turns under the profile ``agent`` (None: under none), as
        ``session/configure {agent}`` and ``/agent NAME`` do; -32602 naming an unknown one."""
        if agent is not None:
            session = await self._store.get(session_id)
            folder = _local_workspace(session)
            await asyncio.to_thread(self._profiles.require, agent, folder)
        return await self._store.configure(session_id, SessionFields(agent=agent))

    def agent_profiles(self, workspace: Path | None) -> list[AgentProfile]:
        """The profiles a session of ``workspace`` may run under (reads files)."""
        return self._profiles.list(workspace)

    async def session_profiles(self, session: Session) -> list[AgentProfile]:
        """The profiles ``session`` may run under (read on a thread, when there may be any)."""
        return await self._profiles.listed(_local_workspace(session))

    async def compact(self, params: CompactParams, emit: Emit) -> CompactResult:
        """``session/compact``: summarize the session's older turns now, under a lease like a
        run's (``SessionBusy`` while a run holds the session)."""
        session_id = params.session_id
        run_id = uuid7()
        lease = self._config(None).sessions.lease_delta()
        await self._claim(session_id, run_id, lease)
        state = LeaseState()
        task = asyncio.ensure_future(self._compact(params, emit, run_id))
        renewal = _Renewal(lambda: self._renew(session_id, run_id, lease, state, task), lease)
        try:
            return await task
        except asyncio.CancelledError:
            if state.lost:
                raise RunLeaseLost(session_id, run_id) from None
            raise
        finally:
            renewal.cancel()
            await self._release(session_id, run_id)

    async def _compact(self, params: CompactParams, emit: Emit, run_id: str) -> CompactResult:
        session = await self._store.get(params.session_id)
        config = await self._folder_config(_local_workspace(session))
        model = session.model or config.provider.model
        provider = self._providers(config.provider.model_copy(update={"model": model}))
        view = compaction.compacted_view(
            in_model_order(await self._store.history(session.session_id))
        )
        max_tokens = config.context.max_tokens
        keep = params.keep_tokens
        if keep is None:
            keep = max_tokens // 2 if max_tokens else 0
        plan = compaction.plan(view, compaction.last_turn(view), keep, self._counter)
        if plan is None:
            return CompactResult(compacted=False, run_id=run_id)
        seq = 0

        def emit_event(event: ProgressEvent) -> None:
            nonlocal seq
            seq += 1
            emit(ProgressParams(session_id=session.session_id, run_id=run_id, seq=seq, event=event))

        async def persist(message: MessageInput) -> Message:
            [stored] = await self._store.append(session.session_id, [message], run_id=run_id)
            return stored

        usage = Usage()
        summarizer = compaction.Summarizer(provider, model or "", self._counter, max_tokens, usage)
        try:
            stored = await compaction.compact(plan, summarizer, persist, emit_event)
        finally:
            if usage.input_tokens or usage.output_tokens:
                await self._store.add_usage(session.session_id, usage)
        return CompactResult(compacted=True, message=stored, run_id=run_id)

    async def _give_back(self, claim: asyncio.Future[None], session_id: str, run_id: str) -> None:
        """Release the lease a cancelled claim took all the same (nothing when it took none)."""
        with contextlib.suppress(Exception):
            await claim
            await self._release(session_id, run_id)

    async def _release(self, session_id: str, run_id: str) -> None:
        """Give the lease back (it expires on its own when the store cannot be reached)."""
        release = asyncio.ensure_future(self._store.release_run(session_id, run_id))
        try:
            await asyncio.shield(release)
        except Exception as exc:
            logger.warning(
                "could not release the lease of run %s: %s",
                run_id,
                exc,
                exc_info=not isinstance(exc, StoreError),
            )

    async def _start_and_run(
        self, params: RunParams, emit: Emit, run_id: str, state: LeaseState
    ) -> RunResult:
        session: Session | None = None
        try:
            session = await self._store.get(params.session_id)
            command = await self._command(session, params)
            if isinstance(command, slash.BuiltinCall):  # answered without a model call
                return await self._slash.answer(command, session, run_id, emit)
            plan = StorePlan(self._store, session.session_id)
            setup = await self._setup(session, command.params, run_id, emit, state, plan)
            prompt = await attach_resources(command.params.prompt, setup.tools)
            run = Run(dataclasses.replace(setup, prompt_metadata=command.metadata))
            plan.bind(run.emit)
            # A prompt a hook may refuse names no session before it is let in.
            title_later = session.title is None and run.prompt_screened
            if session.title is None and not title_later:
                await self._title(session.session_id, params.prompt)
        except asyncio.CancelledError:  # cancelled before it began: nothing was recorded
            if not cancelling():
                raise not_cancelled("setting up the run") from None
            return RunResult(
                run_id=run_id,
                session_id=params.session_id,
                stop_reason=StopReason.CANCELLED,
                iterations=0,
            )
        except TetherError as exc:
            self._add_warnings(exc, None if session is None else _local_workspace(session))
            raise
        result = await run.execute(prompt)
        if title_later:
            await self._title(session.session_id, params.prompt)
        return result

    async def _command(
        self, session: Session, params: RunParams
    ) -> slash.BuiltinCall | slash.Expanded:
        """What the prompt asks for (:meth:`SlashCommands.resolve`). A sub-agent's prompt is
        the text its parent's model wrote, never a slash command."""
        if session.session_id in self._lineages:
            return slash.Expanded(params, None)
        return await self._slash.resolve(session, params)

    async def _source_prompts(self, session: Session) -> Sequence[SourcePrompt]:
        """The prompts of the session's MCP servers (started as a run would start them)."""
        folder = _local_workspace(session)
        config = await self._folder_config(folder)
        executor = await self._tools(config, session.session_id, _workspace_root(session))
        return executor.prompts()

    async def commands(self, params: CommandsParams) -> CommandsResult:
        """``session/commands``: the slash commands the session's prompts may start with."""
        return await self._slash.listing(await self._store.get(params.session_id))

    async def _title(self, session_id: str, prompt: Content) -> None:
        """An untitled session is named after the first line of its first prompt (whichever
        face sent it); a title that cannot be stored leaves the run as it is."""
        title = prompt_title(prompt)
        if title is None:
            return
        try:
            await self._store.configure(session_id, SessionFields(title=title))
        except TetherError as exc:
            logger.warning("could not title session %s: %s", session_id, exc)

    def _add_warnings(self, error: TetherError, workspace: Path | None = None) -> None:
        """A run refused before it starts reports the warnings in its error's ``data.warnings``:
        a workspace file that was left out may be why (the provider it named, say). Before its
        session is known, the default workspace's."""
        warnings = self._warnings(workspace)
        if warnings and (error.data is None or isinstance(error.data, dict)):
            error.data = {**(error.data or {}), "warnings": [w.to_wire() for w in warnings]}

    async def _setup(
        self,
        session: Session,
        params: RunParams,
        run_id: str,
        emit: Emit,
        state: LeaseState,
        plan: StorePlan | None = None,
    ) -> RunSetup:
        folder = _local_workspace(session)
        config = await self._folder_config(folder)
        warnings = tuple(self._warnings(folder))
        output = structured.output_check(params.output_schema, params.output_retries)
        profile = await self._profile(session, folder)
        lineage = self._lineages.get(session.session_id)
        model = params.model or _profile_model(profile) or session.model
        provider_config = config.provider.model_copy(
            update={"model": model or config.provider.model}
        )
        check_access(session, params, provider_config.model)  # InvalidParams: nothing recorded
        provider = self._providers(provider_config)  # ConfigError when it is not configured
        workspace = _workspace_root(session)
        directory = turn_directory(workspace, params.directory)  # InvalidParams: nothing started
        executor = await self._executor(config, session, workspace, lineage)
        instructions = await self._load_instructions(workspace, directory, config)
        memory = await self._load_memory(workspace, config.memory.paths)
        problems = (*instructions.problems, *memory.problems)
        warnings += tuple(_memory_warning(problem) for problem in problems)
        prompt = profile.prompt if profile is not None else None
        system = _system_prompt(
            prompt or session.system_prompt or config.kernel.system_prompt,
            instructions.text,
            memory.text,
        )
        offer = await self._offer(session, params, config, profile, lineage)
        specs = offer(executor.list())
        context = ToolContext(
            workspace=workspace,
            session_id=session.session_id,
            run_id=run_id,
            state=StoreState(self._store, session.session_id),
            plan=plan,
            hidden_env=_hidden_env(config),
            secrets=self._secrets(config, session.session_id),
            sandbox=sandbox_policy(config),
            search=config.tools.search,
        )
        parent = _Parent(
            session, executor, frozenset(s.name for s in specs), lineage, provider_config, emit
        )
        return RunSetup(
            session_id=session.session_id,
            store=self._store,
            provider=provider,
            tools=executor,
            tool_specs=specs,
            offer=offer,
            context=context,
            model=provider_config.model or "",
            system=system,
            max_iterations=params.max_iterations
            or _profile_iterations(profile, config.kernel.max_iterations),
            history=await self._store.history(session.session_id),
            emit=emit,
            approval=Gate(
                policy=config.tools.approval,
                approver=self._approver,
                store=self._store,
                session=session,
                run_id=run_id,
            ),
            settings=dict(session.settings),
            window=window(config.context.max_tokens, self._counter, system, specs),
            compaction=self._counter if config.context.compaction == "summarize" else None,
            output=output,
            warnings=warnings,
            lease=state,
            author=params.author or session.agent_id,
            hooks=Hooks(config.hooks, context) if config.hooks else None,
            subagents=self._subagents(parent, config.kernel.max_subagents),
            parent=None
            if lineage is None
            else (lineage.parent_run_id, lineage.parent_tool_call_id),
            checkpoints=None
            if self._checkpoints is None
            else self._checkpoints.recorder(session.session_id, run_id, workspace),
            telemetry=run_telemetry(
                config.telemetry,
                session_id=session.session_id,
                run_id=run_id,
                model=provider_config.model or "",
                provider=provider,
                redact=context.secrets.redact,
            ),
        )

    async def _executor(
        self, config: TetherConfig, session: Session, workspace: Path, lineage: Lineage | None
    ) -> ToolExecutor:
        """The run's tools: a sub-agent's are its parent's own (the same servers, the same
        editor), others made for the session."""
        if lineage is not None:
            return lineage.executor
        return await self._tools(config, session.session_id, workspace)

    def _subagents(self, parent: _Parent, limit: int) -> Subagents | None:
        """What runs the run's ``task`` calls (None when ``task`` is not offered)."""
        if TASK_TOOL not in parent.tool_names:
            return None
        return Subagents(functools.partial(self._spawn, parent), limit)

    async def _profile(self, session: Session, folder: Path | None) -> AgentProfile | None:
        """The session's agent profile, read on a thread (InvalidParams when it is gone)."""
        if session.agent is None:
            return None
        return await asyncio.to_thread(self._profiles.require, session.agent, folder)

    async def _offer(
        self,
        session: Session,
        params: RunParams,
        config: TetherConfig,
        profile: AgentProfile | None,
        lineage: Lineage | None,
    ) -> Callable[[list[ToolSpec]], list[ToolSpec]]:
        """What the run offers of a tool list, at its start and again when a server's tools
        change: the session's, the run's, the profile's and, for a sub-agent, its parent's
        allow-lists all narrow it, then the mode; ``task`` joins it when sub-agents may run."""
        task = (
            [await self._task_spec(_local_workspace(session))]
            if _offers_task(config, lineage)
            else []
        )

        def offer(specs: list[ToolSpec]) -> list[ToolSpec]:
            allowed = _allowed([*specs, *task], session.tools, params.tools)
            return offered(narrowed(allowed, profile, lineage), session.mode)

        return offer

    async def _task_spec(self, folder: Path | None) -> ToolSpec:
        """The ``task`` tool, naming the profiles (listed on a thread, when there may be any)."""
        if self._profiles.surely_none(folder):
            return PLAIN_TASK_SPEC
        return task_spec(await asyncio.to_thread(self._profiles.list, folder))

    async def _spawn(
        self, parent: _Parent, request: TaskRequest, context: ToolContext
    ) -> RunResult:
        """Run a ``task`` call's child session to its end (see :mod:`.subagents`). Cancelled
        with the call: the child's run is cancelled, and the call's cancellation goes on."""
        session = parent.session
        params = RunParams(session_id=session.session_id, prompt=request.prompt)
        if request.agent is not None:  # InvalidParams (the call fails) before a session is made
            folder = _local_workspace(session)
            profile = await asyncio.to_thread(self._profiles.require, request.agent, folder)
            check_access(session, params, profile.model or parent.provider.model)
        assert context.tool_call_id is not None, "the kernel gives each call its id"
        depth = 1 if parent.lineage is None else parent.lineage.depth + 1
        names = sorted(n for n in parent.tool_names if n != TASK_TOOL or depth < MAX_DEPTH)
        child = await self._store.create(
            CreateSessionParams(
                title=prompt_title(request.description or request.prompt),
                model=parent.provider.model,
                agent=request.agent,
                tools=names,
                allowed_models=session.allowed_models,
                mode=session.mode,
                permissions=session.permissions,  # the parent's always answers hold for it
            ),
            session.workspace,
            spawned_by=SpawnedBy(
                session_id=session.session_id,
                run_id=context.run_id,
                tool_call_id=context.tool_call_id,
            ),
        )
        self._lineages[child.session_id] = Lineage(
            executor=parent.executor,
            tool_names=frozenset(names),
            depth=depth,
            parent_run_id=context.run_id,
            parent_tool_call_id=context.tool_call_id,
        )
        try:
            child_params = params.model_copy(update={"session_id": child.session_id})
            return await self.run(child_params, parent.emit)
        except RequestCancelled:
            raise asyncio.CancelledError from None
        finally:
            del self._lineages[child.session_id]

    async def _folder_config(self, folder: Path | None) -> TetherConfig:
        if self._load_config is not None:
            await self._load_config(folder)
        return self._config(folder)

    async def _load_instructions(
        self, workspace: Path, directory: Path | None, config: TetherConfig
    ) -> Instructions:
        """The instruction files (``AGENTS.md``): from what was read before while no file
        changed (a ``stat`` each, on the event loop), else read on a thread."""
        if self._instructions is None or not config.instructions.enabled:
            return Instructions()
        names = config.instructions.files
        cached = self._instructions.cached(workspace, directory, names)
        if cached is not None:
            return cached
        return await asyncio.to_thread(self._instructions.load, workspace, directory, names)

    async def _load_memory(self, workspace: Path, paths: list[str]) -> Memory:
        """The memory: read on a thread, unless there is surely none (the usual case: no
        ``.tether/memory``), which spares every run a hop to a thread and back (~70 µs of CPU).
        Asked again for each run, so memory added or edited since the last run is seen."""
        if self._no_memory is not None and self._no_memory(workspace, paths):
            return Memory()
        return await asyncio.to_thread(self._memory, workspace, paths)


@dataclass(frozen=True, slots=True)
class _Parent:
    """What a run's ``task`` calls give their children."""

    session: Session
    executor: ToolExecutor
    tool_names: frozenset[str]  # what the run offers
    lineage: Lineage | None  # the run's own, when it is a sub-agent
    provider: ProviderConfig
    emit: Emit


def _offers_task(config: TetherConfig, lineage: Lineage | None) -> bool:
    """``task`` is a built-in tool (``tools.enabled`` may leave it out), offered while
    ``kernel.max_subagents`` is not 0 and the run is not :data:`MAX_DEPTH` levels down."""
    enabled = config.tools.enabled
    depth = 0 if lineage is None else lineage.depth
    return (
        (enabled is None or TASK_TOOL in enabled)
        and config.kernel.max_subagents > 0
        and depth < MAX_DEPTH
    )


def _profile_model(profile: AgentProfile | None) -> str | None:
    return None if profile is None else profile.model


def _profile_iterations(profile: AgentProfile | None, configured: int) -> int:
    """A profile's ``maxIterations`` (a workspace's never over ``kernel.max_iterations``)."""
    if profile is None or profile.max_iterations is None:
        return configured
    if profile.source == "workspace":
        return min(profile.max_iterations, configured)
    return profile.max_iterations


def _memory_warning(problem: TetherError) -> RunWarning:
    """A memory path or file that was left out, as the run reports it."""
    return RunWarning(code=problem.code, message=problem.message, data=problem.data)


def _local_workspace(session: Session) -> Path | None:
    """The session's workspace folder, when it is local (None: the default's configuration)."""
    if not session.workspace.startswith("file://"):
        return None
    return local_path(session.workspace)


def _workspace_root(session: Session) -> Path:
    local = _local_workspace(session)
    if local is None:
        raise WorkspaceError(
            f"runs need a local workspace; this session's is {session.workspace}",
            {"workspace": session.workspace},
        )
    return local


def _configured_secrets(config: TetherConfig, session_id: str) -> Secrets:
    return configured_secrets(config, os.environ)


def _hidden_env(config: TetherConfig) -> frozenset[str]:
    """Environment variables tools must not pass on: the one holding the provider's API key."""
    name = config.provider.api_key_env
    return frozenset({name}) if name else frozenset()


def sandbox_policy(config: TetherConfig, *, mcp: bool = False) -> SandboxPolicy:
    """The OS sandbox of commands (``tools.sandbox``), or with ``mcp`` of the MCP servers
    tether starts (``tools.mcp_sandbox``, network allowed). tether's user configuration
    directory, data directory and checkpoint store stay read-only to them, should
    ``tools.sandbox_writable`` hold one."""
    tools = config.tools
    environ = {name: os.environ[name] for name in _STATE_ENVIRON if name in os.environ}
    return SandboxPolicy(
        mode=tools.mcp_sandbox if mcp else tools.sandbox,
        network=mcp or tools.sandbox_network,
        readable=tuple(tools.sandbox_readable),
        writable=tuple(tools.sandbox_writable),
        state=_state_paths(config.checkpoints.path, tuple(environ.items())),
    )


_STATE_ENVIRON = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "HOME")
"""The variables tether's own directories are found by (:func:`_state_paths`)."""


@functools.lru_cache(maxsize=32)
def _state_paths(
    checkpoints_path: str | None, environ: tuple[tuple[str, str], ...]
) -> tuple[str, ...]:
    """tether's user configuration directory, data directory and checkpoint store (at
    ``checkpoints.path``), for the variables of :data:`_STATE_ENVIRON` that are set
    (``environ``). Kept: building the paths anew cost ~40 µs of every run."""
    variables = dict(environ)
    user_config = user_config_path(variables)
    state = [str(user_config.parent)] if user_config is not None else []
    state.append(str(data_home(variables)))
    checkpoints = CheckpointsConfig(path=checkpoints_path)
    state.append(str(checkpoints.root(variables)))  # a checkpoint store configured elsewhere
    return tuple(state)


def _system_prompt(prompt: str | None, instructions: str, memory: str) -> str | None:
    parts = [part for part in (prompt, instructions, memory) if part]
    return "\n\n".join(parts) or None


def turn_directory(workspace: Path, directory: str | None) -> Path | None:
    """The real path of ``kernel/run``'s ``directory`` (relative to the workspace root, or
    absolute), which must be a folder inside the workspace (``InvalidParams`` otherwise)."""
    if directory is None:
        return None
    root = Path(os.path.realpath(workspace))
    try:
        real = Path(os.path.realpath(root / Path(directory).expanduser(), strict=True))
    except (OSError, ValueError):
        raise InvalidParams.field("directory", f"{directory!r} does not exist") from None
    if not real.is_relative_to(root) or not real.is_dir():
        raise InvalidParams.field(
            "directory", f"{directory!r} is not a folder inside the workspace {root}"
        )
    return real


def _allowed(
    specs: list[ToolSpec], session_tools: list[str] | None, run_tools: list[str] | None
) -> list[ToolSpec]:
    allowed = [spec for spec in specs if session_tools is None or spec.name in session_tools]
    return [spec for spec in allowed if run_tools is None or spec.name in run_tools]


def renewal_interval(lease: timedelta) -> float:
    """Seconds between two renewals of a lease: a third of it."""
    return lease.total_seconds() / 3


class _Renewal:
    """The renewal of a run's lease (:meth:`Kernel._renew`), whose task is made only when the
    first renewal is due: most runs end before, and a task made and cancelled for each run
    cost ~25 µs of the server's CPU."""

    __slots__ = ("_handle", "_task")

    def __init__(self, renew: Callable[[], Coroutine[Any, Any, None]], lease: timedelta) -> None:
        self._task: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(renewal_interval(lease), self._start, renew)

    def _start(self, renew: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._task = asyncio.ensure_future(renew())

    def cancel(self) -> None:
        self._handle.cancel()
        if self._task is not None:
            self._task.cancel()


TITLE_LENGTH = 80


def prompt_title(prompt: Content) -> str | None:
    """The first line of a prompt's text, cut to :data:`TITLE_LENGTH` (None: no text)."""
    if isinstance(prompt, str):
        text = prompt
    else:
        text = next((block.text for block in prompt if isinstance(block, TextBlock)), "")
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        return None
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"


def _cancelled_before(run_id: str, session_id: str) -> RunResult:
    """The result of a run stopped before it began: nothing was recorded."""
    return RunResult(
        run_id=run_id, session_id=session_id, stop_reason=StopReason.CANCELLED, iterations=0
    )


@dataclass(eq=False, slots=True)
class RunHandle:
    """One run of a session in this process, from :meth:`Kernel.start` (or :meth:`Kernel.run`)
    to its end. :meth:`cancel` works at every stage: before the run claims its lease (it then
    never starts), while it claims it (the lease is given back at once), and while it runs."""

    session_id: str
    cancelled: bool = False
    task: asyncio.Future[RunResult] | None = None  # the run started by Kernel.start
    running: asyncio.Task[RunResult] | None = None  # the run once it holds the lease

    def cancel(self) -> bool:
        """Stop the run; True unless it had already ended."""
        if self.running is not None:
            if self.running.done():
                return False
            self.running.cancel()
            return True
        if self.task is not None and self.task.done():
            return False
        self.cancelled = True
        return True

    async def result(self) -> RunResult:
        """The run's result (``stopReason: "cancelled"`` once cancelled), or the error that
        refused it. Cancelling this await cancels the run, which then raises
        :class:`RequestCancelled` with its partial result, as :meth:`Kernel.run` does."""
        assert self.task is not None, "only a run from Kernel.start is awaited here"
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            self.task.cancel()
            return await self.task
