"""The session service behind the ``session/*`` methods: workspace defaults over a store."""

from __future__ import annotations

from tether.protocol import (
    AppendParams,
    AppendResult,
    ClearSessionParams,
    ConfigureSessionParams,
    CreateSessionParams,
    DeleteResult,
    DeleteSessionParams,
    GetSessionParams,
    ListSessionsParams,
    ListSessionsResult,
    MessagesParams,
    MessagesResult,
    Session,
    WorkspaceError,
)
from tether.sessions.store import SessionStore
from tether.sessions.workspaces import canonical_workspace, existing_workspace


class SessionService:
    """One method per ``session/*`` request; each takes validated params and returns the result."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.default_workspace: str | None = None

    def set_default_workspace(self, workspace: str | None) -> None:
        """The workspace used when a request names none (the first folder of ``initialize``)."""
        self.default_workspace = canonical_workspace(workspace) if workspace else None

    async def create(self, params: CreateSessionParams) -> Session:
        workspace = params.workspace or self.default_workspace
        if workspace is None:
            raise WorkspaceError(
                "no workspace: pass `workspace`, or initialize with a workspace folder"
            )
        return await self.store.create(params, existing_workspace(workspace))

    async def get(self, params: GetSessionParams) -> Session:
        return await self.store.get(params.session_id)

    async def list_sessions(self, params: ListSessionsParams) -> ListSessionsResult:
        workspace = canonical_workspace(params.workspace) if params.workspace else None
        return await self.store.list_sessions(
            workspace=workspace, cursor=params.cursor, limit=params.limit
        )

    async def messages(self, params: MessagesParams) -> MessagesResult:
        return await self.store.messages(
            params.session_id, cursor=params.cursor, limit=params.limit, order=params.order
        )

    async def append(self, params: AppendParams) -> AppendResult:
        return AppendResult(messages=await self.store.append(params.session_id, params.messages))

    async def configure(self, params: ConfigureSessionParams) -> Session:
        return await self.store.configure(params.session_id, params)

    async def clear(self, params: ClearSessionParams) -> Session:
        return await self.store.clear(params.session_id)

    async def delete(self, params: DeleteSessionParams) -> DeleteResult:
        await self.store.delete(params.session_id)
        return DeleteResult()
