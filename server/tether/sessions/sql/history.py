"""A session's history as segments (its own messages after the prefixes it inherits):
reading ranges, finding a message, checking tool results, freeing what no session holds."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from hashlib import blake2b
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    delete,
    exists,
    select,
)

from tether.protocol import (
    InvalidParams,
    Message,
    MessageInput,
    Role,
    SessionNotFound,
)
from tether.sessions.sql.fast_path import _Exec
from tether.sessions.sql.rows import _Counters, _session_row
from tether.sessions.sql.schema import (
    _OWNER_LOCKS,
    _advisory_lock,
    messages_table,
    segments_table,
    sessions_table,
    tool_calls_table,
)
from tether.sessions.sql.statements import _BY_MESSAGE_ID, _CALL_BY_ID, _CHAIN, _COUNTERS


def _counters(db: _Exec, session_id: str) -> _Counters:
    rows = db.rows(_COUNTERS, {"sid": session_id})
    if not rows:
        raise SessionNotFound(session_id)
    return _Counters(*rows[0])


def _chain(db: _Exec | Connection, session_id: str) -> list[tuple[str, int]]:
    if isinstance(db, Connection):
        db = _Exec(db)
    return [(owner, upto) for owner, upto in db.rows(_CHAIN, {"sid": session_id})]


def _owner_key(owner: str) -> int:
    """A 32-bit key for ``owner``'s lock (two owners may share one: they then wait in turn)."""
    return int.from_bytes(blake2b(owner.encode(), digest_size=4).digest(), "big", signed=True)


def _index_of(
    db: _Exec, row: _Counters | Row[Any], chain: list[tuple[str, int]], message_id: str
) -> int | None:
    """The index of a message in a session's history, or None when it is not in it."""
    found = db.rows(_BY_MESSAGE_ID, {"message_id": message_id})
    if not found:
        return None
    owner, position = found[0]
    offset = 0
    for segment_owner, upto in [*chain, (row.owner, row.own_count)]:
        if owner == segment_owner and position < upto:
            return offset + int(position)
        offset += upto
    return None


def _read_range(db: _Exec, segments: list[tuple[str, int]], start: int, end: int) -> list[Message]:
    """Messages ``start`` to ``end`` (exclusive) of the history made of ``segments``."""
    found: list[Message] = []
    offset = 0
    for owner, upto in segments:
        low, high = max(start - offset, 0), min(end - offset, upto)
        if low < high:
            found.extend(db.messages(owner, low, high))
        offset += upto
        if offset >= end:
            break
    return found


def _newest_first(db: _Exec, segments: list[tuple[str, int]], end: int) -> Iterator[Message]:
    """The history before ``end``, newest first, read a few at a time."""
    batch = 16
    while end > 0:
        start = max(0, end - batch)
        yield from reversed(_read_range(db, segments, start, end))
        end, batch = start, batch * 4


def _check_tool_results(
    db: _Exec, row: _Counters, own_count: int, messages: Sequence[MessageInput]
) -> None:
    """Every tool message must answer a call made earlier in the session or the batch."""
    batch_calls: set[str] = set()
    wanted: dict[int, str] = {}
    for index, message in enumerate(messages):
        if message.tool_calls:
            batch_calls.update(call.id for call in message.tool_calls)
        if message.role is Role.TOOL and message.tool_call_id not in batch_calls:
            wanted[index] = message.tool_call_id or ""
    if not wanted:
        return
    chain = _chain(db, row.id) if row.base_count else []
    limits = dict(chain)
    limits[row.owner] = own_count
    known = {
        call_id
        for wanted_id in set(wanted.values())
        for owner, position, call_id in db.rows(_CALL_BY_ID, {"call_id": wanted_id})
        if position < limits.get(owner, 0)
    }
    for index, call_id in wanted.items():
        if call_id not in known:
            raise InvalidParams.field(
                f"messages.{index}.toolCallId",
                f"no tool call {call_id!r} in this session to answer",
            )


def _delete(connection: Connection, session_id: str) -> None:
    row = _session_row(connection, session_id, "update")
    owners = {row.owner, *(owner for owner, _ in _chain(connection, session_id))}
    connection.execute(delete(segments_table).where(segments_table.c.session_id == session_id))
    connection.execute(delete(sessions_table).where(sessions_table.c.id == session_id))
    _collect(connection, owners)


def _collect(connection: Connection, owners: set[str]) -> None:
    """Remove the messages of owners that no session holds or inherits any more.

    The caller has removed its own hold on ``owners``. On PostgreSQL two transactions can each
    remove one of the last two holds at once, each still seeing the other's (not committed):
    a lock per owner makes the second wait for the first to commit, and its statements then see
    that commit (READ COMMITTED), so the last one out frees the rows. A fork that adds a hold
    keeps its parent's row locked until it commits, so the parent's hold is seen until then.
    """
    if connection.dialect.name == "postgresql":
        for key in sorted({_owner_key(owner) for owner in owners}):  # one order: no deadlock
            _advisory_lock(connection, _OWNER_LOCKS, key)
    for owner in owners:
        held = connection.execute(
            select(
                exists().where(sessions_table.c.owner == owner)
                | exists().where(segments_table.c.owner == owner)
            )
        ).scalar()
        if not held:
            connection.execute(delete(messages_table).where(messages_table.c.owner == owner))
            connection.execute(delete(tool_calls_table).where(tool_calls_table.c.owner == owner))
