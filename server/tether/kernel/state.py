"""The session state handle the kernel gives tools (``ToolContext.state``), over the store."""

from __future__ import annotations

from typing import Any

from tether.protocol.sessions import SessionFields
from tether.sessions.store import SessionStore


class StoreState:
    """``Session.state`` of one session, read and replaced whole through the store."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id

    async def get(self) -> dict[str, Any]:
        return (await self._store.get(self._session_id)).state

    async def set(self, state: dict[str, Any]) -> None:
        await self._store.configure(self._session_id, SessionFields(state=state))
