"""Rows as tether's models and back: sessions, leases, messages."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple

import orjson
from pydantic import TypeAdapter
from sqlalchemy import (
    Connection,
    Row,
    select,
)

from tether.protocol import (
    CompactedRange,
    Message,
    Role,
    Session,
    SessionNotFound,
    ToolCall,
)
from tether.protocol.messages import MessageContent, is_blocks
from tether.protocol.plans import PlanEntry
from tether.protocol.sessions import DEFAULT_MODE, SpawnedBy, ToolPermissions
from tether.protocol.usage import Usage
from tether.sessions.lease import Lease
from tether.sessions.packed import trusted_message
from tether.sessions.sql.schema import _from_micros, sessions_table

_Lock = Literal["update", "key share"] | None


def _find_session_row(
    connection: Connection, session_id: str, lock: _Lock = None
) -> Row[Any] | None:
    """The session's row; ``lock``: locked until the transaction ends (where the database has
    row locks: SQLite's transaction that writes already holds the whole file).

    ``update`` for a write that changes what the session holds (clear, delete); ``key share``
    for a fork: its parent then keeps what it holds until the fork is committed, while appends
    to the parent go on.
    """
    query = select(sessions_table).where(sessions_table.c.id == session_id)
    if lock == "update":
        query = query.with_for_update()
    elif lock == "key share":
        query = query.with_for_update(read=True, key_share=True)
    return connection.execute(query).first()


def _session_row(connection: Connection, session_id: str, lock: _Lock = None) -> Row[Any]:
    row = _find_session_row(connection, session_id, lock)
    if row is None:
        raise SessionNotFound(session_id)
    return row


class _Counters(NamedTuple):
    """What reading or appending to the history needs of a session."""

    id: str
    owner: str
    base_count: int
    own_count: int
    agent_id: str | None


def _lease(row: Sequence[Any]) -> Lease | None:
    """The lease of a row whose last three columns are the lease columns (None: not leased)."""
    run_id, holder, until = tuple(row)[-3:]
    if run_id is None:
        return None
    return Lease(run_id, holder, until if isinstance(until, datetime) else _from_micros(until))


def _session(row: Row[Any], now: datetime) -> Session:
    lease = _lease(row)
    return Session(
        session_id=row.id,
        workspace=row.workspace,
        title=row.title,
        agent_id=row.agent_id,
        model=row.model,
        system_prompt=row.system_prompt,
        settings=row.settings,
        metadata=row.metadata,
        tools=row.tools,
        allowed_models=row.allowed_models,
        state=row.state,
        mode=row.mode or DEFAULT_MODE,
        permissions=ToolPermissions.model_validate(row.permissions or {}),
        plan=None if row.plan is None else _PLAN.validate_python(row.plan),
        parent_session_id=row.parent_session_id,
        forked_from_message_id=row.forked_from_message_id,
        agent=row.agent,
        spawned_by=None if row.spawned_by is None else SpawnedBy.model_validate(row.spawned_by),
        message_count=row.base_count + row.own_count,
        usage=Usage(input_tokens=row.input_tokens, output_tokens=row.output_tokens, cost=row.cost),
        created_at=row.created_at,
        updated_at=row.updated_at,
        running=lease is not None and lease.blocks(now),
    )


_PLAN: TypeAdapter[list[PlanEntry]] = TypeAdapter(list[PlanEntry])


def _plan_json(plan: list[PlanEntry] | None) -> list[dict[str, Any]] | None:
    """A plan as the ``plan`` column keeps it (None: no plan)."""
    return None if plan is None else [entry.to_wire() for entry in plan]


def _permissions_json(permissions: ToolPermissions | None) -> dict[str, Any] | None:
    """The remembered answers as the ``permissions`` column keeps them (None: none)."""
    if permissions is None or not (permissions.allow_always or permissions.reject_always):
        return None
    return permissions.model_dump(by_alias=True)


def _json_safe(values: dict[str, Any]) -> dict[str, Any]:
    """JSON columns of a session row as plain JSON data (the caller keeps its own objects)."""
    for name in ("settings", "metadata", "state", "tools", "allowed_models"):
        if name in values and values[name] is not None:
            values[name] = orjson.loads(orjson.dumps(values[name]))
    return values


def _message_row(
    owner: str, agent_id: str | None, position: int, message: Message
) -> dict[str, Any]:
    content: Any = message.content
    if is_blocks(content):
        content = [block.model_dump(mode="json", exclude_none=True) for block in content]
    return {
        "owner": owner,
        "position": position,
        "id": message.id,
        "role": message.role.value,
        "content": content,
        "tool_calls": (
            None
            if message.tool_calls is None
            else [call.model_dump(mode="json") for call in message.tool_calls]
        ),
        "tool_call_id": message.tool_call_id,
        "is_error": message.is_error,
        "name": message.name,
        "author": message.author,
        "metadata": message.metadata,
        "output": message.output,
        "agent_id": agent_id,
        "run_id": message.run_id,
        "created_at": message.created_at,
        "kind": message.kind,
        "replaces": None if message.replaces is None else message.replaces.to_wire(),
    }


_CONTENT: TypeAdapter[MessageContent] = TypeAdapter(MessageContent)


def _message(row: Sequence[Any]) -> Message:
    """A row of ``_MESSAGE_COLUMNS`` as a message.

    Rows hold messages that were validated when they were appended, so only the nested models
    are rebuilt (validating every field again would be most of the cost of a page).
    """
    message_id, role, content, calls, call_id, is_error, name, author, metadata, output = row[:10]
    run_id, at, kind, span = row[10:14]
    if isinstance(content, list):
        content = _CONTENT.validate_python(content)
    return trusted_message(
        {
            "role": Role(role),
            "content": content,
            "tool_calls": (
                None if calls is None else [ToolCall.model_construct(**c) for c in calls]
            ),
            "tool_call_id": call_id,
            "is_error": is_error,
            "name": name,
            "author": author,
            "metadata": metadata,
            "kind": kind,
            "replaces": None if span is None else CompactedRange.model_validate(span),
            "output": output,
            "id": message_id,
            "run_id": run_id,
            "created_at": at,
        }
    )
