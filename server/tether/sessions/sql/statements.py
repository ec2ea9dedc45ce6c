"""The statements of the hot paths, built once (SQLAlchemy then reuses their compiled form)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    case,
    insert,
    null,
    or_,
    select,
    update,
)

from tether.sessions.sql.schema import (
    _Micros,
    messages_table,
    segments_table,
    sessions_table,
    tool_calls_table,
)

# The statements of the hot paths, built once (SQLAlchemy then reuses their compiled form).
_S = sessions_table.c
_NOW = bindparam("now", type_=_Micros)
_M = messages_table.c


def _later(now: Any) -> Any:
    """The session's new ``updated_at``: ``now``, or the one it has when that is later (a clock
    behind, in another process, never moves a session's time back)."""
    return case((_S.updated_at > now, _S.updated_at), else_=now)


_COUNTERS = select(_S.id, _S.owner, _S.base_count, _S.own_count, _S.agent_id).where(
    _S.id == bindparam("sid")
)
_RESERVE = (
    update(sessions_table)
    .where(_S.id == bindparam("sid"))
    .values(own_count=_S.own_count + bindparam("n"), updated_at=_later(_NOW))
    .returning(_S.id, _S.owner, _S.base_count, _S.own_count, _S.agent_id, _S.updated_at)
)
# The lease conditions (``at``: the time of the check): a write by no run needs the session free
# of a live lease; a run's own write needs the run to hold one.
_AT = bindparam("at", type_=_Micros)
_FREE = or_(_S.lease_run_id.is_(None), _S.lease_until < _AT)
_HELD = and_(_S.lease_run_id == bindparam("rid"), _S.lease_until >= _AT)
_RESERVE_FREE = _RESERVE.where(_FREE)
_RESERVE_HELD = _RESERVE.where(_HELD)
_LEASE = select(_S.lease_run_id, _S.lease_holder, _S.lease_until).where(_S.id == bindparam("sid"))
_LEASE_LOCKED = _LEASE.with_for_update()
# Frees a session of the lease of a holder that is gone, naming it: of two processes that find it
# gone, the second frees nothing (the first has taken the lease by then).
_FREE_GONE = (
    update(sessions_table)
    .where(
        _S.id == bindparam("sid"),
        _S.lease_run_id == bindparam("gone_run"),
        _S.lease_holder == bindparam("gone_holder"),
    )
    .values(lease_run_id=null(), lease_holder=null(), lease_until=null())
    .returning(_S.id)
)
_MESSAGE_COLUMNS = (
    _M.id, _M.role, _M.content, _M.tool_calls, _M.tool_call_id, _M.is_error, _M.name,
    _M.author, _M.metadata, _M.output, _M.run_id, _M.created_at, _M.kind, _M.replaces,
)  # fmt: skip
_RANGE = (
    select(*_MESSAGE_COLUMNS)
    .where(
        _M.owner == bindparam("owner"),
        _M.position >= bindparam("low"),
        _M.position < bindparam("high"),
    )
    .order_by(_M.position)
)
_INSERT_MESSAGES = insert(messages_table)
_INSERT_CALLS = insert(tool_calls_table)
_CALL_BY_ID = select(
    tool_calls_table.c.owner, tool_calls_table.c.position, tool_calls_table.c.call_id
).where(tool_calls_table.c.call_id == bindparam("call_id"))
_CHAIN = (
    select(segments_table.c.owner, segments_table.c.upto)
    .where(segments_table.c.session_id == bindparam("sid"))
    .order_by(segments_table.c.seq)
)
_BY_MESSAGE_ID = select(_M.owner, _M.position).where(_M.id == bindparam("message_id"))
