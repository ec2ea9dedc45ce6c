"""The session plan handle the kernel gives tools (``ToolContext.plan``), over the store.

``update_plan`` replaces the plan through it: the plan is stored with the session (so
``session/get`` answers it, every process sharing the store sees it and a fork keeps it), then
the run tells the client with a ``plan`` progress event.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.protocol.kernel import ProgressEvent
from tether.protocol.plans import Plan, PlanEntry
from tether.protocol.sessions import SessionFields
from tether.sessions.store import SessionStore


class StorePlan:
    """``Session.plan`` of one session during one run. ``emit`` sends an event of the run; it
    is bound once the run exists (:meth:`bind`): the handle is made with the run's setup."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self._store = store
        self._session_id = session_id
        self._emit: Callable[[ProgressEvent], None] | None = None

    def bind(self, emit: Callable[[ProgressEvent], None]) -> None:
        self._emit = emit

    async def update(self, entries: list[PlanEntry]) -> None:
        await self._store.configure(self._session_id, SessionFields(plan=entries))
        if self._emit is not None:
            self._emit(Plan(entries=entries))
