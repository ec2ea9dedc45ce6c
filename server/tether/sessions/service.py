"""The session service behind the ``session/*`` methods: workspace defaults over a store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
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
    Message,
    MessageInput,
    MessagesParams,
    MessagesResult,
    Session,
    WorkspaceError,
)
from tether.protocol.sessions import SessionFields
from tether.sessions.store import SessionStore, session_json, with_instructions
from tether.sessions.workspaces import canonical_workspace, existing_workspace


def _never(session_id: str) -> bool:
    return False


async def _nothing_deleted(session_id: str) -> None:
    return None


async def _all_fields_fine(workspace: str, fields: SessionFields) -> None:
    return None


@dataclass(frozen=True, slots=True)
class SessionHooks:
    """What the owner of the service does when a session is created, forked, or deleted (or
    expired): release or copy what belongs to it, such as its MCP servers; and where
    ``session/get`` finds a workspace's instruction files. Given once, when the service is made."""

    created: Callable[[Session, CreateSessionParams], None] = lambda session, params: None
    forked: Callable[[Session], None] = lambda session: None
    deleted: Callable[[str], Awaitable[None]] = _nothing_deleted
    # Refuses fields the store cannot judge (an agent profile that does not exist), before a
    # session of that workspace is created or configured with them.
    check: Callable[[str, SessionFields], Awaitable[None]] = _all_fields_fine
    # session/get's ``instructions``: the instruction files of a workspace (none: left out)
    instructions: Callable[[str], Awaitable[list[str] | None]] | None = None


class SessionService:
    """One method per ``session/*`` request; each takes validated params and returns the result.

    Whether a run holds a session (``Session.running``, and the ``SessionBusy`` refusals of
    append, clear, delete and fork) is the store's to say: runs lease their sessions there, so
    every process sharing the store agrees (see :mod:`tether.sessions.lease`).
    """

    def __init__(self, store: SessionStore, hooks: SessionHooks | None = None) -> None:
        self.store = store
        self.default_workspace: str | None = None
        self._hooks = hooks or SessionHooks()

    def use_store(self, store: SessionStore) -> None:
        """Serve from ``store`` from now on (the configured one, known once the configuration
        is read at ``initialize``)."""
        self.store = store

    def set_default_workspace(self, workspace: str | None) -> None:
        """The workspace used when a request names none (the first folder of ``initialize``)."""
        self.default_workspace = canonical_workspace(workspace) if workspace else None

    async def create(self, params: CreateSessionParams) -> Session:
        workspace = params.workspace or self.default_workspace
        if workspace is None:
            raise WorkspaceError(
                "no workspace: pass `workspace`, or initialize with a workspace folder"
            )
        workspace = existing_workspace(workspace)
        await self._hooks.check(workspace, params)
        session = await self.store.create(params, workspace)
        self._hooks.created(session, params)
        return session

    async def get(self, params: GetSessionParams) -> Session:
        return await self.store.get(params.session_id)

    async def get_json(self, params: GetSessionParams) -> bytes:
        """``session/get``'s result encoded as the wire encodes it, by the store if it can."""
        return await self.session_json(params.session_id)

    async def session_json(self, session_id: str) -> bytes:
        """:meth:`get_json` of a session id (validated)."""
        store, instructions = self.store, self._hooks.instructions
        get_json: Callable[[str], bytes] | None = getattr(store, "get_json", None)
        if get_json is not None:  # a JsonReads (isinstance of a runtime protocol costs ~7 µs)
            encoded = get_json(session_id)
            if instructions is None:
                return encoded
            workspace: str = store.workspace_of(session_id)  # type: ignore[attr-defined]
        else:
            session = await store.get(session_id)
            encoded, workspace = session_json(session), session.workspace
            if instructions is None:
                return encoded
        paths = await instructions(workspace)
        return with_instructions(encoded, paths) if paths else encoded

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

    def append_json(self, session_id: str, messages: Sequence[MessageInput]) -> bytes | None:
        """A small ``session/append`` (validated) stored, and its answer encoded, by the store
        at once if it can (a :class:`~tether.sessions.store.JsonAppends`); None when it cannot,
        and the caller goes through :meth:`append_slices`."""
        append_json: Callable[[str, Sequence[MessageInput]], bytes] | None = getattr(
            self.store, "append_json", None
        )  # isinstance of a runtime protocol costs ~7 µs
        return None if append_json is None else append_json(session_id, messages)

    async def append_slices(
        self, session_id: str, slices: AsyncIterator[Sequence[MessageInput]]
    ) -> Sequence[Message]:
        """A big ``session/append``, its messages validated a slice at a time (see the store)."""
        return await self.store.append_slices(session_id, slices)

    async def configure(self, params: ConfigureSessionParams) -> Session:
        if params.agent is not None:  # the only field checked against the workspace
            session = await self.store.get(params.session_id)
            await self._hooks.check(session.workspace, params)
        return await self.store.configure(params.session_id, params)

    async def clear(self, params: ClearSessionParams) -> Session:
        return await self.store.clear(params.session_id)

    async def delete(self, params: DeleteSessionParams) -> DeleteResult:
        await self.store.delete(params.session_id)
        await self._deleted([params.session_id])
        return DeleteResult()

    async def fork(self, params: ForkSessionParams) -> Session:
        session = await self.store.fork(params)
        self._hooks.forked(session)
        return session

    async def sweep(self, ttl: timedelta, now: datetime) -> list[str]:
        """Delete the sessions idle for longer than ``ttl`` at ``now``, never one that a run
        holds (the store skips leased sessions)."""
        expired = await self.store.expire(now - ttl, keep=_never)
        await self._deleted(expired)
        return expired

    async def _deleted(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            await self._hooks.deleted(session_id)
