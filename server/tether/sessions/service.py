"""The session service behind the ``session/*`` methods: workspace defaults over a store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from tether.protocol import (
    AppendParams,
    AppendResult,
    ClearSessionParams,
    ConfigureSessionParams,
    CreateSessionParams,
    DeleteResult,
    DeleteSessionParams,
    ForkSessionParams,
    GetSessionParams,
    ListSessionsParams,
    ListSessionsResult,
    MessagesParams,
    MessagesResult,
    Session,
    SessionBusy,
    WorkspaceError,
)
from tether.sessions.store import SessionStore
from tether.sessions.workspaces import canonical_workspace, existing_workspace


def _never(session_id: str) -> bool:
    return False


class SessionService:
    """One method per ``session/*`` request; each takes validated params and returns the result."""

    def __init__(self, store: SessionStore, running: Callable[[str], bool] = _never) -> None:
        self.store = store
        self.default_workspace: str | None = None
        self._running = running  # whether a kernel run is going on in a session
        # Called after a session is created, and after one is deleted (to release what belongs
        # to it, such as its MCP servers).
        self.on_create: list[Callable[[Session, CreateSessionParams], None]] = []
        self.on_delete: list[Callable[[str], Awaitable[None]]] = []  # deleted or expired
        self.on_fork: list[Callable[[Session], None]] = []

    def set_default_workspace(self, workspace: str | None) -> None:
        """The workspace used when a request names none (the first folder of ``initialize``)."""
        self.default_workspace = canonical_workspace(workspace) if workspace else None

    async def create(self, params: CreateSessionParams) -> Session:
        workspace = params.workspace or self.default_workspace
        if workspace is None:
            raise WorkspaceError(
                "no workspace: pass `workspace`, or initialize with a workspace folder"
            )
        session = await self.store.create(params, existing_workspace(workspace))
        for created in self.on_create:
            created(session, params)
        return session

    async def get(self, params: GetSessionParams) -> Session:
        return self._live(await self.store.get(params.session_id))

    async def list_sessions(self, params: ListSessionsParams) -> ListSessionsResult:
        workspace = canonical_workspace(params.workspace) if params.workspace else None
        page = await self.store.list_sessions(
            workspace=workspace, cursor=params.cursor, limit=params.limit
        )
        for session in page.sessions:
            self._live(session)
        return page

    async def messages(self, params: MessagesParams) -> MessagesResult:
        return await self.store.messages(
            params.session_id, cursor=params.cursor, limit=params.limit, order=params.order
        )

    async def append(self, params: AppendParams) -> AppendResult:
        self._refuse_if_running(params.session_id)
        return AppendResult(messages=await self.store.append(params.session_id, params.messages))

    async def configure(self, params: ConfigureSessionParams) -> Session:
        return self._live(await self.store.configure(params.session_id, params))

    async def clear(self, params: ClearSessionParams) -> Session:
        self._refuse_if_running(params.session_id)
        return await self.store.clear(params.session_id)

    async def delete(self, params: DeleteSessionParams) -> DeleteResult:
        self._refuse_if_running(params.session_id)
        await self.store.delete(params.session_id)
        await self._deleted([params.session_id])
        return DeleteResult()

    async def fork(self, params: ForkSessionParams) -> Session:
        session = await self.store.fork(params)
        for forked in self.on_fork:
            forked(session)
        return self._live(session)

    async def sweep(self, ttl: timedelta, now: datetime) -> list[str]:
        """Delete the sessions idle for longer than ``ttl`` at ``now``, never one that runs."""
        expired = await self.store.expire(now - ttl, keep=self._running)
        await self._deleted(expired)
        return expired

    async def _deleted(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            for deleted in self.on_delete:
                await deleted(session_id)

    def _live(self, session: Session) -> Session:
        session.running = self._running(session.session_id)
        return session

    def _refuse_if_running(self, session_id: str) -> None:
        """A run owns its session's history until it ends: no appends, clears or deletes."""
        if self._running(session_id):
            raise SessionBusy(session_id)
