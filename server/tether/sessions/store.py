"""The ``SessionStore`` protocol every store implements (memory now, SQL later)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from tether.protocol import (
    ListSessionsResult,
    Message,
    MessageInput,
    MessagesResult,
    Session,
)
from tether.protocol.kernel import Usage
from tether.protocol.sessions import CreateSessionParams, SessionFields

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

    async def delete(self, session_id: str) -> None: ...
