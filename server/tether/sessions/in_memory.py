"""The in-memory session store: the default, and the reference the other stores are tested against.

It is confined to one event loop: every method runs to completion without awaiting, so concurrent
tasks never see a half-applied append and need no lock.

Messages are kept packed, as tuples of their values (a pydantic object with its field dicts
takes about four times the size of the message's JSON); a read builds fresh messages from them,
which is what the copy every read makes would cost anyway.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from tether.protocol import (
    InvalidParams,
    ListSessionsResult,
    Message,
    MessageInput,
    MessagesResult,
    Role,
    RunLeaseLost,
    Session,
    SessionNotFound,
)
from tether.protocol.sessions import (
    DEFAULT_MODE,
    CreateSessionParams,
    ForkSessionParams,
    SessionFields,
    SpawnedBy,
    ToolPermissions,
    session_exists,
)
from tether.protocol.usage import Usage
from tether.sessions.cursors import decode_cursor, encode_cursor
from tether.sessions.forks import ALLOW_LISTS, check_fork_point, cut_chain, forked_fields
from tether.sessions.ids import utcnow, uuid7
from tether.sessions.lease import Lease, process_holder
from tether.sessions.packed import (
    Packed,
    _copy_json,
    _dumped,
    _Unpacked,
    pack_input,
    unpack,
)
from tether.sessions.store import Order, session_json

_SLICE = 250  # messages of a big append prepared between two turns of the event loop


@dataclass(slots=True)
class _Segment:
    """Messages stored together: a session's own, or a shared prefix a fork inherits."""

    messages: list[Packed] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)  # message id -> position
    tool_call_ids: dict[str, int] = field(default_factory=dict)  # call id -> position


class _Staged:
    """Packed messages waiting to be added, indexed a slice at a time at the positions they
    will take (hashing their ids then, not in the one step that adds them)."""

    __slots__ = ("answers", "base", "packed", "positions", "tool_call_ids")

    def __init__(self, base: int) -> None:
        self.base = base  # where they are to go: the session's length when they were staged
        self.packed: list[Packed] = []
        self.positions: dict[str, int] = {}
        self.tool_call_ids: dict[str, int] = {}
        self.answers: set[str] = set()  # calls made before the batch that its results answer

    def add(self, packed: list[Packed]) -> None:
        self._index(packed, self.base + len(self.packed))
        self.packed += packed

    def index_from(self, base: int) -> None:
        """Index again if the session's length changed meanwhile (cleared, or appended to)."""
        if base != self.base:
            self.base, self.positions, self.tool_call_ids = base, {}, {}
            self._index(self.packed, base)

    def _index(self, packed: list[Packed], first: int) -> None:
        self.positions.update(
            zip([m[0] for m in packed], range(first, first + len(packed)), strict=True)
        )
        for position, message in enumerate(packed, first):
            for call in message[3] or ():
                self.tool_call_ids[call[0]] = position


@dataclass(slots=True)
class _Record:
    """A session: an inherited chain of ``(segment, upto)`` prefixes, then its own messages.

    A fork shares its parent's lists (never copied); appends only ever go past ``upto``, and
    ``clear`` gives the session new lists, so a shared prefix never changes.
    """

    session: Session
    messages: list[Packed] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    tool_call_ids: dict[str, int] = field(default_factory=dict)
    chain: list[tuple[_Segment, int]] = field(default_factory=list)
    base_count: int = 0
    lease: Lease | None = None  # the run that holds the session (live or not)
    encoded: bytes | None = None
    """The session as JSON with ``running`` false, made by the first read after a write
    (:meth:`MemoryStore.get_json`); every write to ``session`` sets it back to None."""

    def own(self) -> _Segment:
        return _Segment(self.messages, self.positions, self.tool_call_ids)

    def segments(self) -> list[tuple[_Segment, int]]:
        return [*self.chain, (self.own(), len(self.messages))]

    def total(self) -> int:
        return self.base_count + len(self.messages)

    def index_of(self, message_id: str) -> int | None:
        offset = 0
        for segment, upto in self.chain:
            position = segment.positions.get(message_id)
            if position is not None and position < upto:
                return offset + position
            offset += upto
        position = self.positions.get(message_id)
        return None if position is None else offset + position

    def knows_call(self, call_id: str | None) -> bool:
        if call_id is None:
            return False
        if call_id in self.tool_call_ids:
            return True
        for segment, upto in self.chain:
            position = segment.tool_call_ids.get(call_id)
            if position is not None and position < upto:
                return True
        return False

    def slice(self, start: int, end: int) -> list[Packed]:
        """Messages ``start`` to ``end`` (exclusive) of the whole history."""
        found: list[Packed] = []
        offset = 0
        for segment, upto in self.segments():
            low, high = max(start - offset, 0), min(end - offset, upto)
            if low < high:
                found.extend(segment.messages[low:high])
            offset += upto
            if offset >= end:
                break
        return found

    def newest_first(self, end: int) -> Iterator[Message]:
        offset_ends: list[tuple[_Segment, int, int]] = []
        offset = 0
        for segment, upto in self.segments():
            offset_ends.append((segment, offset, upto))
            offset += upto
        for segment, offset, upto in reversed(offset_ends):
            for position in range(min(upto, end - offset) - 1, -1, -1):
                yield unpack(segment.messages[position])


class MemoryStore:
    kind = "memory"
    durable = False

    def __init__(
        self, *, clock: Callable[[], datetime] = utcnow, holder: str | None = None
    ) -> None:
        """``clock`` tells leases' time; ``holder`` names this process in them."""
        self._records: dict[str, _Record] = {}
        self._clock = clock
        self.holder = holder or process_holder()

    async def create(
        self, params: CreateSessionParams, workspace: str, *, spawned_by: SpawnedBy | None = None
    ) -> Session:
        if params.session_id is not None and params.session_id in self._records:
            raise session_exists(params.session_id)
        now = utcnow()
        session = Session(
            session_id=params.session_id or uuid7(),
            workspace=workspace,
            title=params.title,
            agent_id=params.agent_id,
            model=params.model,
            system_prompt=params.system_prompt,
            settings=copy.deepcopy(params.settings) or {},
            metadata=copy.deepcopy(params.metadata) or {},
            tools=list(params.tools) if params.tools is not None else None,
            allowed_models=(
                list(params.allowed_models) if params.allowed_models is not None else None
            ),
            state=_copy_json(params.state) if params.state else {},
            mode=params.mode or DEFAULT_MODE,
            permissions=params.permissions or ToolPermissions(),
            plan=None if params.plan is None else list(params.plan),
            agent=params.agent,
            spawned_by=spawned_by,
            created_at=now,
            updated_at=now,
        )
        self._records[session.session_id] = _Record(session)
        return _copy_session(session)

    async def get(self, session_id: str) -> Session:
        return self._copy(self._record(session_id))

    def get_json(self, session_id: str) -> bytes:
        """What :func:`session_json` makes of ``get``: encoded once per version of the
        session, so repeated reads of an unchanged session cost a lookup."""
        record = self._record(session_id)
        if self._live_lease(record) is not None:  # rare: running, encoded each time
            return session_json(self._copy(record))
        if record.encoded is None:
            record.encoded = session_json(record.session)
        return record.encoded

    def workspace_of(self, session_id: str) -> str:
        return self._record(session_id).session.workspace

    async def list_sessions(
        self, *, workspace: str | None, cursor: str | None, limit: int
    ) -> ListSessionsResult:
        records = {
            record.session.session_id: record
            for record in self._records.values()
            if workspace is None or record.session.workspace == workspace
        }
        sessions = [record.session for record in records.values()]
        sessions.sort(key=_newest_first_key, reverse=True)
        if cursor is not None:
            updated_at, session_id = decode_cursor("sessions", cursor, 2)
            sessions = [s for s in sessions if _newest_first_key(s) < (updated_at, session_id)]
        page = sessions[:limit]
        next_cursor = None
        if len(sessions) > limit:
            next_cursor = encode_cursor("sessions", *_newest_first_key(page[-1]))
        return ListSessionsResult(
            sessions=[self._copy(records[s.session_id]) for s in page], next_cursor=next_cursor
        )

    async def messages(
        self, session_id: str, *, cursor: str | None, limit: int, order: Order
    ) -> MessagesResult:
        record = self._record(session_id)
        total = record.total()
        after = self._cursor_position(record, cursor)
        if order == "asc":
            start = 0 if after is None else after + 1
            page = record.slice(start, start + limit)
            more = start + limit < total
        else:
            end = total if after is None else after
            start = max(0, end - limit)
            page = record.slice(start, end)[::-1]
            more = start > 0
        next_cursor = encode_cursor("messages", page[-1][0]) if more and page else None
        return MessagesResult(
            messages=[unpack(m) for m in page], total=total, next_cursor=next_cursor
        )

    async def append(
        self,
        session_id: str,
        messages: Sequence[MessageInput],
        *,
        run_id: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Message]:
        """All or nothing. A big batch is packed a slice at a time, other requests served in
        between, and then added in one step (a session deleted meanwhile is SessionNotFound)."""
        record = self._record(session_id)
        self._check_writer(record, run_id)
        staged = _Staged(len(record.messages))
        _check_tool_results(record.knows_call, messages, set(), answers=staged.answers)
        now = _later(record.session)
        new_ids = list(ids) if ids is not None else [uuid7() for _ in messages]
        if len(new_ids) != len(messages) or (
            ids is not None and any(record.index_of(i) is not None for i in new_ids)
        ):
            raise ValueError("ids must be new and one per message")
        for start in range(0, len(messages), _SLICE):
            if start:
                await asyncio.sleep(0)
            window = slice(start, start + _SLICE)
            pairs = zip(messages[window], new_ids[window], strict=True)
            staged.add([pack_input(m, i, now, run_id) for m, i in pairs])
        self._commit(session_id, run_id, staged, now)
        packed = staged.packed  # _commit may have given them a later time
        copies: list[Message] = []
        for start in range(0, len(packed), _SLICE):
            if start:
                await asyncio.sleep(0)
            copies += [unpack(m) for m in packed[start : start + _SLICE]]
        return copies

    async def append_slices(
        self, session_id: str, slices: AsyncIterator[Sequence[MessageInput]]
    ) -> Sequence[Message]:
        """Each slice is packed as it comes (its inputs can then be let go), and indexed at the
        positions it will take; the whole batch is added in one step at the end. The answer
        unpacks the stored messages only when read."""
        record = self._record(session_id)
        self._check_writer(record, None)
        now = _later(record.session)
        staged = _Staged(len(record.messages))
        batch_calls: set[str] = set()
        async for batch in slices:
            offset = len(staged.packed)
            _check_tool_results(record.knows_call, batch, batch_calls, offset, staged.answers)
            staged.add([pack_input(m, uuid7(), now, None) for m in batch])
        self._commit(session_id, None, staged, now)
        return _Unpacked(staged.packed)

    def append_json(self, session_id: str, messages: Sequence[MessageInput]) -> bytes:
        """A client's small append (validated, at most a slice), added at once, and its answer
        (``{"messages": [...]}``) encoded as the wire encodes it: what ``append_slices`` and the
        handler's encoding make, in one step (nothing is awaited between the checks and the
        write, so nothing needs checking twice) and without building a message to dump it."""
        record = self._record(session_id)
        if record.lease is not None:
            self._check_writer(record, None)
        _check_tool_results(record.knows_call, messages, set())
        now = max(utcnow(), record.session.updated_at)
        staged = _Staged(len(record.messages))
        staged.add([pack_input(m, uuid7(), now, None) for m in messages])
        _add_staged(record, staged, now)
        packed = staged.packed
        return orjson.dumps({"messages": [_dumped(m) for m in packed]}, option=orjson.OPT_UTC_Z)

    def _commit(self, session_id: str, run_id: str | None, staged: _Staged, now: datetime) -> None:
        """Add staged messages to a session in one step, checking again what an await may have
        changed: the session may be gone, or leased to a run since."""
        record = self._record(session_id)
        self._check_writer(record, run_id)
        gone = (
            next((call for call in staged.answers if not record.knows_call(call)), None)
            if staged.answers
            else None
        )
        if gone is not None:  # the session was cleared meanwhile
            raise InvalidParams.field(
                "messages", f"no tool call {gone!r} in this session to answer (it was cleared)"
            )
        at = record.session.updated_at
        if at > now:  # a write since the staging began is later: times never run backwards
            staged.packed[:] = [(*m[:-1], at) for m in staged.packed]
            now = at
        staged.index_from(len(record.messages))
        _add_staged(record, staged, now)

    async def history(self, session_id: str) -> list[Message]:
        record = self._record(session_id)
        return [unpack(m) for m in record.slice(0, record.total())]

    async def configure(self, session_id: str, changes: SessionFields) -> Session:
        record = self._record(session_id)
        record.encoded = None
        session = record.session
        for name in changes.model_fields_set & SessionFields.model_fields.keys():
            value = getattr(changes, name)
            if name in ("settings", "metadata", "state") and value is None:
                value = {}
            setattr(session, name, copy.deepcopy(value))
        session.updated_at = _later(session)
        return self._copy(self._record(session_id))

    async def add_usage(self, session_id: str, usage: Usage) -> None:
        record = self._record(session_id)
        record.encoded = None
        total = record.session.usage
        total.input_tokens += usage.input_tokens
        total.output_tokens += usage.output_tokens
        if usage.cost is not None:
            total.cost = (total.cost or 0.0) + usage.cost

    async def clear(self, session_id: str) -> Session:
        record = self._record(session_id)
        self._check_writer(record, None)
        record.messages = []
        record.positions = {}
        record.tool_call_ids = {}
        record.chain = []
        record.base_count = 0
        record.session.message_count = 0
        record.session.updated_at = _later(record.session)
        record.encoded = None
        return self._copy(record)

    async def truncate(self, session_id: str, message_id: str, *, run_id: str) -> int:
        record = self._record(session_id)
        self._check_writer(record, run_id)
        keep = record.index_of(message_id)
        if keep is None:
            raise InvalidParams.field("messageId", "no such message in this session")
        removed = record.total() - keep
        # what is kept becomes an inherited prefix: forks that share the lists keep theirs
        record.chain = cut_chain(record.chain, record.own(), len(record.messages), keep)
        record.messages, record.positions, record.tool_call_ids = [], {}, {}
        record.base_count = keep
        record.session.message_count = keep
        record.session.updated_at = _later(record.session)
        record.encoded = None
        return removed

    async def delete(self, session_id: str) -> None:
        self._check_writer(self._record(session_id), None)
        del self._records[session_id]

    async def fork(self, params: ForkSessionParams) -> Session:
        parent = self._record(params.session_id)
        keep = parent.total()
        if params.at_message_id is not None:
            index = parent.index_of(params.at_message_id)
            if index is None:
                raise InvalidParams.field("atMessageId", "no such message in this session")
            keep = index + 1
        if keep:
            self._check_fork_point_not_in_run(parent, parent.slice(keep - 1, keep)[0])
        check_fork_point(parent.newest_first(keep))
        given = forked_fields({name: getattr(parent.session, name) for name in ALLOW_LISTS}, params)
        now = utcnow()
        session = _copy_session(parent.session).model_copy(
            update={
                "session_id": uuid7(),
                "parent_session_id": parent.session.session_id,
                "forked_from_message_id": parent.slice(keep - 1, keep)[0][0] if keep else None,
                "spawned_by": None,
                "message_count": keep,
                "usage": Usage(),
                "created_at": now,
                "updated_at": max(now, parent.session.updated_at),
            }
        )
        for name, value in given.items():
            setattr(session, name, value)
        chain = cut_chain(parent.chain, parent.own(), len(parent.messages), keep)
        self._records[session.session_id] = _Record(session, chain=chain, base_count=keep)
        return _copy_session(session)

    async def expire(self, idle_before: datetime, keep: Callable[[str], bool]) -> list[str]:
        """Delete the sessions last updated before ``idle_before``, except those ``keep`` keeps."""
        expired = [
            session_id
            for session_id, record in self._records.items()
            if record.session.updated_at < idle_before
            and not keep(session_id)
            and self._live_lease(record) is None
        ]
        for session_id in expired:
            del self._records[session_id]
        return expired

    async def claim_run(self, session_id: str, run_id: str, lease: timedelta) -> None:
        record = self._record(session_id)
        held = self._live_lease(record)
        if held is not None:
            raise held.busy(session_id, self.holder)
        record.lease = Lease(run_id, self.holder, self._clock() + lease)

    async def renew_run(self, session_id: str, run_id: str, lease: timedelta) -> bool:
        record = self._records.get(session_id)
        held = None if record is None else self._live_lease(record)
        if record is None or held is None or held.run_id != run_id:
            return False
        record.lease = Lease(run_id, self.holder, self._clock() + lease)
        return True

    async def release_run(self, session_id: str, run_id: str) -> None:
        record = self._records.get(session_id)
        if record is not None and record.lease is not None and record.lease.run_id == run_id:
            record.lease = None

    async def aclose(self) -> None:
        return None

    def _live_lease(self, record: _Record) -> Lease | None:
        lease = record.lease
        return lease if lease is not None and lease.live(self._clock()) else None

    def _check_writer(self, record: _Record, run_id: str | None) -> None:
        """A run writes only under its live lease; anyone else only while no lease is live."""
        held = self._live_lease(record)
        if run_id is not None and (held is None or held.run_id != run_id):
            raise RunLeaseLost(record.session.session_id, run_id)
        if run_id is None and held is not None:
            raise held.busy(record.session.session_id, self.holder)

    def _check_fork_point_not_in_run(self, record: _Record, point: Packed) -> None:
        """A fork at a message of the running turn would take an unfinished turn."""
        held = self._live_lease(record)
        if held is not None and point[10] == held.run_id:  # the message's run_id
            raise held.busy(record.session.session_id, self.holder)

    def _copy(self, record: _Record) -> Session:
        session = _copy_session(record.session)
        session.running = self._live_lease(record) is not None
        return session

    def _record(self, session_id: str) -> _Record:
        record = self._records.get(session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    @staticmethod
    def _cursor_position(record: _Record, cursor: str | None) -> int | None:
        if cursor is None:
            return None
        (message_id,) = decode_cursor("messages", cursor, 1)
        position = record.index_of(message_id)
        if position is None:
            raise InvalidParams.field("cursor", "the message it points at is no longer there")
        return position


def _newest_first_key(session: Session) -> tuple[str, str]:
    return (session.updated_at.isoformat(), session.session_id)


def _check_tool_results(
    known_call: Callable[[str | None], bool],
    messages: Sequence[MessageInput],
    batch_calls: set[str],
    offset: int = 0,
    answers: set[str] | None = None,
) -> None:
    """Every tool message must answer a tool call made earlier in the session or the batch.

    ``batch_calls`` holds the calls of the batch's earlier slices (and gains this one's);
    ``offset`` is the position of ``messages`` in the batch; ``answers`` gains the calls made
    before the batch that it answers (checked again when a batch is added after awaits)."""
    for index, message in enumerate(messages, offset):
        if message.tool_calls:
            batch_calls.update(call.id for call in message.tool_calls)
        answered = message.tool_call_id
        if message.role is not Role.TOOL or answered in batch_calls:
            continue
        if not known_call(answered):
            raise InvalidParams.field(
                f"messages.{index}.toolCallId",
                f"no tool call {message.tool_call_id!r} in this session to answer",
            )
        if answers is not None and answered is not None:
            answers.add(answered)


def _add_staged(record: _Record, staged: _Staged, now: datetime) -> None:
    """Add messages staged (and indexed) at the session's current length, written at ``now``."""
    record.messages.extend(staged.packed)
    record.positions.update(staged.positions)
    for call_id, position in staged.tool_call_ids.items():  # never a pass over the session's
        record.tool_call_ids[call_id] = position
    record.session.message_count = record.total()
    record.session.updated_at = max(now, record.session.updated_at)
    record.encoded = None


def _later(session: Session) -> datetime:
    """Now, or the session's ``updated_at`` if the clock went back since: a session's times,
    and so the times of its messages along their positions, never run backwards."""
    return max(utcnow(), session.updated_at)


def _copy_session(session: Session) -> Session:
    """A copy the caller owns: only the containers are copied, the rest is immutable."""
    return _shallow_copy(
        session,
        settings=_copy_json(session.settings),
        metadata=_copy_json(session.metadata),
        tools=None if session.tools is None else list(session.tools),
        allowed_models=None if session.allowed_models is None else list(session.allowed_models),
        state=_copy_json(session.state),
        permissions=_copy_permissions(session.permissions),
        plan=None if session.plan is None else list(session.plan),  # entries are not changed
        usage=_shallow_copy(session.usage),
    )


def _copy_permissions(permissions: ToolPermissions) -> ToolPermissions:
    return _shallow_copy(
        permissions,
        allow_always=list(permissions.allow_always),
        reject_always=list(permissions.reject_always),
    )


_M = TypeVar("_M", bound=BaseModel)


def _shallow_copy(model: _M, **changes: Any) -> _M:
    """``model.model_copy(update=changes)`` for a model without extra or private attributes,
    as pydantic's ``model_construct`` builds one: a third of the time (a ``session/get`` makes
    two of them)."""
    copied = object.__new__(type(model))
    fields = model.__dict__.copy()
    fields.update(changes)
    object.__setattr__(copied, "__dict__", fields)
    object.__setattr__(copied, "__pydantic_fields_set__", {*model.__pydantic_fields_set__})
    object.__setattr__(copied, "__pydantic_extra__", None)
    object.__setattr__(copied, "__pydantic_private__", None)
    return copied
