"""Store faults: which database errors are faults and their reasons (real SQLite and PostgreSQL
errors), how a store logs them (once per episode, without a traceback), and the ``-wal`` and
``-shm`` files a SQLite store refuses to open. The faults through the real server:
``tests/e2e/test_store_faults.py``."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.postgres import sqlalchemy_url
from tether.protocol import StoreError
from tether.protocol.sessions import CreateSessionParams
from tether.sessions.faults import FaultLog, fault_of, store_error
from tether.sessions.sql import SqlStore, sqlite_url

from .conftest import WORKSPACE


def raised(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as connection:
        connection.execute("create table t (x)")
    return path


def test_sqlite_errors_that_are_faults_get_their_reason(database: Path, tmp_path: Path) -> None:
    read_only = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    assert fault_of(raised(lambda: read_only.execute("insert into t values (1)"))) == "read-only"

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\xa5" * 8192)
    damaged = sqlite3.connect(garbage)
    assert fault_of(raised(lambda: damaged.execute("select * from t"))) == "corrupt"

    nowhere = tmp_path / "no-such-directory" / "s.db"
    assert fault_of(raised(lambda: sqlite3.connect(nowhere))) == "unreachable"

    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("begin immediate")
    waiter = sqlite3.connect(database, isolation_level=None, timeout=0)
    assert fault_of(raised(lambda: waiter.execute("begin immediate"))) == "locked"
    holder.execute("rollback")


def test_sqlite_errors_that_are_bugs_are_no_faults(database: Path) -> None:
    connection = sqlite3.connect(database)
    connection.execute("create unique index one on t (x)")
    connection.execute("insert into t values (1)")
    assert fault_of(raised(lambda: connection.execute("select * from no_such_table"))) is None
    assert fault_of(raised(lambda: connection.execute("insert into t values (1)"))) is None
    assert fault_of(ValueError("not a database error")) is None


def test_errors_raised_through_sqlalchemy_are_judged_by_the_drivers_error(database: Path) -> None:
    engine = create_engine(f"sqlite:///file:{database}?mode=ro&uri=true")
    try:
        with engine.connect() as connection:
            error = raised(lambda: connection.execute(text("insert into t values (1)")))
    finally:
        engine.dispose()
    assert fault_of(error) == "read-only"


def test_postgresql_errors_that_are_faults_get_their_reason(
    postgres_url: str, tmp_path: Path
) -> None:
    engine = create_engine(sqlalchemy_url(postgres_url))
    try:
        with engine.connect() as connection:
            connection.execute(text("set transaction read only"))
            error = raised(lambda: connection.execute(text("create table t (x int)")))
            assert fault_of(error) == "read-only"
            connection.rollback()
            assert fault_of(raised(lambda: connection.execute(text("select nothing")))) is None
    finally:
        engine.dispose()
    nowhere = f"postgresql+psycopg:///tether?host={tmp_path}"  # no server on that socket
    engine = create_engine(nowhere)
    try:
        assert fault_of(raised(engine.connect)) == "unreachable"
    finally:
        engine.dispose()


def test_a_fault_is_logged_once_per_episode_without_a_traceback(
    caplog: pytest.LogCaptureFixture, database: Path
) -> None:
    caplog.set_level(logging.INFO, logger="tether.sessions.faults")
    log = FaultLog("sqlite")
    read_only = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    fault = raised(lambda: read_only.execute("insert into t values (1)"))
    errors = [log.error_for(fault, write=True) for _ in range(3)]
    assert all(isinstance(error, StoreError) and error.reason == "read-only" for error in errors)
    log.succeeded(write=False)  # reads go on while writes fail: the episode goes on
    assert log.error_for(fault, write=True) is not None
    log.succeeded(write=True)
    log.error_for(store_error("replaced", "sqlite"), write=True)
    assert log.error_for(ValueError("a bug"), write=True) is None
    assert [(r.levelname, r.exc_info) for r in caplog.records] == [
        ("WARNING", None),
        ("INFO", None),
        ("WARNING", None),
    ]
    first, recovered, replaced = (record.getMessage() for record in caplog.records)
    assert "cannot be written" in first and "SQLITE_READONLY" in first
    assert "works again" in recovered
    assert "deleted or replaced" in replaced


def test_a_read_fault_ends_with_the_next_call_that_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tether.sessions.faults")
    log = FaultLog("postgresql")
    log.error_for(store_error("unreachable", "postgresql"), write=False)
    log.succeeded(write=False)
    log.error_for(store_error("unreachable", "postgresql"), write=False)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
async def test_a_store_whose_wal_or_shm_is_not_a_regular_file_is_not_opened(
    tmp_path: Path, suffix: str
) -> None:
    """SQLite would map a device, or read a FIFO: the store is refused before it opens."""
    os.mkfifo(tmp_path / f"s.db{suffix}")
    with pytest.raises(StoreError) as caught:
        await SqlStore.open(sqlite_url(tmp_path / "s.db"))
    assert caught.value.reason == "corrupt"


_REFUSE_COMMITS = [
    "create function refuse() returns trigger language plpgsql as "
    "$$ begin raise exception 'no space' using errcode = 'disk_full'; end $$",
    "create constraint trigger refuse after insert on sessions "
    "deferrable initially deferred for each row execute function refuse()",
]


async def test_a_commit_that_fails_leaves_no_transaction_behind_it(postgres_url: str) -> None:
    """A commit the database refuses (a deferred trigger raising ``disk_full`` at commit, as a
    full disk does) is a StoreError, and the store's connection is left with no transaction
    open: reads go on, and once commits are taken again, writes too."""
    store = await SqlStore.open(postgres_url)
    engine = create_engine(sqlalchemy_url(postgres_url))
    try:
        kept = await store.create(CreateSessionParams(), WORKSPACE)
        with engine.begin() as connection:
            for statement in _REFUSE_COMMITS:
                connection.execute(text(statement))
        for _ in range(2):
            with pytest.raises(StoreError) as caught:
                await store.create(CreateSessionParams(), WORKSPACE)
            assert caught.value.reason == "disk-full"
            assert (await store.get(kept.session_id)).session_id == kept.session_id
        with engine.begin() as connection:
            connection.execute(text("drop trigger refuse on sessions"))
        added = await store.create(CreateSessionParams(), WORKSPACE)
        listed = await store.list_sessions(workspace=None, cursor=None, limit=10)
        assert {s.session_id for s in listed.sessions} == {kept.session_id, added.session_id}
    finally:
        engine.dispose()
        await store.aclose()
