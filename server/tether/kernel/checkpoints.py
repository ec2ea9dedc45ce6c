"""Checkpoints of a session's turns: recording what each run changed in the workspace, and
rewinding a session to the state before one of its turns.

A run records through :class:`RunCheckpoints`: before its first call of a tool that edits or
executes, a snapshot of the workspace's files; after each such step, another, and the paths that
differ from the first make the run's checkpoint (one per run that changed files, sent as a
``checkpoint`` event). Snapshots run on a thread: the event stream never waits for them. A failure
to record is told once (a ``notice``) and never fails the run.

:class:`Checkpoints` answers ``session/checkpoints``, ``session/rewind`` and ``session/fork``
with ``restoreFiles``. A turn is known by its prompt, the first user message of a run; the
checkpoints of a session are those whose prompt is in its history (a fork sees those of the
prefix it inherits). A rewind holds the session's lease like a run, so no run starts meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from tether.checkpoints import Checkpoint, CheckpointError, CheckpointStore, RewindConflict
from tether.checkpoints.store import Snapshot
from tether.protocol import InvalidParams, Message, Role, Session, WorkspaceError
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
from tether.sessions.workspaces import local_path

logger = logging.getLogger(__name__)

Emit = Callable[[ProgressEvent], None]
RECORDED_KINDS = frozenset({ToolKind.EDIT, ToolKind.EXECUTE})
"""The kinds of tool calls that may change the workspace's files."""


class RunCheckpoints:
    """The checkpoint of one run (the run calls :meth:`before` and :meth:`after` around each
    step whose calls may change files)."""

    def __init__(
        self, store: CheckpointStore, *, session_id: str, run_id: str, workspace: Path
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._run_id = run_id
        self._workspace = workspace
        self._before: Snapshot | None = None
        self._checkpoint: Checkpoint | None = None
        self._failed = False
        self._armed = False  # a step that may change files is under way

    async def before(self, kinds: Iterable[ToolKind], emit: Emit) -> None:
        """Before a step's calls: the first time they may change files, the snapshot they will
        be compared with."""
        self._armed = not self._failed and any(kind in RECORDED_KINDS for kind in kinds)
        if not self._armed or self._before is not None:
            return
        try:
            self._before = await asyncio.to_thread(
                self._store.snapshot, self._workspace, modes=True
            )
        except (CheckpointError, OSError) as exc:
            self._fail(exc, emit)

    async def after(self, prompt_id: str, emit: Emit) -> None:
        """After the step: what changed since the run's first snapshot becomes its checkpoint;
        a ``checkpoint`` event when its files changed."""
        if not self._armed or self._before is None or self._failed:
            return
        self._armed = False
        try:
            checkpoint = await asyncio.to_thread(self._record, self._before, prompt_id)
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

    def _record(self, before: Snapshot, prompt_id: str) -> Checkpoint | None:
        """The run's checkpoint brought up to date; None when it did not change."""
        after = self._store.snapshot(self._workspace)
        files = self._store.changed(self._workspace, before.tree, after.tree)
        skipped = after.skipped_since(before)
        previous = self._checkpoint
        if previous is None and not files and not skipped:
            return None
        if previous is not None and (previous.files, previous.skipped) == (files, skipped):
            previous.after = after.tree
            self._store.save(previous)
            return None
        self._checkpoint = Checkpoint(
            checkpoint_id=previous.checkpoint_id if previous else uuid7(),
            session_id=self._session_id,
            run_id=self._run_id,
            message_id=prompt_id,
            workspace=str(self._workspace),
            before=before.tree,
            after=after.tree,
            files=files,
            skipped=skipped,
            modes={p: m for p, m in before.modes.items() if p in files},
            created_at=previous.created_at if previous else utcnow().isoformat(),
        )
        self._store.save(self._checkpoint)
        return self._checkpoint

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

    def recorder(self, session_id: str, run_id: str, workspace: Path) -> RunCheckpoints:
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
            prompts = turn_prompts(await self._sessions.history(session.session_id))
            if params.message_id not in prompts:
                raise InvalidParams.field("messageId", "not the prompt of a turn of this session")
            later = prompts[prompts.index(params.message_id) :]
            result = RewindResult(restored=[], removed=[])
            if params.files:
                result = await self._restore(session, later, force=params.force)
            if params.history:
                result.messages_removed = await self._sessions.truncate(
                    session.session_id, params.message_id, run_id=rewind_id
                )
            return result
        finally:
            await self._sessions.release_run(session.session_id, rewind_id)

    async def undo(self, session_id: str, *, force: bool = False) -> RewindResult:
        """The files of the session's last turn that changed any put back (``/undo``): a rewind
        of its files at its prompt. ``-32602`` when no turn of the session changed files."""
        found = await self.list_checkpoints_of(session_id)
        if not found:
            raise InvalidParams.field("sessionId", "no turn of this session changed files")
        last = found[-1].message_id
        return await self.rewind(RewindParams(session_id=session_id, message_id=last, force=force))

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
