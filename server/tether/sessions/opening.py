"""A configured store that is opened after the handshake: calls made before it is open wait.

Opening a SQL store imports SQLAlchemy and may create or migrate a database; doing that before
answering ``initialize`` would slow every start. :class:`OpeningStore` stands in for the store
from the start: :meth:`start` opens it in the background, and every call waits for it. A store
that cannot be opened makes every call raise a :class:`tether.protocol.StoreError` when a store
fault was the cause (a database that is down, a damaged file: see
:mod:`tether.sessions.faults`), else a :class:`tether.protocol.ConfigError`; when that was not the
store's own verdict (a newer schema, a missing driver), the next call tries again, so a database
that was down when tether started costs only the calls made while it was.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from tether.protocol import ConfigError, ListSessionsResult, Message, MessageInput, MessagesResult
from tether.protocol import Session as SessionModel
from tether.protocol.sessions import (
    CreateSessionParams,
    ForkSessionParams,
    SessionFields,
    SpawnedBy,
)
from tether.protocol.usage import Usage
from tether.secrets import Secrets, url_secrets
from tether.sessions.store import Order, SessionStore

if TYPE_CHECKING:
    from tether.sessions.faults import FaultLog


def url_kind(url: str) -> str:
    """The store kind a URL opens, without importing SQLAlchemy: ``sqlite``, ``postgresql``…"""
    kind = url.split(":", 1)[0].split("+", 1)[0]
    return "postgresql" if kind == "postgres" else kind


class OpeningStore:
    """Stands in for the SQL store at ``url`` until it is open."""

    durable = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.kind = url_kind(url)
        self._task: asyncio.Task[SessionStore] | None = None
        self._may_retry = False  # the last attempt failed, and not for good
        self._faults: FaultLog | None = None  # of opening: made with the first attempt

    def start(self) -> None:
        """Begin opening the store (at most once); needs a running event loop."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._open())

    async def store(self) -> SessionStore:
        if self._may_retry and self._task is not None and self._task.done():
            self._task, self._may_retry = None, False
        self.start()
        assert self._task is not None
        return await asyncio.shield(self._task)

    async def _open(self) -> SessionStore:
        try:
            sql = await asyncio.to_thread(importlib.import_module, "tether.sessions.sql")
            if self._faults is None:  # imported with the SQL store (SQLAlchemy's errors)
                self._faults = importlib.import_module("tether.sessions.faults").FaultLog(self.kind)
            opened: SessionStore = await sql.SqlStore.open(self.url)
        except ConfigError:
            raise
        except Exception as exc:
            self._may_retry = True
            fault = None if self._faults is None else self._faults.error_for(exc, write=True)
            if fault is not None:
                raise fault from None
            reason = Secrets.of(url_secrets(self.url)).redact(f"{type(exc).__name__}: {exc}")
            raise ConfigError(
                f"cannot open the session store ({self.kind}): {reason}",
                {"key": "sessions.store", "source": "sessions"},
            ) from None
        self._faults.succeeded(write=True)
        return opened

    async def aclose(self) -> None:
        if self._task is None:
            return
        if not self._task.done():
            self._task.cancel()
        try:
            opened = await self._task
        except (asyncio.CancelledError, Exception):
            return
        await opened.aclose()

    # -- the SessionStore methods, once the store is open ----------------------------------

    async def create(
        self, params: CreateSessionParams, workspace: str, *, spawned_by: SpawnedBy | None = None
    ) -> SessionModel:
        return await (await self.store()).create(params, workspace, spawned_by=spawned_by)

    async def get(self, session_id: str) -> SessionModel:
        return await (await self.store()).get(session_id)

    async def list_sessions(
        self, *, workspace: str | None, cursor: str | None, limit: int
    ) -> ListSessionsResult:
        store = await self.store()
        return await store.list_sessions(workspace=workspace, cursor=cursor, limit=limit)

    async def messages(
        self, session_id: str, *, cursor: str | None, limit: int, order: Order
    ) -> MessagesResult:
        store = await self.store()
        return await store.messages(session_id, cursor=cursor, limit=limit, order=order)

    async def append(
        self,
        session_id: str,
        messages: Sequence[MessageInput],
        *,
        run_id: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Message]:
        store = await self.store()
        return await store.append(session_id, messages, run_id=run_id, ids=ids)

    async def append_slices(
        self, session_id: str, slices: AsyncIterator[Sequence[MessageInput]]
    ) -> Sequence[Message]:
        return await (await self.store()).append_slices(session_id, slices)

    async def history(self, session_id: str) -> list[Message]:
        return await (await self.store()).history(session_id)

    async def configure(self, session_id: str, changes: SessionFields) -> SessionModel:
        return await (await self.store()).configure(session_id, changes)

    async def add_usage(self, session_id: str, usage: Usage) -> None:
        await (await self.store()).add_usage(session_id, usage)

    async def clear(self, session_id: str) -> SessionModel:
        return await (await self.store()).clear(session_id)

    async def truncate(self, session_id: str, message_id: str, *, run_id: str) -> int:
        return await (await self.store()).truncate(session_id, message_id, run_id=run_id)

    async def delete(self, session_id: str) -> None:
        await (await self.store()).delete(session_id)

    async def fork(self, params: ForkSessionParams) -> SessionModel:
        return await (await self.store()).fork(params)

    async def expire(self, idle_before: datetime, keep: Callable[[str], bool]) -> list[str]:
        return await (await self.store()).expire(idle_before, keep)

    async def claim_run(self, session_id: str, run_id: str, lease: timedelta) -> None:
        await (await self.store()).claim_run(session_id, run_id, lease)

    async def renew_run(self, session_id: str, run_id: str, lease: timedelta) -> bool:
        return await (await self.store()).renew_run(session_id, run_id, lease)

    async def release_run(self, session_id: str, run_id: str) -> None:
        await (await self.store()).release_run(session_id, run_id)
