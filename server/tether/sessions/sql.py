"""The SQL session store: SQLite (a file) or any SQLAlchemy URL (PostgreSQL for a shared store).

Layout (see also :mod:`tether.sessions.forks`):

- ``sessions``: one row per session, with the counters an append needs (``own_count``,
  ``base_count``) so that it never counts messages, and ``owner``, the key its own messages are
  stored under (a new one after ``clear``);
- ``messages``: keyed by ``(owner, position)``; a page is a range scan of that key;
- ``tool_calls``: one row per call an assistant message makes, indexed by call id, so a tool
  result is checked against the calls of the session without reading its history;
- ``segments``: the inherited prefix of each fork, ``(session_id, seq) -> (owner, upto)``,
  indexed by owner so rows that nothing refers to any more can be found and removed;
- ``schema_version``: the version of this layout, moved forward by :data:`MIGRATIONS`.

A session's run lease (:mod:`tether.sessions.lease`) is three columns of its row
(``lease_run_id``, ``lease_holder``, ``lease_until``): it is claimed, renewed and released by
conditional updates of that row, and every write a lease blocks checks it in its own
transaction (an append in the same statement that reserves its positions). A write refused by a
live lease whose holder is gone (a dead process of this host) frees the session by an update
naming that holder, and goes on in the same transaction.

A database error that is a store fault becomes a ``StoreError`` (:mod:`tether.sessions.faults`);
on SQLite, every transaction first checks the file (:mod:`tether.sessions.sqlite_file`).

SQLAlchemy is synchronous: calls run on one worker thread per store, so the event loop never
waits for the database. Each write is one transaction. On SQLite, an append (the kernel's write
per step) first tries on the loop thread with a connection that never waits for a lock: it takes
~0.2 ms there against ~0.5 ms through the worker, and when the file is locked (the worker or
another process is writing) it goes to the worker, which waits its turn.

Several processes share one database. On SQLite a write transaction holds the file's write lock
from its start (``BEGIN IMMEDIATE``), so writes are serial. On PostgreSQL writes run in READ
COMMITTED and lock what they depend on: the session rows they change (``FOR UPDATE``), the
parent of a fork (``FOR KEY SHARE``: appends to it go on), an owner whose messages may be freed
(an advisory lock, see :func:`_collect`), the schema while it is made or migrated; a read is one
REPEATABLE READ snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import partial
from hashlib import blake2b
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import orjson
from pydantic import TypeAdapter
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Dialect,
    Engine,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Row,
    String,
    Table,
    Text,
    and_,
    bindparam,
    case,
    create_engine,
    delete,
    event,
    exists,
    func,
    insert,
    inspect,
    literal,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.engine import RootTransaction
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable
from sqlalchemy.types import TypeDecorator

from tether.protocol import (
    CompactedRange,
    ConfigError,
    InvalidParams,
    ListSessionsResult,
    Message,
    MessageInput,
    MessagesResult,
    Role,
    RunLeaseLost,
    Session,
    SessionBusy,
    SessionNotFound,
    ToolCall,
)
from tether.protocol.kernel import Usage
from tether.protocol.messages import MessageContent, is_blocks
from tether.protocol.sessions import (
    DEFAULT_MODE,
    CreateSessionParams,
    ForkSessionParams,
    SessionFields,
    ToolPermissions,
    session_exists,
)
from tether.sessions.cursors import decode_cursor, encode_cursor
from tether.sessions.faults import FaultLog
from tether.sessions.forks import ALLOW_LISTS, check_fork_point, cut_chain, forked_fields
from tether.sessions.ids import utcnow, uuid7
from tether.sessions.lease import Lease, process_holder
from tether.sessions.memory import new_message, trusted_message
from tether.sessions.sqlite_file import SqliteFile, check_sidecars
from tether.sessions.store import Order

T = TypeVar("T")
logger = logging.getLogger(__name__)

SCHEMA_VERSION = 6


class _Micros(TypeDecorator[datetime]):
    """A UTC datetime as integer microseconds since the epoch: exact, portable, sortable."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> int | None:
        return None if value is None else _to_micros(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else _from_micros(value)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _to_micros(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


_ID = String(64)

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

sessions_table = Table(
    "sessions",
    metadata,
    Column("id", _ID, primary_key=True),
    Column("workspace", Text, nullable=False),
    Column("title", Text),
    Column("agent_id", Text),
    Column("model", Text),
    Column("system_prompt", Text),
    Column("settings", JSON, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("tools", JSON(none_as_null=True)),
    Column("allowed_models", JSON(none_as_null=True)),
    Column("state", JSON, nullable=False),
    Column("mode", Text),  # version 6: NULL is "ask"
    Column("permissions", JSON(none_as_null=True)),  # version 6: the remembered answers
    Column("parent_session_id", _ID),
    Column("forked_from_message_id", _ID),
    Column("owner", _ID, nullable=False),
    Column("base_count", Integer, nullable=False),
    Column("own_count", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("created_at", _Micros, nullable=False),
    Column("updated_at", _Micros, nullable=False),
    # the run lease (version 3): the run, its process, until when (all NULL: not leased)
    Column("lease_run_id", _ID),
    Column("lease_holder", Text),
    Column("lease_until", _Micros),
)
_LEASE_COLUMNS = ("lease_run_id", "lease_holder", "lease_until")
_MODE_COLUMNS = ("mode", "permissions")

segments_table = Table(
    "segments",
    metadata,
    Column("session_id", _ID, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("owner", _ID, nullable=False),
    Column("upto", Integer, nullable=False),
    PrimaryKeyConstraint("session_id", "seq"),
)

messages_table = Table(
    "messages",
    metadata,
    Column("owner", _ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("id", _ID, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", JSON(none_as_null=True)),
    Column("tool_calls", JSON(none_as_null=True)),
    Column("tool_call_id", Text),
    Column("is_error", Boolean),
    Column("name", Text),
    Column("author", Text),
    Column("metadata", JSON(none_as_null=True)),
    Column("output", JSON(none_as_null=True)),  # a tool result's structured output (v4)
    Column("agent_id", Text),
    Column("run_id", _ID),
    Column("created_at", _Micros, nullable=False),
    Column("kind", Text),
    Column("replaces", JSON(none_as_null=True)),
    PrimaryKeyConstraint("owner", "position"),
)

tool_calls_table = Table(
    "tool_calls",
    metadata,
    Column("owner", _ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("call_id", Text, nullable=False),
)

_V1_INDEXES = [
    Index("ix_messages_id", messages_table.c.id, unique=True),
    Index(
        "ix_sessions_workspace_updated",
        sessions_table.c.workspace,
        sessions_table.c.updated_at,
        sessions_table.c.id,
    ),
    Index("ix_sessions_updated", sessions_table.c.updated_at, sessions_table.c.id),
    Index("ix_sessions_owner", sessions_table.c.owner),
    Index("ix_segments_owner", segments_table.c.owner),
    Index("ix_tool_calls_call", tool_calls_table.c.call_id),
    Index("ix_tool_calls_owner", tool_calls_table.c.owner, tool_calls_table.c.position),
]
_V2_INDEXES = [Index("ix_messages_run", messages_table.c.run_id)]


# added by the migrations after the first
_LATER_COLUMNS = {("messages", name) for name in ("kind", "replaces", "output")}


def _json_loads(value: Any) -> Any:
    """A JSON column's value: SQLite gives a JSON number back as a number (the column's type,
    JSON, has numeric affinity), the rest as JSON text."""
    return value if isinstance(value, int | float) else orjson.loads(value)


def _create_v1(connection: Connection) -> None:
    for table in (sessions_table, segments_table, messages_table, tool_calls_table):
        create = CreateTable(table)
        create.columns = [
            c
            for c in create.columns
            if (table.name, c.element.name) not in _LATER_COLUMNS
            and c.element.name not in _LEASE_COLUMNS
            and (table.name, c.element.name) not in {("sessions", n) for n in _MODE_COLUMNS}
        ]
        connection.execute(create)
    for index in _V1_INDEXES:
        connection.execute(CreateIndex(index))


def _add_run_index(connection: Connection) -> None:
    for index in _V2_INDEXES:
        connection.execute(CreateIndex(index))


def _add_run_lease(connection: Connection) -> None:
    for name in _LEASE_COLUMNS:
        column = CreateColumn(sessions_table.c[name]).compile(dialect=connection.dialect)
        connection.exec_driver_sql(f"ALTER TABLE sessions ADD COLUMN {column}")


_COMPACTION_COLUMNS = ("kind", "replaces")


def _add_compaction(connection: Connection) -> None:
    """Messages learn ``kind`` and ``replaces`` (compaction summaries)."""
    for name in _COMPACTION_COLUMNS:
        column = CreateColumn(messages_table.c[name]).compile(dialect=connection.dialect)
        connection.exec_driver_sql(f"ALTER TABLE messages ADD COLUMN {column}")


def _add_message_output(connection: Connection) -> None:
    """Tool messages learn ``output`` (a structured result beside the text)."""
    column = CreateColumn(messages_table.c.output).compile(dialect=connection.dialect)
    connection.exec_driver_sql(f"ALTER TABLE messages ADD COLUMN {column}")


def _add_mode(connection: Connection) -> None:
    """Sessions learn ``mode`` and ``permissions`` (the remembered always answers)."""
    for name in _MODE_COLUMNS:
        column = CreateColumn(sessions_table.c[name]).compile(dialect=connection.dialect)
        connection.exec_driver_sql(f"ALTER TABLE sessions ADD COLUMN {column}")


MIGRATIONS: list[Callable[[Connection], None]] = [
    _create_v1,
    _add_run_index,
    _add_run_lease,
    _add_compaction,
    _add_message_output,
    _add_mode,
]
"""Step ``i`` moves the schema from version ``i`` to ``i + 1`` (0: an empty database)."""

assert len(MIGRATIONS) == SCHEMA_VERSION


# The statements of the hot paths, built once (SQLAlchemy then reuses their compiled form).
_S = sessions_table.c
_NOW = bindparam("now", type_=_Micros)
_M = messages_table.c


def _later(now: Any) -> Any:
    """The session's new ``updated_at``: ``now``, or the one it has when that is later (a clock
    behind, in another process, never moves a session's time back)."""
    return case((_S.updated_at > now, _S.updated_at), else_=now)


_COUNTERS = select(_S.id, _S.owner, _S.base_count, _S.own_count, _S.agent_id).where(
    _S.id == bindparam("sid")
)
_RESERVE = (
    update(sessions_table)
    .where(_S.id == bindparam("sid"))
    .values(own_count=_S.own_count + bindparam("n"), updated_at=_later(_NOW))
    .returning(_S.id, _S.owner, _S.base_count, _S.own_count, _S.agent_id, _S.updated_at)
)
# The lease conditions (``at``: the time of the check): a write by no run needs the session free
# of a live lease; a run's own write needs the run to hold one.
_AT = bindparam("at", type_=_Micros)
_FREE = or_(_S.lease_run_id.is_(None), _S.lease_until < _AT)
_HELD = and_(_S.lease_run_id == bindparam("rid"), _S.lease_until >= _AT)
_RESERVE_FREE = _RESERVE.where(_FREE)
_RESERVE_HELD = _RESERVE.where(_HELD)
_LEASE = select(_S.lease_run_id, _S.lease_holder, _S.lease_until).where(_S.id == bindparam("sid"))
_LEASE_LOCKED = _LEASE.with_for_update()
# Frees a session of the lease of a holder that is gone, naming it: of two processes that find it
# gone, the second frees nothing (the first has taken the lease by then).
_FREE_GONE = (
    update(sessions_table)
    .where(
        _S.id == bindparam("sid"),
        _S.lease_run_id == bindparam("gone_run"),
        _S.lease_holder == bindparam("gone_holder"),
    )
    .values(lease_run_id=null(), lease_holder=null(), lease_until=null())
    .returning(_S.id)
)
_MESSAGE_COLUMNS = (
    _M.id, _M.role, _M.content, _M.tool_calls, _M.tool_call_id, _M.is_error, _M.name,
    _M.author, _M.metadata, _M.output, _M.run_id, _M.created_at, _M.kind, _M.replaces,
)  # fmt: skip
_RANGE = (
    select(*_MESSAGE_COLUMNS)
    .where(
        _M.owner == bindparam("owner"),
        _M.position >= bindparam("low"),
        _M.position < bindparam("high"),
    )
    .order_by(_M.position)
)
_INSERT_MESSAGES = insert(messages_table)
_INSERT_CALLS = insert(tool_calls_table)
_CALL_BY_ID = select(
    tool_calls_table.c.owner, tool_calls_table.c.position, tool_calls_table.c.call_id
).where(tool_calls_table.c.call_id == bindparam("call_id"))
_CHAIN = (
    select(segments_table.c.owner, segments_table.c.upto)
    .where(segments_table.c.session_id == bindparam("sid"))
    .order_by(segments_table.c.seq)
)
_BY_MESSAGE_ID = select(_M.owner, _M.position).where(_M.id == bindparam("message_id"))


# PostgreSQL advisory locks of the store: ``(namespace, key)``, transaction-scoped.
_SCHEMA_LOCK = (0x7E7E, 1)  # held by the transaction that creates or migrates the schema
_OWNER_LOCKS = 0x7E7F  # with a hash of an owner: held while the messages of that owner are freed


def _advisory_lock(connection: Connection, namespace: int, key: int) -> None:
    connection.execute(select(func.pg_advisory_xact_lock(namespace, key)))


def migrate(connection: Connection, target: int = SCHEMA_VERSION) -> int:
    """Run the steps from the database's version up to ``target``; return the version found.

    Any number of processes may start together on an empty or old database: on PostgreSQL the
    first to come holds a lock until it commits, and the others then find the schema made (its
    statements see what was committed before they began); on SQLite the caller's transaction
    holds the write lock (``BEGIN IMMEDIATE``).
    """
    if connection.dialect.name == "postgresql":
        _advisory_lock(connection, *_SCHEMA_LOCK)
    schema_version.create(connection, checkfirst=True)
    found = connection.execute(select(schema_version.c.version)).scalar()
    current = found or 0
    if current > SCHEMA_VERSION:
        raise ConfigError(
            f"the session database has schema version {current}, newer than this tether "
            f"understands ({SCHEMA_VERSION}): upgrade tether",
            {"key": "sessions.store", "source": "sessions database"},
        )
    for step in MIGRATIONS[current:target]:
        step(connection)
    if found is None:
        connection.execute(insert(schema_version).values(version=max(current, target)))
    elif target > current:
        connection.execute(update(schema_version).values(version=target))
    return current


def database_url(url: str) -> str:
    """``url`` with the driver tether installs: ``postgres://`` and ``postgresql://`` (which
    SQLAlchemy would open with psycopg2) become ``postgresql+psycopg://`` (``tether[postgres]``)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgres", "postgresql"):
        return f"postgresql+psycopg://{rest}"
    return url


_DRIVERS = {"postgresql": "postgres"}  # dialect -> the extra of tether that installs its driver


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and explicit transactions.

    A server's connections are checked before use (``pool_pre_ping``), so a database that was
    restarted costs no failed request.
    """
    url = database_url(url)
    server = not url.startswith("sqlite")
    try:
        engine = create_engine(
            url,
            json_serializer=lambda value: orjson.dumps(value).decode(),
            json_deserializer=_json_loads,
            pool_pre_ping=server,
        )
    except ImportError as exc:
        raise _missing_driver(url, exc) from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_connected)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def _missing_driver(url: str, exc: ImportError) -> ConfigError:
    kind = url.split(":", 1)[0].split("+", 1)[0]
    extra = _DRIVERS.get(kind)
    hint = f": pip install 'tether[{extra}]'" if extra else ""
    return ConfigError(
        f"the {kind} session store needs its database driver ({exc.name or exc}){hint}",
        {"key": "sessions.store", "source": "sessions"},
    )


def _use_wal(cursor: Any, patience: float = 30.0) -> None:
    """Switch the database to WAL. While another connection is switching it, SQLite answers
    "locked" at once, without waiting for the busy timeout: several processes opening a new
    file together then try again until it is done."""
    deadline = time.monotonic() + patience
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _sqlite_connected(dbapi_connection: Any, record: Any) -> None:
    dbapi_connection.isolation_level = None  # transactions are begun by _sqlite_begin
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    _use_wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")  # in WAL: a commit survives a killed process
    cursor.close()


def _sqlite_begin(connection: Connection) -> None:
    # A write takes the lock at once, so two processes never deadlock upgrading read locks.
    write = connection.get_execution_options().get("tether_write", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def sqlite_url(path: str | os.PathLike[str]) -> str:
    return f"sqlite:///{Path(path)}"


class _Exec:
    """The reads and writes of the hot paths, through SQLAlchemy (any database)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def rows(self, statement: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Rows of plain values (strings and integers: no column needs converting)."""
        return [tuple(row) for row in self.connection.execute(statement, params)]

    def messages(self, owner: str, low: int, high: int) -> list[Message]:
        rows = self.connection.execute(_RANGE, {"owner": owner, "low": low, "high": high})
        return [_message(row) for row in rows]

    def insert(self, messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        self.connection.execute(_INSERT_MESSAGES, messages)
        if calls:
            self.connection.execute(_INSERT_CALLS, calls)


class _Compiled:
    """A statement compiled once for SQLite, with the order of its parameters."""

    def __init__(self, statement: Any, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())

    def args(self, params: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(params[name] for name in self.names)


class _SqliteExec(_Exec):
    """The same on the sqlite3 connection under SQLAlchemy's, with the statements SQLAlchemy
    compiled: the hot paths then cost what sqlite3 costs (SQLAlchemy's execution layer would
    take most of the time of a small append)."""

    def __init__(self, connection: Connection, compiled: dict[int, _Compiled]) -> None:
        super().__init__(connection)
        self.raw: Any = connection.connection.driver_connection
        self._compiled = compiled

    def _sql(self, statement: Any) -> _Compiled:
        compiled = self._compiled.get(id(statement))
        if compiled is None:
            compiled = self._compiled[id(statement)] = _Compiled(statement, self.connection.dialect)
        return compiled

    def rows(self, statement: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        compiled = self._sql(statement)
        return list(self.raw.execute(compiled.sql, compiled.args(params)))

    def messages(self, owner: str, low: int, high: int) -> list[Message]:
        compiled = self._sql(_RANGE)
        found = []
        params = {"owner": owner, "low": low, "high": high}
        for row in self.raw.execute(compiled.sql, compiled.args(params)):
            values = list(row)
            # content, tool_calls, metadata, output, replaces: JSON text
            for index in (2, 3, 8, 9, 13):
                if isinstance(values[index], str | bytes):  # SQLite gives a JSON number back
                    values[index] = orjson.loads(values[index])  # as a number (JSON affinity)
            if values[5] is not None:
                values[5] = bool(values[5])
            values[11] = _from_micros(values[11])
            found.append(_message(values))
        return found

    def insert(self, messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        compiled = self._sql(_INSERT_MESSAGES)
        rows = []
        for message in messages:
            for name in ("content", "tool_calls", "metadata", "output", "replaces"):
                if message[name] is not None:
                    message[name] = orjson.dumps(message[name]).decode()
            message["created_at"] = _to_micros(message["created_at"])
            rows.append(compiled.args(message))
        self.raw.executemany(compiled.sql, rows)
        if calls:
            compiled = self._sql(_INSERT_CALLS)
            self.raw.executemany(compiled.sql, [compiled.args(call) for call in calls])


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

    async def create(self, params: CreateSessionParams, workspace: str) -> Session:
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
            values[name] = _permissions_json(value) if name == "permissions" else value
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


# --- helpers (run on the worker thread) -----------------------------------------------------

_RETRIED_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock detected
_RETRIES = 5


def _worth_retrying(exc: DBAPIError, attempt: int) -> bool:
    """Whether a transaction that raised ``exc`` before its commit may run again."""
    if exc.connection_invalidated:
        return attempt == 1
    state = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return state in _RETRIED_STATES and attempt <= _RETRIES


_READ_COMMITTED, _REPEATABLE_READ = 2, 3  # psycopg.IsolationLevel


def _isolate(connection: Connection, write: bool) -> None:
    """Set the isolation of the transaction about to begin on PostgreSQL (psycopg begins it
    with the level set: no round trip). A read is one snapshot, REPEATABLE READ (its statements
    would each see what was committed before they began); a write is READ COMMITTED, locking the
    rows it changes and seeing their latest versions (which the locking of forks, deletes and
    :func:`_collect` rely on), whatever the server's default."""
    raw: Any = connection.connection.dbapi_connection
    raw.isolation_level = _READ_COMMITTED if write else _REPEATABLE_READ


def _roll_back(connection: Connection, transaction: RootTransaction) -> None:
    """Roll back ``transaction`` after an error, also one whose commit failed: SQLAlchemy then
    only forgets it (it is no longer active), and the database may still hold it open. (The
    driver's rollback does nothing when no transaction is open.)"""
    transaction.rollback()
    if not connection.invalidated:  # a lost connection has nothing left to undo
        raw: Any = connection.connection.dbapi_connection
        raw.rollback()


def _open_engine(url: str) -> Engine:
    engine = make_engine(url)
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        check_sidecars(Path(database))
    try:
        if not _schema_is_current(engine):
            with engine.connect() as connection:
                connection.execution_options(tether_write=True)
                if engine.dialect.name == "postgresql":  # see _isolate: each statement a snapshot
                    connection.execution_options(isolation_level="READ COMMITTED")
                with connection.begin():
                    migrate(connection)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _schema_is_current(engine: Engine) -> bool:
    """Whether the database has this tether's schema already, read without writing: a store
    that may not be written (a read-only file) still opens, and answers what it holds."""
    with engine.connect() as connection, connection.begin():
        if not inspect(connection).has_table(schema_version.name):
            return False
        return connection.execute(select(schema_version.c.version)).scalar() == SCHEMA_VERSION


_Lock = Literal["update", "key share"] | None


def _find_session_row(
    connection: Connection, session_id: str, lock: _Lock = None
) -> Row[Any] | None:
    """The session's row; ``lock``: locked until the transaction ends (where the database has
    row locks: SQLite's transaction that writes already holds the whole file).

    ``update`` for a write that changes what the session holds (clear, delete); ``key share``
    for a fork: its parent then keeps what it holds until the fork is committed, while appends
    to the parent go on.
    """
    query = select(sessions_table).where(sessions_table.c.id == session_id)
    if lock == "update":
        query = query.with_for_update()
    elif lock == "key share":
        query = query.with_for_update(read=True, key_share=True)
    return connection.execute(query).first()


def _session_row(connection: Connection, session_id: str, lock: _Lock = None) -> Row[Any]:
    row = _find_session_row(connection, session_id, lock)
    if row is None:
        raise SessionNotFound(session_id)
    return row


class _Counters(NamedTuple):
    """What reading or appending to the history needs of a session."""

    id: str
    owner: str
    base_count: int
    own_count: int
    agent_id: str | None


def _counters(db: _Exec, session_id: str) -> _Counters:
    rows = db.rows(_COUNTERS, {"sid": session_id})
    if not rows:
        raise SessionNotFound(session_id)
    return _Counters(*rows[0])


def _chain(db: _Exec | Connection, session_id: str) -> list[tuple[str, int]]:
    if isinstance(db, Connection):
        db = _Exec(db)
    return [(owner, upto) for owner, upto in db.rows(_CHAIN, {"sid": session_id})]


def _owner_key(owner: str) -> int:
    """A 32-bit key for ``owner``'s lock (two owners may share one: they then wait in turn)."""
    return int.from_bytes(blake2b(owner.encode(), digest_size=4).digest(), "big", signed=True)


def _lease(row: Sequence[Any]) -> Lease | None:
    """The lease of a row whose last three columns are the lease columns (None: not leased)."""
    run_id, holder, until = tuple(row)[-3:]
    if run_id is None:
        return None
    return Lease(run_id, holder, until if isinstance(until, datetime) else _from_micros(until))


def _session(row: Row[Any], now: datetime) -> Session:
    lease = _lease(row)
    return Session(
        session_id=row.id,
        workspace=row.workspace,
        title=row.title,
        agent_id=row.agent_id,
        model=row.model,
        system_prompt=row.system_prompt,
        settings=row.settings,
        metadata=row.metadata,
        tools=row.tools,
        allowed_models=row.allowed_models,
        state=row.state,
        mode=row.mode or DEFAULT_MODE,
        permissions=ToolPermissions.model_validate(row.permissions or {}),
        parent_session_id=row.parent_session_id,
        forked_from_message_id=row.forked_from_message_id,
        message_count=row.base_count + row.own_count,
        usage=Usage(input_tokens=row.input_tokens, output_tokens=row.output_tokens),
        created_at=row.created_at,
        updated_at=row.updated_at,
        running=lease is not None and lease.blocks(now),
    )


def _permissions_json(permissions: ToolPermissions | None) -> dict[str, Any] | None:
    """The remembered answers as the ``permissions`` column keeps them (None: none)."""
    if permissions is None or not (permissions.allow_always or permissions.reject_always):
        return None
    return permissions.model_dump(by_alias=True)


def _json_safe(values: dict[str, Any]) -> dict[str, Any]:
    """JSON columns of a session row as plain JSON data (the caller keeps its own objects)."""
    for name in ("settings", "metadata", "state", "tools", "allowed_models"):
        if name in values and values[name] is not None:
            values[name] = orjson.loads(orjson.dumps(values[name]))
    return values


def _index_of(
    db: _Exec, row: _Counters | Row[Any], chain: list[tuple[str, int]], message_id: str
) -> int | None:
    """The index of a message in a session's history, or None when it is not in it."""
    found = db.rows(_BY_MESSAGE_ID, {"message_id": message_id})
    if not found:
        return None
    owner, position = found[0]
    offset = 0
    for segment_owner, upto in [*chain, (row.owner, row.own_count)]:
        if owner == segment_owner and position < upto:
            return offset + int(position)
        offset += upto
    return None


def _read_range(db: _Exec, segments: list[tuple[str, int]], start: int, end: int) -> list[Message]:
    """Messages ``start`` to ``end`` (exclusive) of the history made of ``segments``."""
    found: list[Message] = []
    offset = 0
    for owner, upto in segments:
        low, high = max(start - offset, 0), min(end - offset, upto)
        if low < high:
            found.extend(db.messages(owner, low, high))
        offset += upto
        if offset >= end:
            break
    return found


def _newest_first(db: _Exec, segments: list[tuple[str, int]], end: int) -> Iterator[Message]:
    """The history before ``end``, newest first, read a few at a time."""
    batch = 16
    while end > 0:
        start = max(0, end - batch)
        yield from reversed(_read_range(db, segments, start, end))
        end, batch = start, batch * 4


def _check_tool_results(
    db: _Exec, row: _Counters, own_count: int, messages: Sequence[MessageInput]
) -> None:
    """Every tool message must answer a call made earlier in the session or the batch."""
    batch_calls: set[str] = set()
    wanted: dict[int, str] = {}
    for index, message in enumerate(messages):
        if message.tool_calls:
            batch_calls.update(call.id for call in message.tool_calls)
        if message.role is Role.TOOL and message.tool_call_id not in batch_calls:
            wanted[index] = message.tool_call_id or ""
    if not wanted:
        return
    chain = _chain(db, row.id) if row.base_count else []
    limits = dict(chain)
    limits[row.owner] = own_count
    known = {
        call_id
        for wanted_id in set(wanted.values())
        for owner, position, call_id in db.rows(_CALL_BY_ID, {"call_id": wanted_id})
        if position < limits.get(owner, 0)
    }
    for index, call_id in wanted.items():
        if call_id not in known:
            raise InvalidParams.field(
                f"messages.{index}.toolCallId",
                f"no tool call {call_id!r} in this session to answer",
            )


def _message_row(
    owner: str, agent_id: str | None, position: int, message: Message
) -> dict[str, Any]:
    content: Any = message.content
    if is_blocks(content):
        content = [block.model_dump(mode="json", exclude_none=True) for block in content]
    return {
        "owner": owner,
        "position": position,
        "id": message.id,
        "role": message.role.value,
        "content": content,
        "tool_calls": (
            None
            if message.tool_calls is None
            else [call.model_dump(mode="json") for call in message.tool_calls]
        ),
        "tool_call_id": message.tool_call_id,
        "is_error": message.is_error,
        "name": message.name,
        "author": message.author,
        "metadata": message.metadata,
        "output": message.output,
        "agent_id": agent_id,
        "run_id": message.run_id,
        "created_at": message.created_at,
        "kind": message.kind,
        "replaces": None if message.replaces is None else message.replaces.to_wire(),
    }


_CONTENT: TypeAdapter[MessageContent] = TypeAdapter(MessageContent)


def _message(row: Sequence[Any]) -> Message:
    """A row of ``_MESSAGE_COLUMNS`` as a message.

    Rows hold messages that were validated when they were appended, so only the nested models
    are rebuilt (validating every field again would be most of the cost of a page).
    """
    message_id, role, content, calls, call_id, is_error, name, author, metadata, output = row[:10]
    run_id, at, kind, span = row[10:14]
    if isinstance(content, list):
        content = _CONTENT.validate_python(content)
    return trusted_message(
        {
            "role": Role(role),
            "content": content,
            "tool_calls": (
                None if calls is None else [ToolCall.model_construct(**c) for c in calls]
            ),
            "tool_call_id": call_id,
            "is_error": is_error,
            "name": name,
            "author": author,
            "metadata": metadata,
            "kind": kind,
            "replaces": None if span is None else CompactedRange.model_validate(span),
            "output": output,
            "id": message_id,
            "run_id": run_id,
            "created_at": at,
        }
    )


def _delete(connection: Connection, session_id: str) -> None:
    row = _session_row(connection, session_id, "update")
    owners = {row.owner, *(owner for owner, _ in _chain(connection, session_id))}
    connection.execute(delete(segments_table).where(segments_table.c.session_id == session_id))
    connection.execute(delete(sessions_table).where(sessions_table.c.id == session_id))
    _collect(connection, owners)


def _collect(connection: Connection, owners: set[str]) -> None:
    """Remove the messages of owners that no session holds or inherits any more.

    The caller has removed its own hold on ``owners``. On PostgreSQL two transactions can each
    remove one of the last two holds at once, each still seeing the other's (not committed):
    a lock per owner makes the second wait for the first to commit, and its statements then see
    that commit (READ COMMITTED), so the last one out frees the rows. A fork that adds a hold
    keeps its parent's row locked until it commits, so the parent's hold is seen until then.
    """
    if connection.dialect.name == "postgresql":
        for key in sorted({_owner_key(owner) for owner in owners}):  # one order: no deadlock
            _advisory_lock(connection, _OWNER_LOCKS, key)
    for owner in owners:
        held = connection.execute(
            select(
                exists().where(sessions_table.c.owner == owner)
                | exists().where(segments_table.c.owner == owner)
            )
        ).scalar()
        if not held:
            connection.execute(delete(messages_table).where(messages_table.c.owner == owner))
            connection.execute(delete(tool_calls_table).where(tool_calls_table.c.owner == owner))
