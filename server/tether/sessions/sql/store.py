"""The SQL session store itself: :class:`SqlStore`."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from tether.protocol import (
    InvalidParams,
    ListSessionsResult,
    Message,
    MessageInput,
    MessagesResult,
    RunLeaseLost,
    Session,
    SessionBusy,
    SessionNotFound,
)
from tether.protocol.sessions import (
    CreateSessionParams,
    ForkSessionParams,
    SessionFields,
    SpawnedBy,
    session_exists,
)
from tether.protocol.usage import Usage
from tether.sessions.cursors import decode_cursor, encode_cursor
from tether.sessions.faults import FaultLog
from tether.sessions.forks import ALLOW_LISTS, check_fork_point, cut_chain, forked_fields
from tether.sessions.ids import utcnow, uuid7
from tether.sessions.lease import Lease, process_holder
from tether.sessions.packed import new_message
from tether.sessions.sql.engine import _isolate, _open_engine, _roll_back, _worth_retrying
from tether.sessions.sql.fast_path import _Compiled, _Exec, _SqliteExec
from tether.sessions.sql.history import (
    _chain,
    _check_tool_results,
    _collect,
    _counters,
    _delete,
    _index_of,
    _newest_first,
    _read_range,
)
from tether.sessions.sql.rows import (
    _Counters,
    _find_session_row,
    _json_safe,
    _lease,
    _message_row,
    _permissions_json,
    _plan_json,
    _session,
    _session_row,
)
from tether.sessions.sql.schema import (
    _from_micros,
    _Micros,
    _to_micros,
    segments_table,
    sessions_table,
)
from tether.sessions.sql.statements import (
    _FREE,
    _FREE_GONE,
    _HELD,
    _LEASE,
    _LEASE_LOCKED,
    _RESERVE_FREE,
    _RESERVE_HELD,
    _S,
    _later,
)
from tether.sessions.sqlite_file import SqliteFile
from tether.sessions.store import Order

T = TypeVar("T")
logger = logging.getLogger(__name__)


class SqlStore:
    """A :class:`tether.sessions.store.SessionStore` on SQLAlchemy. Make it with :meth:`open`."""

    durable = True

    def __init__(
        self,
        engine: Engine,
        executor: ThreadPoolExecutor,
        *,
        fast: bool = True,
        clock: Callable[[], datetime] = utcnow,
        holder: str | None = None,
    ) -> None:
        """``fast``: on SQLite, run the hot paths on sqlite3 directly (see ``_SqliteExec``).
        ``clock`` tells leases' time; ``holder`` names this process in them."""
        self._clock = clock
        self.holder = holder or process_holder()
        self._engine = engine
        self._executor = executor
        self._fast = fast and engine.dialect.name == "sqlite"
        self._psycopg = engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
        self._compiled: dict[int, _Compiled] = {}
        self._connection: Connection | None = None  # used on the worker thread only
        self._inline: Connection | None = None  # used on the event loop's thread only
        self._queued = 0  # calls submitted to the worker and not yet seen to end
        self.kind = engine.dialect.name
        self.url = engine.url
        database = engine.url.database
        self._file = (
            SqliteFile(Path(database))
            if self.kind == "sqlite" and database and database != ":memory:"
            else None
        )
        self._faults = FaultLog(self.kind, self._file.writable if self._file else None)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        fast: bool = True,
        clock: Callable[[], datetime] = utcnow,
        holder: str | None = None,
    ) -> SqlStore:
        """Open (creating and migrating as needed) the database at ``url``."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sessions")
        try:
            engine = await asyncio.get_running_loop().run_in_executor(executor, _open_engine, url)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(engine, executor, fast=fast, clock=clock, holder=holder)

    @classmethod
    def open_sync(cls, url: str) -> SqlStore:
        """:meth:`open` for code that has no event loop running yet (tests, tools)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sessions")
        return cls(executor.submit(_open_engine, url).result(), executor)

    async def aclose(self) -> None:
        await self._run(self._close, write=False)
        self._executor.shutdown(wait=True)

    # -- running on the worker ---------------------------------------------------------------

    async def _run(self, call: Callable[[], T], *, write: bool) -> T:
        self._queued += 1
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except Exception as exc:
            self._raise_if_fault(exc, write)
            raise
        finally:
            self._queued -= 1
        self._faults.succeeded(write=write)
        return result

    def _raise_if_fault(self, exc: Exception, write: bool) -> None:
        """A ``StoreError`` in place of ``exc`` when it is a store fault (see
        :mod:`tether.sessions.faults`); else nothing, and the caller raises ``exc``."""
        error = self._faults.error_for(exc, write=write)
        if error is not None:
            raise error from None

    async def _read(self, call: Callable[[Connection], T]) -> T:
        return await self._run(partial(self._in_transaction, call, write=False), write=False)

    async def _write(self, call: Callable[[Connection], T]) -> T:
        return await self._run(partial(self._in_transaction, call, write=True), write=True)

    def _in_transaction(self, call: Callable[[Connection], T], *, write: bool) -> T:
        """``call`` in one transaction, run again when it failed before its commit because the
        connection was lost (a database restarted: once, on a new connection) or the database
        chose it as the victim of a deadlock or a serialization failure. A failed commit is
        never run again: whether it took effect is unknown. Whatever failed, the connection is
        left with no transaction open (:meth:`_leave_clean`)."""
        attempt = 0
        while True:
            if self._file is not None:
                self._file.check(write=write)
            connection = self._live()
            connection.execution_options(tether_write=write)
            if self._psycopg:
                _isolate(connection, write)
            transaction = connection.begin()
            committing = False
            try:
                result = call(connection)
                committing = True
                transaction.commit()
            except BaseException as exc:
                self._leave_clean(connection, partial(_roll_back, connection, transaction))
                attempt += 1
                retry = isinstance(exc, DBAPIError) and _worth_retrying(exc, attempt)
                if committing or not retry:
                    raise
                continue
            return result

    def _leave_clean(self, connection: Connection, roll_back: Callable[[], None]) -> None:
        """After an error in a transaction on ``connection`` (in a statement or in its commit):
        ``roll_back``, so that the connection holds no transaction; when even that fails, the
        connection is invalidated (the next transaction opens a new one). Never raises: the
        caller raises the error that led here.

        A connection whose ``-shm`` mapping may not be written is kept as it is: closing it
        could be its last write to the mapping (SIGBUS); every transaction is refused meanwhile
        (:meth:`SqliteFile.check`)."""
        try:
            roll_back()
        except Exception:
            if connection.invalidated or (self._file is not None and self._file.shm_at_risk()):
                return
            logger.debug("a failed transaction could not be rolled back", exc_info=True)
            connection.invalidate()

    def _live(self) -> Connection:
        connection = self._connection
        if connection is None or connection.closed or connection.invalidated:
            if connection is not None:
                connection.close()  # a lost one: give it back to the pool, which drops it
            connection = self._connection = self._engine.connect()
        return connection

    async def _hot(self, call: Callable[[_Exec], T], *, write: bool) -> T:
        """A transaction of the hot paths: on SQLite, begun and committed on sqlite3 itself."""
        if not self._fast:
            return await self._run(
                partial(self._in_transaction, lambda c: call(_Exec(c)), write=write), write=write
            )
        return await self._run(partial(self._sqlite_transaction, call, write=write), write=write)

    def _sqlite_transaction(self, call: Callable[[_Exec], T], *, write: bool) -> T:
        if self._file is not None:
            self._file.check(write=write)
        db = _SqliteExec(self._live(), self._compiled)
        db.raw.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        return self._commit_after(db, call)

    def _commit_after(self, db: _SqliteExec, call: Callable[[_Exec], T]) -> T:
        """``call`` in the transaction ``db`` has begun on sqlite3: committed, or rolled back
        when it or the commit fails (SQLite may leave a transaction whose commit failed open,
        on a full disk for one)."""
        try:
            result = call(db)
            db.raw.commit()
        except BaseException:
            self._leave_clean(db.connection, db.raw.rollback)
            raise
        return result

    async def _append(self, call: Callable[[_Exec], None]) -> None:
        """An append: on the loop's thread when SQLite can take the write lock at once, else on
        the worker (see the module's docstring).

        Never on the loop's thread while a call waits on the worker: the worker runs calls in
        the order they came, and an append that found the lock free could otherwise commit
        before an append (or a clear) sent earlier that is waiting there for the lock.
        """
        if self._fast and not self._queued:
            try:
                done = self._append_inline(call)
            except Exception as exc:
                self._raise_if_fault(exc, write=True)
                raise
            if done:
                self._faults.succeeded(write=True)
                return
        await self._hot(call, write=True)

    def _append_inline(self, call: Callable[[_Exec], None]) -> bool:
        """Run ``call`` in a write transaction now, or return False when the lock is taken."""
        if self._file is not None:
            self._file.check(write=True)
        db = _SqliteExec(self._inline_connection(), self._compiled)
        try:
            db.raw.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return False
            raise
        self._commit_after(db, call)
        return True

    def _inline_connection(self) -> Connection:
        connection = self._inline
        if connection is None or connection.closed or connection.invalidated:
            connection = self._inline = self._engine.connect()
            raw: Any = connection.connection.driver_connection
            raw.execute("PRAGMA busy_timeout=0")
        return connection

    def _close(self) -> None:
        if self._file is not None and self._file.shm_at_risk():
            # closing SQLite's last connection writes to the -shm mapping (SIGBUS): the
            # connections end with the process instead
            logger.warning("the session store's -shm file is read-only: its connections stay open")
            return
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._engine.dispose()

    # -- sessions ----------------------------------------------------------------------------

    async def create(
        self, params: CreateSessionParams, workspace: str, *, spawned_by: SpawnedBy | None = None
    ) -> Session:
        now = utcnow()
        chosen = params.session_id
        session_id = chosen or uuid7()
        row = {
            "id": session_id,
            "workspace": workspace,
            "title": params.title,
            "agent_id": params.agent_id,
            "model": params.model,
            "system_prompt": params.system_prompt,
            "settings": params.settings or {},
            "metadata": params.metadata or {},
            "tools": params.tools,
            "allowed_models": params.allowed_models,
            "state": params.state or {},
            "mode": params.mode,
            "permissions": _permissions_json(params.permissions),
            "plan": _plan_json(params.plan),
            "agent": params.agent,
            "spawned_by": None if spawned_by is None else spawned_by.to_wire(),
            "parent_session_id": None,
            "forked_from_message_id": None,
            # A chosen id might be the key of another session's messages (one it had before a
            # clear): the messages of a session with a chosen id go under a key of their own.
            "owner": session_id if chosen is None else uuid7(),
            "base_count": 0,
            "own_count": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "created_at": now,
            "updated_at": now,
        }

        def create(connection: Connection) -> None:
            if chosen is not None:
                taken = select(sessions_table.c.id).where(sessions_table.c.id == chosen)
                if connection.execute(taken).first() is not None:
                    raise session_exists(chosen)
            try:
                connection.execute(insert(sessions_table).values(_json_safe(row)))
            except IntegrityError:
                if chosen is None:
                    raise
                raise session_exists(chosen) from None

        await self._write(create)
        return await self.get(session_id)

    async def get(self, session_id: str) -> Session:
        return await self._read(lambda c: _session(_session_row(c, session_id), self._clock()))

    async def list_sessions(
        self, *, workspace: str | None, cursor: str | None, limit: int
    ) -> ListSessionsResult:
        query = select(sessions_table)
        if workspace is not None:
            query = query.where(sessions_table.c.workspace == workspace)
        if cursor is not None:
            updated, session_id = decode_cursor("sessions", cursor, 2)
            try:
                updated_at = datetime.fromisoformat(updated)
            except ValueError:
                raise InvalidParams.field("cursor", "not a cursor this method returned") from None
            col = sessions_table.c
            query = query.where(
                or_(
                    col.updated_at < updated_at,
                    and_(col.updated_at == updated_at, col.id < session_id),
                )
            )
        query = query.order_by(
            sessions_table.c.updated_at.desc(), sessions_table.c.id.desc()
        ).limit(limit + 1)
        rows = await self._read(lambda c: list(c.execute(query)))
        now = self._clock()
        page = [_session(row, now) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = page[-1]
            next_cursor = encode_cursor("sessions", last.updated_at.isoformat(), last.session_id)
        return ListSessionsResult(sessions=page, next_cursor=next_cursor)

    async def configure(self, session_id: str, changes: SessionFields) -> Session:
        values: dict[str, Any] = {}
        for name in changes.model_fields_set & SessionFields.model_fields.keys():
            value = getattr(changes, name)
            if name in ("settings", "metadata", "state") and value is None:
                value = {}
            if name == "permissions":
                value = _permissions_json(value)
            elif name == "plan":
                value = _plan_json(value)
            values[name] = value
        values["updated_at"] = _later(literal(utcnow(), _Micros))

        def configure(connection: Connection) -> Session:
            _session_row(connection, session_id)
            connection.execute(
                update(sessions_table)
                .where(sessions_table.c.id == session_id)
                .values(_json_safe(values))
            )
            return _session(_session_row(connection, session_id), self._clock())

        return await self._write(configure)

    async def add_usage(self, session_id: str, usage: Usage) -> None:
        def add(connection: Connection) -> None:
            col = sessions_table.c
            done = connection.execute(
                update(sessions_table)
                .where(col.id == session_id)
                .values(
                    input_tokens=col.input_tokens + usage.input_tokens,
                    output_tokens=col.output_tokens + usage.output_tokens,
                    **_added_cost(usage),
                )
            )
            if done.rowcount == 0:
                raise SessionNotFound(session_id)

        await self._write(add)

    async def clear(self, session_id: str) -> Session:
        def clear(connection: Connection) -> Session:
            self._lock_unleased(connection, session_id)
            row = _session_row(connection, session_id, "update")
            owners = {row.owner, *(owner for owner, _ in _chain(connection, session_id))}
            connection.execute(delete(segments_table).where(segments_table.c.session_id == row.id))
            connection.execute(
                update(sessions_table)
                .where(sessions_table.c.id == session_id)
                .values(
                    owner=uuid7(),
                    base_count=0,
                    own_count=0,
                    updated_at=_later(literal(utcnow(), _Micros)),
                )
            )
            _collect(connection, owners)
            return _session(_session_row(connection, session_id), self._clock())

        return await self._write(clear)

    async def truncate(self, session_id: str, message_id: str, *, run_id: str) -> int:
        def truncate(connection: Connection) -> int:
            lease = self._locked_lease(connection, session_id)
            if lease is None or lease.run_id != run_id:
                _session_row(connection, session_id)  # an unknown session is SessionNotFound
                raise RunLeaseLost(session_id, run_id)
            row = _session_row(connection, session_id, "update")
            chain = _chain(connection, session_id)
            keep = _index_of(_Exec(connection), row, chain, message_id)
            if keep is None:
                raise InvalidParams.field("messageId", "no such message in this session")
            # what is kept becomes an inherited prefix of the session itself, as a fork's would
            kept = cut_chain(chain, row.owner, row.own_count, keep)
            connection.execute(delete(segments_table).where(segments_table.c.session_id == row.id))
            if kept:
                connection.execute(
                    insert(segments_table),
                    [
                        {"session_id": row.id, "seq": seq, "owner": owner, "upto": upto}
                        for seq, (owner, upto) in enumerate(kept)
                    ],
                )
            connection.execute(
                update(sessions_table)
                .where(sessions_table.c.id == session_id)
                .values(
                    owner=uuid7(),
                    base_count=keep,
                    own_count=0,
                    updated_at=_later(literal(utcnow(), _Micros)),
                )
            )
            _collect(connection, {row.owner, *(owner for owner, _ in chain)})
            return int(row.base_count + row.own_count - keep)

        return await self._write(truncate)

    async def delete(self, session_id: str) -> None:
        def delete(connection: Connection) -> None:
            self._lock_unleased(connection, session_id)
            _delete(connection, session_id)

        await self._write(delete)

    async def expire(self, idle_before: datetime, keep: Callable[[str], bool]) -> list[str]:
        """Delete the sessions last updated before ``idle_before``, except those ``keep`` keeps."""

        def expired(connection: Connection) -> list[str]:
            query = select(sessions_table.c.id).where(sessions_table.c.updated_at < idle_before)
            return list(connection.execute(query).scalars())

        removed = []
        for session_id in await self._read(expired):
            if keep(session_id):
                continue

            def expire(connection: Connection, session_id: str = session_id) -> bool:
                if self._locked_lease(connection, session_id) is not None:
                    return False  # a run holds it: never swept
                row = _find_session_row(connection, session_id, "update")
                if row is None or row.updated_at >= idle_before:
                    return False  # touched since: not idle any more
                _delete(connection, session_id)
                return True

            if await self._write(expire):
                removed.append(session_id)
        return removed

    async def fork(self, params: ForkSessionParams) -> Session:
        def fork(connection: Connection) -> str:
            parent = _session_row(connection, params.session_id, "key share")
            chain = _chain(connection, parent.id)
            total = parent.base_count + parent.own_count
            if params.at_message_id is None:
                keep = total
            else:
                index = _index_of(_Exec(connection), parent, chain, params.at_message_id)
                if index is None:
                    raise InvalidParams.field("atMessageId", "no such message in this session")
                keep = index + 1
            segments = [*chain, (parent.owner, parent.own_count)]
            fork_point = None
            if keep:
                point = _read_range(_Exec(connection), segments, keep - 1, keep)[0]
                self._refuse_fork_in_run(parent, point)
                fork_point = point.id
            check_fork_point(_newest_first(_Exec(connection), segments, keep))
            given = forked_fields({name: getattr(parent, name) for name in ALLOW_LISTS}, params)
            inherited = cut_chain(chain, parent.owner, parent.own_count, keep)
            now = utcnow()
            session_id = uuid7()
            values = {
                name: getattr(parent, name)
                for name in (
                    "workspace",
                    "title",
                    "agent_id",
                    "model",
                    "system_prompt",
                    "settings",
                    "metadata",
                    "tools",
                    "allowed_models",
                    "state",
                    "mode",
                    "permissions",
                    "plan",
                    "agent",
                )
            }
            values.update(given)
            values.update(
                id=session_id,
                parent_session_id=parent.id,
                forked_from_message_id=fork_point,
                owner=session_id,
                base_count=keep,
                own_count=0,
                input_tokens=0,
                output_tokens=0,
                created_at=now,
                updated_at=max(now, parent.updated_at),  # not before the messages it inherits
            )
            connection.execute(insert(sessions_table).values(_json_safe(values)))
            if inherited:
                connection.execute(
                    insert(segments_table),
                    [
                        {"session_id": session_id, "seq": seq, "owner": owner, "upto": upto}
                        for seq, (owner, upto) in enumerate(inherited)
                    ],
                )
            return session_id

        return await self.get(await self._write(fork))

    # -- messages ----------------------------------------------------------------------------

    async def messages(
        self, session_id: str, *, cursor: str | None, limit: int, order: Order
    ) -> MessagesResult:
        after_id = decode_cursor("messages", cursor, 1)[0] if cursor is not None else None

        def page(db: _Exec) -> MessagesResult:
            row = _counters(db, session_id)
            chain = _chain(db, session_id) if row.base_count else []
            segments = [*chain, (row.owner, row.own_count)]
            total = row.base_count + row.own_count
            after = None
            if after_id is not None:
                after = _index_of(db, row, chain, after_id)
                if after is None:
                    raise InvalidParams.field(
                        "cursor", "the message it points at is no longer there"
                    )
            if order == "asc":
                start = 0 if after is None else after + 1
                end = min(total, start + limit)
                found = _read_range(db, segments, start, end)
                more = end < total
            else:
                end = total if after is None else after
                start = max(0, end - limit)
                found = _read_range(db, segments, start, end)[::-1]
                more = start > 0
            next_cursor = encode_cursor("messages", found[-1].id) if more and found else None
            return MessagesResult(messages=found, total=total, next_cursor=next_cursor)

        return await self._hot(page, write=False)

    async def history(self, session_id: str) -> list[Message]:
        def history(db: _Exec) -> list[Message]:
            row = _counters(db, session_id)
            chain = _chain(db, session_id) if row.base_count else []
            segments = [*chain, (row.owner, row.own_count)]
            return _read_range(db, segments, 0, row.base_count + row.own_count)

        return await self._hot(history, write=False)

    async def append(
        self,
        session_id: str,
        messages: Sequence[MessageInput],
        *,
        run_id: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[Message]:
        now = utcnow()
        new_ids = list(ids) if ids is not None else [uuid7() for _ in messages]
        if len(new_ids) != len(messages) or len(set(new_ids)) != len(new_ids):
            raise ValueError("ids must be new and one per message")
        stored = [new_message(m, i, now, run_id) for m, i in zip(messages, new_ids, strict=True)]

        def append(db: _Exec) -> None:
            # one statement checks the lease, moves the counter and reads the session; an error
            # below undoes it
            now_param = _to_micros(now) if self._fast else now
            reserve, params = self._reserve(session_id, run_id)
            params.update(n=len(stored), now=now_param)
            found = db.rows(reserve, params)
            if not found and run_id is None and self._free_of_gone_holder(db, session_id):
                found = db.rows(reserve, params)
            if not found:
                raise self._refusal(db, session_id, run_id)
            reserved = _Counters(*found[0][:5])
            # the messages' time is the session's new updated_at, taken under its lock: now,
            # unless an append (of a process whose clock is ahead) left a later one
            at = found[0][5]
            if at != now_param:
                at = _from_micros(at) if isinstance(at, int) else at
                for message in stored:
                    message.created_at = at
            first = reserved.own_count - len(stored)
            _check_tool_results(db, reserved, first, messages)
            owner, agent_id = reserved.owner, reserved.agent_id
            rows = [
                _message_row(owner, agent_id, first + offset, m) for offset, m in enumerate(stored)
            ]
            calls = [
                {"owner": owner, "position": first + offset, "call_id": call.id}
                for offset, m in enumerate(stored)
                for call in m.tool_calls or ()
            ]
            try:
                db.insert(rows, calls)
            except (IntegrityError, sqlite3.IntegrityError):
                raise ValueError("ids must be new and one per message") from None

        if stored:
            await self._append(append)
        else:
            await self.get(session_id)
        return stored

    async def append_slices(
        self, session_id: str, slices: AsyncIterator[Sequence[MessageInput]]
    ) -> Sequence[Message]:
        """The slices gathered, then appended in one transaction."""
        messages = [message async for batch in slices for message in batch]
        return await self.append(session_id, messages)

    # -- run leases (see tether.sessions.lease) ----------------------------------------------

    async def claim_run(self, session_id: str, run_id: str, lease: timedelta) -> None:
        def claim(connection: Connection) -> None:
            # On PostgreSQL the lease may end between the refused update and the read of why:
            # the update is then tried again (each statement sees what is committed by then).
            # A lease whose holder is gone is freed, then taken, in this one transaction.
            for _ in range(3):
                at = self._clock()
                claimed = connection.execute(
                    update(sessions_table)
                    .where(_S.id == session_id, _FREE)
                    .values(lease_run_id=run_id, lease_holder=self.holder, lease_until=at + lease),
                    {"at": at},
                )
                if claimed.rowcount:
                    return
                if self._free_of_gone_holder(_Exec(connection), session_id):
                    continue
                refusal = self._refusal(_Exec(connection), session_id, None)
                if not isinstance(refusal, SessionBusy) or refusal.run_id is not None:
                    raise refusal
            raise refusal

        await self._write(claim)

    async def renew_run(self, session_id: str, run_id: str, lease: timedelta) -> bool:
        def renew(connection: Connection) -> bool:
            at = self._clock()
            renewed = connection.execute(
                update(sessions_table)
                .where(_S.id == session_id, _HELD)
                .values(lease_until=at + lease),
                {"at": at, "rid": run_id},
            )
            return bool(renewed.rowcount)

        return await self._write(renew)

    async def release_run(self, session_id: str, run_id: str) -> None:
        def release(connection: Connection) -> None:
            connection.execute(
                update(sessions_table)
                .where(_S.id == session_id, _S.lease_run_id == run_id)
                .values(lease_run_id=None, lease_holder=None, lease_until=None)
            )

        await self._write(release)

    def _reserve(self, session_id: str, run_id: str | None) -> tuple[Any, dict[str, Any]]:
        """The counter update of an append, with its lease condition and parameters."""
        at = self._clock()
        params: dict[str, Any] = {"sid": session_id, "at": _to_micros(at) if self._fast else at}
        if run_id is None:
            return _RESERVE_FREE, params
        return _RESERVE_HELD, {**params, "rid": run_id}

    def _free_of_gone_holder(self, db: _Exec, session_id: str) -> bool:
        """Free the session of a live lease whose holder is a process of this host that no
        longer runs (see :mod:`tether.sessions.lease`), by an update that names that holder;
        True when it did. The caller's write then goes on in the same transaction."""
        found = db.rows(_LEASE, {"sid": session_id})
        lease = _lease(found[0]) if found else None
        if lease is None or not lease.live(self._clock()) or not lease.holder_gone():
            return False
        freed = db.rows(
            _FREE_GONE, {"sid": session_id, "gone_run": lease.run_id, "gone_holder": lease.holder}
        )
        if freed:
            logger.info(
                "session %s: the process that ran %s is gone, its lease is taken over",
                session_id,
                lease.run_id,
            )
        return bool(freed)

    def _refusal(self, db: _Exec, session_id: str, run_id: str | None) -> Exception:
        """Why a write conditioned on the lease touched no row (read in its transaction)."""
        found = db.rows(_LEASE, {"sid": session_id})
        if not found:
            return SessionNotFound(session_id)
        if run_id is not None:
            return RunLeaseLost(session_id, run_id)
        lease = _lease(found[0])
        if lease is None or not lease.live(self._clock()):
            return SessionBusy(session_id)  # its run ended just now (PostgreSQL)
        return lease.busy(session_id, self.holder)

    def _locked_lease(self, connection: Connection, session_id: str) -> Lease | None:
        """The session's lease while it protects the session (live, its holder not gone), its
        row locked till the transaction ends (PostgreSQL; a SQLite write transaction holds the
        whole file), so no run claims it meanwhile."""
        row = connection.execute(_LEASE_LOCKED, {"sid": session_id}).first()
        lease = None if row is None else _lease(row)
        return lease if lease is not None and lease.blocks(self._clock()) else None

    def _lock_unleased(self, connection: Connection, session_id: str) -> None:
        """``SessionBusy`` while a run holds the session; else no run claims it till commit."""
        lease = self._locked_lease(connection, session_id)
        if lease is not None:
            raise lease.busy(session_id, self.holder)

    def _refuse_fork_in_run(self, parent: Row[Any], point: Message) -> None:
        """A fork at a message of the running turn would take an unfinished turn."""
        lease = _lease(parent)
        if lease is not None and point.run_id == lease.run_id and lease.blocks(self._clock()):
            raise lease.busy(parent.id, self.holder)


def _added_cost(usage: Usage) -> dict[str, Any]:
    """The update that adds a run's cost to its session's (none when it is unknown)."""
    if usage.cost is None:
        return {}
    return {"cost": func.coalesce(sessions_table.c.cost, 0.0) + usage.cost}
