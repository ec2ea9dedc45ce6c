"""The ``SessionStore`` protocol every store implements (memory, SQL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, Protocol

from tether.protocol import (
    ListSessionsResult,
    Message,
    MessageInput,
    MessagesResult,
    Session,
)
from tether.protocol.kernel import Usage
from tether.protocol.sessions import CreateSessionParams, ForkSessionParams, SessionFields

Order = Literal["asc", "desc"]


class SessionStore(Protocol):
    """Sessions and their messages.

    Contract, for every implementation:
    - an unknown session id raises ``SessionNotFound``;
    - what a read returns is the caller's own copy: mutating it never changes the store;
    - ``append`` is O(1) in the length of the history and all-or-nothing for its batch;
    - a page of ``messages`` costs O(limit), not O(history).
    """

    kind: str
    durable: bool

    async def create(self, params: CreateSessionParams, workspace: str) -> Session: ...

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
        """Append in order; ``ids`` (one per message) lets the kernel name a message it streams."""
        ...

    async def history(self, session_id: str) -> list[Message]:
        """Every message, oldest first: what a run sends the model (read once per run)."""
        ...

    async def configure(self, session_id: str, changes: SessionFields) -> Session: ...

    async def add_usage(self, session_id: str, usage: Usage) -> None:
        """Add a run's token counts to the session's totals (``Session.usage``)."""
        ...

    async def clear(self, session_id: str) -> Session: ...

    async def delete(self, session_id: str) -> None:
        """Remove the session; forks of it keep their history (shared messages stay)."""
        ...

    async def fork(self, params: ForkSessionParams) -> Session:
        """A new session sharing the history up to ``at_message_id`` (no message is copied).

        InvalidParams on ``atMessageId`` when it is not in the session, or when it is inside a
        tool exchange (see :func:`tether.sessions.forks.check_fork_point`).
        """
        ...

    async def expire(self, idle_before: datetime, keep: Callable[[str], bool]) -> list[str]:
        """Delete the sessions not updated since ``idle_before`` (except those ``keep`` keeps);
        return their ids."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (connections, threads)."""
        ...
