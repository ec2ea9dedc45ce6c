"""The ``SessionStore`` protocol every store implements (memory, SQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

import orjson

from tether.protocol import (
    ListSessionsResult,
    Message,
    MessageInput,
    MessagesResult,
    Session,
)
from tether.protocol.sessions import (
    CreateSessionParams,
    ForkSessionParams,
    SessionFields,
    SpawnedBy,
)
from tether.protocol.usage import Usage

Order = Literal["asc", "desc"]


def session_json(session: Session) -> bytes:
    """A session as the wire encodes a result (``model_dump(by_alias=True, exclude_none=True)``
    and orjson, times in UTC as ``Z``)."""
    dumped = session.model_dump(by_alias=True, exclude_none=True)
    return orjson.dumps(dumped, option=orjson.OPT_UTC_Z)


def with_instructions(encoded: bytes, paths: list[str]) -> bytes:
    """An encoded session (a JSON object) with ``"instructions": paths`` added."""
    return b"%s,%s:%s}" % (encoded[:-1], b'"instructions"', orjson.dumps(paths))


class JsonReads(Protocol):
    """A store that can answer ``session/get`` already encoded (the memory store, which
    keeps the encoding of each session until it changes)."""

    def get_json(self, session_id: str) -> bytes:
        """``session_json(await get(session_id))``, without building the copy."""
        ...

    def workspace_of(self, session_id: str) -> str:
        """The session's workspace (a session's never changes), without building a copy."""
        ...


class JsonAppends(Protocol):
    """A store that can append a client's small batch at once and answer it encoded (the
    memory store: nothing to wait for between its checks and its write)."""

    def append_json(self, session_id: str, messages: Sequence[MessageInput]) -> bytes:
        """What ``append_slices`` of one slice stores, and its answer ``{"messages": [...]}``
        as the wire encodes a result."""
        ...


@runtime_checkable
class DumpedMessages(Protocol):
    """What ``append_slices`` may answer besides being a sequence: its messages dumped without
    being built, for an answer encoded straight from what the store keeps."""

    def dumped(self, start: int, end: int) -> list[dict[str, Any]]:
        """Messages ``start`` to ``end`` as ``model_dump(by_alias=True, exclude_none=True)``."""
        ...


class SessionStore(Protocol):
    """Sessions and their messages.

    Contract, for every implementation:
    - an unknown session id raises ``SessionNotFound``;
    - what a read returns is the caller's own copy: mutating it never changes the store;
    - ``append`` is O(1) in the length of the history and all-or-nothing for its batch;
    - a page of ``messages`` costs O(limit), not O(history);
    - a run leases its session (see :mod:`tether.sessions.lease`): while the lease is live (and
      its holder not known to be gone), the writes that would break the run are refused with
      ``SessionBusy``, in the same transaction as the write, and ``Session.running`` is true;
    - a store fault (a full disk, a database that is down...) raises ``StoreError`` with its
      reason (see :mod:`tether.sessions.faults`), never a driver's exception.
    """

    kind: str
    durable: bool

    async def create(
        self, params: CreateSessionParams, workspace: str, *, spawned_by: SpawnedBy | None = None
    ) -> Session:
        """A new session; ``spawned_by``: a sub-agent's, started by that ``task`` call."""
        ...

    async def get(self, session_id: str) -> Session: ...

    async def list_sessions(
        self, *, workspace: str | None, cursor: str | None, limit: int
    ) -> ListSessionsResult: ...

    async def messages(
        self, session_id: str, *, cursor: str | None, limit: int, order: Order
    ) -> MessagesResult: ...

    async def append(
        self,
        session_id: str,
        messages: Sequence[MessageInput],
        *,
        run_id: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Message]:
        """Append in order; ``ids`` (one per message) lets the kernel name a message it streams.

        With ``run_id``, the run's own write: ``RunLeaseLost`` unless that run holds a live
        lease on the session. Without, ``SessionBusy`` while any run holds one.
        """
        ...

    async def append_slices(
        self, session_id: str, slices: AsyncIterator[Sequence[MessageInput]]
    ) -> Sequence[Message]:
        """A client's append (no run, new ids) whose messages come a slice at a time, as the
        caller validates them: all or nothing like ``append``, and an exception raised by
        ``slices`` stores none of them. The answer may build each message only when it is read,
        so a big batch need not be held as ``Message`` objects all at once.
        """
        ...

    async def history(self, session_id: str) -> list[Message]:
        """Every message, oldest first: what a run sends the model (read once per run)."""
        ...

    async def configure(self, session_id: str, changes: SessionFields) -> Session: ...

    async def add_usage(self, session_id: str, usage: Usage) -> None:
        """Add a run's token counts to the session's totals (``Session.usage``)."""
        ...

    async def clear(self, session_id: str) -> Session:
        """Empty the history (``SessionBusy`` while a run holds the lease)."""
        ...

    async def truncate(self, session_id: str, message_id: str, *, run_id: str) -> int:
        """Remove ``message_id`` and every later message from the session's history; the
        number removed. Forks keep theirs (a shared prefix never changes). A write of the holder
        of the lease ``run_id`` (``RunLeaseLost`` otherwise, like a run's append); InvalidParams
        on ``messageId`` when the message is not in the session."""
        ...

    async def delete(self, session_id: str) -> None:
        """Remove the session; forks of it keep their history (shared messages stay).

        ``SessionBusy`` while a run holds the lease."""
        ...

    async def fork(self, params: ForkSessionParams) -> Session:
        """A new session sharing the history up to ``at_message_id`` (no message is copied).

        InvalidParams on ``atMessageId`` when it is not in the session, or when it is inside a
        tool exchange (see :func:`tether.sessions.forks.check_fork_point`). ``SessionBusy`` when
        the fork point is a message of the run that holds the lease (the turn is not finished);
        a point before the run's first message is fine: that prefix never changes.
        """
        ...

    async def expire(self, idle_before: datetime, keep: Callable[[str], bool]) -> list[str]:
        """Delete the sessions not updated since ``idle_before`` (except those ``keep`` keeps, and
        those a run holds a live lease on); return their ids."""
        ...

    async def claim_run(self, session_id: str, run_id: str, lease: timedelta) -> None:
        """Lease the session to the run ``run_id`` of this process for ``lease`` from now.

        Atomic: ``SessionBusy`` (naming the run that holds it) while a live lease is held,
        whoever holds it; an expired lease is taken over, and so is a live one whose holder was a
        process of this host that no longer runs. Nothing else is written.
        """
        ...

    async def renew_run(self, session_id: str, run_id: str, lease: timedelta) -> bool:
        """Extend the run's lease to ``lease`` from now; False when the run no longer holds a live
        lease (it expired, another run took it, or the session is gone): the run must stop."""
        ...

    async def release_run(self, session_id: str, run_id: str) -> None:
        """End the run's lease (nothing when it does not hold it, or the session is gone)."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (connections, threads)."""
        ...
