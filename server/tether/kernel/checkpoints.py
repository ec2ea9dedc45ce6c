"""Checkpoints of a session's turns: recording what each run changed in the workspace, and
rewinding a session to the state before one of its turns.

A run records through :class:`RunCheckpoints`: around each step with calls of a tool that edits
or executes, a snapshot of the workspace's files before and after it; the paths every step
changed make the run's checkpoint (one per run that changed files, sent as a ``checkpoint``
event). Snapshots run on a thread: the event stream never waits for them. A failure to record is
told once (a ``notice``) and never fails the run. The store takes a workspace's first snapshot
in the background as a run starts (:meth:`CheckpointStore.prewarm`).

:class:`Checkpoints` answers ``session/checkpoints``, ``session/rewind`` and ``session/fork``
with ``restoreFiles``, and gives ``/undo`` and ``/rewind`` their rewind under the lease their
run holds. A turn is known by its prompt, the first user message of a run; the checkpoints of a
session are those whose prompt is in its history (a fork sees those of the prefix it inherits).
A rewind holds the session's lease like a run, so no run starts meanwhile. A deleted session's
checkpoints are dropped, and the store pruned now and then (:meth:`Checkpoints.session_deleted`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from tether.checkpoints import Checkpoint, CheckpointError, CheckpointStore, RewindConflict
from tether.checkpoints.store import Snapshot
from tether.protocol import (
    InvalidParams,
    Message,
    Role,
    Session,
    SessionNotFound,
    WorkspaceError,
)
from tether.protocol.checkpoints import (
    CheckpointInfo,
    CheckpointsParams,
    CheckpointsResult,
    RewindParams,
    RewindResult,
)
from tether.protocol.kernel import CheckpointRecorded, Notice, ProgressEvent
from tether.protocol.sessions import ForkSessionParams
from tether.protocol.tools import ToolKind
from tether.sessions.ids import utcnow, uuid7
from tether.sessions.store import SessionStore
from tether.sessions.workspaces import canonical_workspace, local_path

logger = logging.getLogger(__name__)

Emit = Callable[[ProgressEvent], None]
RECORDED_KINDS = frozenset({ToolKind.EDIT, ToolKind.EXECUTE})
"""The kinds of tool calls that may change the workspace's files."""


class RunCheckpoints:
    """The checkpoint of one run (the run calls :meth:`before` and :meth:`after` around each
    step whose calls may change files).

    Each step is recorded on its own: a snapshot just before it, one just after, and the paths
    that differ are what the step changed. A step of file tools only (``write_file``,
    ``edit_file``: their proposed change names the one file each writes) gives those paths, and
    only they are looked at: milliseconds, whatever the size of the tree, and nothing another
    session changes meanwhile is taken for this run's. A step that runs a command (or a tool
    that names no file) scans the whole workspace; what another session changes in the same
    workspace during that step counts as this run's too. The run's checkpoint is the union of
    its steps' paths, each with its state before the first step that changed it."""

    def __init__(
        self, store: CheckpointStore, *, session_id: str, run_id: str, workspace: Path
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._run_id = run_id
        self._workspace = workspace
        self._step: tuple[Snapshot, frozenset[str] | None] | None = None  # under way
        self._base: str | None = None  # the tree of each file before the run first changed it
        self._files: set[str] = set()  # every path a step changed
        self._skipped: set[str] = set()
        self._modes: dict[str, int] = {}
        self._checkpoint: Checkpoint | None = None
        self._failed = False

    async def before(
        self, kinds: Iterable[ToolKind], emit: Emit, paths: Collection[str] | None = None
    ) -> None:
        """Before a step's calls, when they may change files: the snapshot they will be
        compared with. ``paths``: the only files the calls can write (None: unknown)."""
        self._step = None
        if self._failed or not any(kind in RECORDED_KINDS for kind in kinds):
            return
        only = None if paths is None else frozenset(paths)
        if only is not None and not only:
            return  # edits of no file (session state)
        try:
            snapshot = await asyncio.to_thread(
                self._store.snapshot, self._workspace, modes=True, paths=only
            )
        except (CheckpointError, OSError) as exc:
            self._fail(exc, emit)
            return
        self._step = (snapshot, only)

    async def after(self, prompt_id: str, emit: Emit) -> None:
        """After the step: what it changed joins the run's checkpoint; a ``checkpoint`` event
        when the checkpoint's files changed."""
        step, self._step = self._step, None
        if step is None or self._failed:
            return
        try:
            checkpoint = await asyncio.to_thread(self._record, *step, prompt_id)
        except (CheckpointError, OSError) as exc:
            self._fail(exc, emit)
            return
        if checkpoint is not None:
            emit(
                CheckpointRecorded(
                    checkpoint_id=checkpoint.checkpoint_id,
                    files=checkpoint.files,
                    skipped=checkpoint.skipped or None,
                )
            )

    def _record(
        self, before: Snapshot, paths: frozenset[str] | None, prompt_id: str
    ) -> Checkpoint | None:
        """The run's checkpoint brought up to date; None when it did not change."""
        store, workspace = self._store, self._workspace
        after = store.snapshot(workspace, paths=paths)
        every = store.changed(workspace, before.tree, after.tree)
        skipped = after.skipped_since(before)
        changed = every
        if paths is not None:  # another session's files, recorded meanwhile, are not ours
            changed = [p for p in every if p in paths]
            skipped = [p for p in skipped if p in paths]
        self._skipped.update(skipped)
        self._join(before, changed)
        if self._base is None:
            if not self._skipped:
                return None
            self._base = before.tree  # files over a cap only: reported all the same
        since = (
            every if self._base == before.tree else store.changed(workspace, self._base, after.tree)
        )
        files = sorted(set(since) & self._files)
        previous = self._checkpoint
        skipped = sorted(self._skipped)
        if previous is None and not files and not skipped:
            return None
        if previous is not None and (previous.files, previous.skipped) == (files, skipped):
            previous.after = after.tree
            store.save(previous)
            return None
        self._checkpoint = Checkpoint(
            checkpoint_id=previous.checkpoint_id if previous else uuid7(),
            session_id=self._session_id,
            run_id=self._run_id,
            message_id=prompt_id,
            workspace=str(workspace),
            before=self._base,
            after=after.tree,
            files=files,
            skipped=skipped,
            modes={p: m for p, m in self._modes.items() if p in files},
            created_at=previous.created_at if previous else utcnow().isoformat(),
        )
        store.save(self._checkpoint)
        return self._checkpoint

    def _join(self, before: Snapshot, changed: list[str]) -> None:
        """Add a step's changed paths to the run's, each new one with its state before the step
        (the base tree patched when that differs from the base's: changed since by someone
        else)."""
        fresh = [p for p in changed if p not in self._files]
        if not fresh:
            return
        if self._base is None:
            self._base = before.tree
        elif self._base != before.tree:
            then = self._store.entries(self._workspace, before.tree, fresh)
            base = self._store.entries(self._workspace, self._base, fresh)
            differ = {p: then.get(p) for p in fresh if then.get(p) != base.get(p)}
            if differ:
                self._base = self._store.patched(self._workspace, self._base, differ)
        self._files.update(fresh)
        self._modes.update((p, before.modes[p]) for p in fresh if p in before.modes)

    def _fail(self, exc: BaseException, emit: Emit) -> None:
        """Told once; the run records nothing more."""
        self._failed = True
        logger.warning("checkpoints of run %s: %s", self._run_id, exc)
        message = f"files not recorded for undo: {exc}"
        emit(Notice(message=message, data={"source": "checkpoints"}))


class Checkpoints:
    """The checkpoint methods of sessions, over the session store and the checkpoint store."""

    def __init__(
        self, sessions: SessionStore, store: CheckpointStore, lease: Callable[[], timedelta]
    ) -> None:
        self._sessions = sessions
        self._store = store
        self._lease = lease

    async def session_deleted(self, session_id: str, *, interval: float) -> None:
        """A session was deleted (or expired): the checkpoints its runs recorded are dropped,
        but for those of turns a fork of it still has; the store's objects no checkpoint refers
        to any more are pruned in the background, at most every ``interval`` seconds."""
        found = await asyncio.to_thread(self._store.of_session, session_id)
        if not found:
            return
        shared = await self._still_shared(found)
        dropped = [c for c in found if c.message_id not in shared]
        if dropped:
            await asyncio.to_thread(self._store.forget, dropped, interval=interval)

    async def _still_shared(self, checkpoints: Sequence[Checkpoint]) -> set[str]:
        """The prompts among those of ``checkpoints`` that a fork still has in its history (a
        fork shares its parent's messages; only a fork can have another session's)."""
        wanted = {c.message_id for c in checkpoints}
        shared: set[str] = set()
        for workspace in {c.workspace for c in checkpoints}:
            cursor: str | None = None
            while True:
                page = await self._sessions.list_sessions(
                    workspace=canonical_workspace(workspace), cursor=cursor, limit=100
                )
                for session in page.sessions:
                    if session.parent_session_id is None:
                        continue
                    try:
                        history = await self._sessions.history(session.session_id)
                    except SessionNotFound:  # deleted meanwhile
                        continue
                    shared.update(m.id for m in history if m.id in wanted)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return shared

    def recorder(self, session_id: str, run_id: str, workspace: Path) -> RunCheckpoints:
        """The recorder of a run that starts: the store prepares the workspace meanwhile (its
        first snapshot, in the background, while the model is called)."""
        self._store.prewarm(workspace)
        return RunCheckpoints(
            self._store, session_id=session_id, run_id=run_id, workspace=workspace
        )

    async def list_checkpoints(self, params: CheckpointsParams) -> CheckpointsResult:
        found = await self.list_checkpoints_of(params.session_id)
        return CheckpointsResult(checkpoints=[_info(c) for c in found])

    async def list_checkpoints_of(self, session_id: str) -> list[Checkpoint]:
        """The checkpoints of the turns in the session's history, oldest first."""
        return await self._of_prompts(turn_prompts(await self._sessions.history(session_id)))

    async def rewind(self, params: RewindParams) -> RewindResult:
        """Files, history or both back to where they were before the turn of ``messageId``."""
        session = await self._sessions.get(params.session_id)
        rewind_id = uuid7()
        await self._sessions.claim_run(session.session_id, rewind_id, self._lease())
        try:
            return await self.rewind_held(session, params, rewind_id)
        finally:
            await self._sessions.release_run(session.session_id, rewind_id)

    async def rewind_held(
        self, session: Session, params: RewindParams, run_id: str
    ) -> RewindResult:
        """:meth:`rewind` by the holder of the session's lease ``run_id`` (a built-in command
        runs under its run's lease)."""
        prompts = turn_prompts(await self._sessions.history(session.session_id))
        if params.message_id not in prompts:
            raise InvalidParams.field("messageId", "not the prompt of a turn of this session")
        later = prompts[prompts.index(params.message_id) :]
        result = RewindResult(restored=[], removed=[])
        if params.files:
            result = await self._restore(session, later, force=params.force)
        if params.history:
            result.messages_removed = await self._sessions.truncate(
                session.session_id, params.message_id, run_id=run_id
            )
        return result

    async def undo(self, session_id: str, *, force: bool = False) -> RewindResult:
        """The files of the session's last turn that changed any put back (``/undo``): a rewind
        of its files at its prompt. ``-32602`` when no turn of the session changed files."""
        last = await self.last_turn(session_id)
        return await self.rewind(RewindParams(session_id=session_id, message_id=last, force=force))

    async def last_turn(self, session_id: str, count: int = 1) -> str:
        """The prompt of the ``count``-th last turn of the session that changed files;
        ``-32602`` when fewer turns did."""
        found = await self.list_checkpoints_of(session_id)
        if not found:
            raise InvalidParams.field("sessionId", "no turn of this session changed files")
        if count > len(found):
            raise InvalidParams.field(
                "prompt", f"only {len(found)} turn(s) of this session changed files"
            )
        return found[-count].message_id

    async def fork(self, params: ForkSessionParams) -> Session:
        """``session/fork`` with ``restoreFiles``: the turns after the fork point (from the one
        whose prompt it is, when it is a prompt) are undone in the files, then the fork made."""
        parent = await self._sessions.get(params.session_id)
        hold_id = uuid7()
        await self._sessions.claim_run(parent.session_id, hold_id, self._lease())
        try:
            history = await self._sessions.history(parent.session_id)
            at = _position(history, params.at_message_id)
            prompts = turn_prompts(history)
            positions = {m.id: i for i, m in enumerate(history)}
            later = [p for p in prompts if positions[p] >= at]
            await self._restore(parent, later, force=False)
        finally:
            await self._sessions.release_run(parent.session_id, hold_id)
        return await self._sessions.fork(params)

    async def _restore(
        self, session: Session, prompts: Sequence[str], *, force: bool
    ) -> RewindResult:
        workspace = _workspace(session)
        found = await self._of_prompts(prompts)
        if not found:
            return RewindResult(restored=[], removed=[])
        try:
            rewound = await asyncio.to_thread(self._store.rewind, workspace, found, force=force)
        except RewindConflict as conflict:
            raise InvalidParams(
                f"{conflict}; nothing was changed (force: true overwrites them)",
                {
                    "fields": [{"field": "force", "message": str(conflict)}],
                    "paths": conflict.paths,
                },
            ) from None
        except (CheckpointError, OSError) as exc:
            raise WorkspaceError(f"the files could not be restored: {exc}") from None
        return RewindResult(restored=rewound.restored, removed=rewound.removed)

    async def _of_prompts(self, prompts: Sequence[str]) -> list[Checkpoint]:
        """The checkpoints of these prompts, in the order of the prompts."""
        found = await asyncio.to_thread(self._store.of_messages, prompts)
        order = {prompt: i for i, prompt in enumerate(prompts)}
        return sorted(found, key=lambda c: (order[c.message_id], c.created_at))


def turn_prompts(history: Sequence[Message]) -> list[str]:
    """The prompt of each turn, oldest first: the first user message of each run."""
    seen: set[str] = set()
    prompts: list[str] = []
    for message in history:
        run_id = message.run_id
        if message.role is Role.USER and run_id is not None and run_id not in seen:
            seen.add(run_id)
            prompts.append(message.id)
    return prompts


def _position(history: Sequence[Message], message_id: str | None) -> int:
    """Where the fork point is in the history: a prompt is undone with its turn; any other
    message keeps the turn it belongs to (its files as that turn left them)."""
    if message_id is None:
        return len(history)
    for index, message in enumerate(history):
        if message.id == message_id:
            return index
    raise InvalidParams.field("atMessageId", "no such message in this session")


def _workspace(session: Session) -> Path:
    if not session.workspace.startswith("file://"):
        raise WorkspaceError(
            f"checkpoints need a local workspace; this session's is {session.workspace}",
            {"workspace": session.workspace},
        )
    return local_path(session.workspace)


def _info(checkpoint: Checkpoint) -> CheckpointInfo:
    return CheckpointInfo(
        checkpoint_id=checkpoint.checkpoint_id,
        message_id=checkpoint.message_id,
        run_id=checkpoint.run_id,
        created_at=datetime.fromisoformat(checkpoint.created_at),
        files=checkpoint.files,
        skipped=checkpoint.skipped or None,
    )
