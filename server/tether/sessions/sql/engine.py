"""Engines (SQLite pragmas, drivers), opening a database, which failed transactions run again."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
)
from sqlalchemy.engine import RootTransaction
from sqlalchemy.exc import DBAPIError

from tether.protocol import (
    ConfigError,
)
from tether.sessions.sql.schema import _schema_is_current, migrate
from tether.sessions.sqlite_file import check_sidecars


def _json_loads(value: Any) -> Any:
    """A JSON column's value: SQLite gives a JSON number back as a number (the column's type,
    JSON, has numeric affinity), the rest as JSON text."""
    return value if isinstance(value, int | float) else orjson.loads(value)


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
