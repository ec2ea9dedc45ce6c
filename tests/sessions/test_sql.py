"""What only the SQL store has: a file that outlives the store, schema versions, two writers."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, insert, inspect, select

from tether.protocol import (
    CompactedRange,
    ConfigError,
    ConfigureSessionParams,
    MessageInput,
    Role,
    ToolCall,
)
from tether.protocol.plans import PlanEntry
from tether.protocol.sessions import CreateSessionParams, ForkSessionParams, ToolPermissions
from tether.sessions.opening import url_kind
from tether.sessions.sql import (
    MIGRATIONS,
    SCHEMA_VERSION,
    SqlStore,
    database_url,
    migrate,
    schema_version,
    sessions_table,
    sqlite_url,
)

from .conftest import WORKSPACE, user


async def test_a_new_store_on_the_same_file_sees_everything(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "s.db")
    first = await SqlStore.open(url)
    session = await first.create(CreateSessionParams(title="t", state={"n": 1}), WORKSPACE)
    call = ToolCall(id="c1", name="read", arguments="{}")
    await first.claim_run(session.session_id, "r1", timedelta(minutes=5))
    stored = await first.append(
        session.session_id,
        [user("hi"), MessageInput(role=Role.ASSISTANT, tool_calls=[call])],
        run_id="r1",
    )
    await first.release_run(session.session_id, "r1")
    child = await first.fork(
        ForkSessionParams(session_id=session.session_id, at_message_id=stored[0].id)
    )
    await first.aclose()

    second = await SqlStore.open(url)
    try:
        assert await second.get(session.session_id) == await_session(session, 2)
        assert await second.history(session.session_id) == stored
        assert await second.history(child.session_id) == stored[:1]
        listed = await second.list_sessions(workspace=WORKSPACE, cursor=None, limit=10)
        assert {s.session_id for s in listed.sessions} == {session.session_id, child.session_id}
        # the dangling call is there for the next run to answer "interrupted"
        answer = MessageInput(role=Role.TOOL, tool_call_id="c1", content="interrupted")
        await second.append(session.session_id, [answer])
    finally:
        await second.aclose()


def await_session(session: object, count: int) -> object:
    from tether.protocol import Session

    assert isinstance(session, Session)
    return session.model_copy(update={"message_count": count, "updated_at": ANY_TIME})


class _AnyTime:
    def __eq__(self, other: object) -> bool:
        return True


ANY_TIME = _AnyTime()


def _version(connection: Connection) -> int:
    return int(connection.execute(select(schema_version.c.version)).scalar_one())


async def test_a_version_1_database_opens_and_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = create_engine(sqlite_url(path))
    with engine.begin() as connection:
        migrate(connection, target=1)
        assert _version(connection) == 1
        assert "ix_messages_run" not in {
            i["name"] for i in inspect(connection).get_indexes("messages")
        }
    engine.dispose()

    store = await SqlStore.open(sqlite_url(path))
    try:
        session = await store.create(CreateSessionParams(), WORKSPACE)
        await store.append(session.session_id, [user("after the migration")])
        version = await store._read(_version)
        indexes = await store._read(
            lambda c: {i["name"] for i in inspect(c).get_indexes("messages")}
        )
    finally:
        await store.aclose()
    assert version == SCHEMA_VERSION == len(MIGRATIONS)
    assert "ix_messages_run" in indexes


async def test_a_database_from_a_newer_tether_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    engine = create_engine(sqlite_url(path))
    with engine.begin() as connection:
        schema_version.create(connection)
        connection.execute(insert(schema_version).values(version=SCHEMA_VERSION + 1))
    engine.dispose()
    with pytest.raises(ConfigError, match="newer"):
        await SqlStore.open(sqlite_url(path))


async def test_the_file_is_in_wal_mode(tmp_path: Path) -> None:
    store = await SqlStore.open(sqlite_url(tmp_path / "s.db"))
    try:
        mode = await store._read(lambda c: c.exec_driver_sql("PRAGMA journal_mode").scalar())
    finally:
        await store.aclose()
    assert mode == "wal"


async def test_two_stores_on_one_file_append_to_one_session_without_losing_anything(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "s.db")
    one, two = await SqlStore.open(url), await SqlStore.open(url)
    try:
        session = await one.create(CreateSessionParams(), WORKSPACE)
        sid = session.session_id

        async def writer(store: SqlStore, name: str) -> None:
            for i in range(50):
                await store.append(sid, [user(f"{name}{i}"), user(f"{name}{i}b")])

        await asyncio.gather(writer(one, "a"), writer(two, "b"))
        history = await two.history(sid)
    finally:
        await one.aclose()
        await two.aclose()
    assert len(history) == 200
    for name in "ab":
        mine = [m.content for m in history if str(m.content).startswith(name)]
        assert mine == [x for i in range(50) for x in (f"{name}{i}", f"{name}{i}b")]


async def test_an_append_while_another_process_writes_waits_off_the_event_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = await SqlStore.open(sqlite_url(path))
    other = sqlite3.connect(path, isolation_level=None)  # another process, as SQLite sees it
    try:
        sid = (await store.create(CreateSessionParams(), WORKSPACE)).session_id
        await store.append(sid, [user("first")])  # the lock is free: written at once
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        append = asyncio.create_task(store.append(sid, [user("second")]))
        ticks = 0
        while ticks < 20:  # the loop goes on while the append waits for the lock
            await asyncio.sleep(0)
            ticks += 1
        assert not append.done()
        other.execute("COMMIT")
        await asyncio.wait_for(append, 30)
        history = await store.history(sid)
    finally:
        other.close()
        await store.aclose()
    assert [m.content for m in history] == ["first", "second"]


async def test_appends_sent_while_another_process_writes_commit_in_the_order_sent(
    tmp_path: Path,
) -> None:
    """The first append waits on the worker for the lock; the next ones, sent before it ends,
    must not find the lock free on the loop's thread and commit first."""
    path = tmp_path / "s.db"
    store = await SqlStore.open(sqlite_url(path))
    other = sqlite3.connect(path, isolation_level=None)  # another process, as SQLite sees it
    try:
        sid = (await store.create(CreateSessionParams(), WORKSPACE)).session_id
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        first = asyncio.create_task(store.append(sid, [user("1")]))
        await asyncio.sleep(0)  # it tried the lock and went to the worker
        other.execute("COMMIT")  # the lock is free: the worker takes it when it next tries
        rest = [asyncio.create_task(store.append(sid, [user(str(i))])) for i in range(2, 6)]
        await asyncio.gather(first, *rest)
        history = await store.history(sid)
    finally:
        other.close()
        await store.aclose()
    assert [m.content for m in history] == ["1", "2", "3", "4", "5"]


async def test_a_page_reads_only_its_rows(tmp_path: Path) -> None:
    """The tail page of a long history costs a few statements, none of them over all rows."""
    from sqlalchemy import event

    store = await SqlStore.open(sqlite_url(tmp_path / "s.db"))
    try:
        session = await store.create(CreateSessionParams(), WORKSPACE)
        for start in range(0, 2000, 500):
            await store.append(
                session.session_id, [user(str(i)) for i in range(start, start + 500)]
            )
        statements: list[str] = []
        event.listen(
            store._engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *rest: statements.append(statement),
        )
        page = await store.messages(session.session_id, cursor=None, limit=50, order="desc")
        plans = await store._read(
            lambda c: [
                str(row)
                for statement in statements
                if statement.lstrip().upper().startswith("SELECT")
                for row in c.exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + statement, _params_for(statement, session.session_id)
                )
            ]
        )
    finally:
        await store.aclose()
    assert [m.content for m in page.messages][:2] == ["1999", "1998"] and page.total == 2000
    assert not any("SCAN messages" in plan for plan in plans), plans
    assert not any("count(" in s.lower() for s in statements)


def _params_for(statement: str, session_id: str) -> tuple[object, ...]:
    return tuple(session_id if i == 0 else 0 for i in range(statement.count("?")))


@pytest.mark.parametrize(
    ("given", "opened"),
    [
        ("postgres://u:p@host:5433/db", "postgresql+psycopg://u:p@host:5433/db"),
        ("postgresql://u@/db?host=/run/pg", "postgresql+psycopg://u@/db?host=/run/pg"),
        ("postgresql+psycopg://u@host/db", "postgresql+psycopg://u@host/db"),
        ("postgresql+psycopg2://u@host/db", "postgresql+psycopg2://u@host/db"),  # chosen: kept
        ("sqlite:///tmp/s.db", "sqlite:///tmp/s.db"),
    ],
)
def test_postgresql_urls_without_a_driver_open_with_psycopg_3(given: str, opened: str) -> None:
    assert database_url(given) == opened
    kind = "sqlite" if given.startswith("sqlite") else "postgresql"
    assert url_kind(given) == kind


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_version_2_database_gets_the_lease_columns_and_keeps_its_sessions(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        sqlite_url(tmp_path / "v2.db")
        if kind == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = create_engine(url)
    with engine.begin() as connection:
        migrate(connection, target=2)
        assert _version(connection) == 2
        columns = {c["name"] for c in inspect(connection).get_columns("sessions")}
        assert "lease_until" not in columns
    engine.dispose()
    old = await SqlStore.open(url)  # migrates to the current version
    session = await old.create(CreateSessionParams(title="old"), WORKSPACE)
    await old.aclose()

    engine = create_engine(url)
    with engine.begin() as connection:
        migrate(connection, target=2)  # nothing to do: it is newer
        columns = {c["name"] for c in inspect(connection).get_columns("sessions")}
        version = _version(connection)
    engine.dispose()
    assert version == SCHEMA_VERSION
    assert {"lease_run_id", "lease_holder", "lease_until"} <= columns

    store = await SqlStore.open(url)
    try:
        assert (await store.get(session.session_id)).running is False
        await store.claim_run(session.session_id, "run-1", timedelta(seconds=10))
        assert (await store.get(session.session_id)).running is True
    finally:
        await store.aclose()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_version_3_database_gets_the_compaction_and_output_columns_and_keeps_its_messages(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        sqlite_url(tmp_path / "v3.db")
        if kind == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = create_engine(url)
    with engine.begin() as connection:
        migrate(connection, target=3)
        columns = {c["name"] for c in inspect(connection).get_columns("messages")}
        assert not {"kind", "replaces", "output"} & columns
    engine.dispose()
    store = await SqlStore.open(url)  # migrates
    try:
        session = await store.create(CreateSessionParams(), WORKSPACE)
        [first] = await store.append(session.session_id, [user("old")])
        span = CompactedRange(first_id=first.id, last_id=first.id, count=1)
        summary = MessageInput(role=Role.USER, content="s", kind="compaction", replaces=span)
        await store.append(session.session_id, [summary])
        history = await store.history(session.session_id)
        assert [(m.kind, m.replaces) for m in history] == [(None, None), ("compaction", span)]
        call = {"id": "c1", "name": "lookup", "arguments": "{}"}
        await store.append(
            session.session_id,
            [
                MessageInput(role=Role.ASSISTANT, tool_calls=[ToolCall.model_validate(call)]),
                MessageInput(
                    role=Role.TOOL, tool_call_id="c1", name="lookup", content="2", output={"n": 2}
                ),
            ],
        )
        history = await store.history(session.session_id)
        assert history[-1].output == {"n": 2}
        assert history[-1].name == "lookup"
    finally:
        await store.aclose()


def store_url(kind: str, path: Path, request: pytest.FixtureRequest) -> str:
    """A SQLite file at ``path``, or the test PostgreSQL server."""
    return sqlite_url(path) if kind == "sqlite" else request.getfixturevalue("postgres_url")


def insert_old_session(connection: Connection, **columns: Any) -> None:
    """A session ``old`` as an older schema holds it: the columns every version has, and
    ``columns``."""
    now = datetime.now(UTC)
    connection.execute(
        insert(sessions_table).values(
            id="old",
            workspace=WORKSPACE,
            settings={},
            metadata={},
            state={},
            owner="old",
            base_count=0,
            own_count=0,
            input_tokens=0,
            output_tokens=0,
            created_at=now,
            updated_at=now,
            **columns,
        )
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_version_5_database_gets_the_mode_columns_and_its_sessions_read_ask(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url(kind, tmp_path / "v5.db", request)
    engine = create_engine(url)
    with engine.begin() as connection:
        migrate(connection, target=5)
        columns = {c["name"] for c in inspect(connection).get_columns("sessions")}
        assert not {"mode", "permissions"} & columns
        insert_old_session(connection)
    engine.dispose()
    store = await SqlStore.open(url)  # migrates
    try:
        old = await store.get("old")
        permissions = ToolPermissions(reject_always=["run_command"])
        changed = await store.configure(
            "old",
            ConfigureSessionParams(session_id="old", mode="read_only", permissions=permissions),
        )
    finally:
        await store.aclose()
    assert (old.mode, old.permissions) == ("ask", ToolPermissions())
    assert (changed.mode, changed.permissions) == ("read_only", permissions)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_version_6_database_gets_the_plan_column_and_its_sessions_have_no_plan(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url(kind, tmp_path / "v6.db", request)
    engine = create_engine(url)
    with engine.begin() as connection:
        migrate(connection, target=6)
        assert "plan" not in {c["name"] for c in inspect(connection).get_columns("sessions")}
        insert_old_session(connection)
    engine.dispose()
    store = await SqlStore.open(url)  # migrates
    try:
        old = await store.get("old")
        plan = [PlanEntry(content="Migrate", status="in_progress", priority="low")]
        changed = await store.configure("old", ConfigureSessionParams(session_id="old", plan=plan))
        fork = await store.fork(ForkSessionParams(session_id="old"))
    finally:
        await store.aclose()
    assert old.plan is None
    assert changed.plan == plan == fork.plan


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_version_7_database_gets_the_agent_columns_and_keeps_its_plans(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url(kind, tmp_path / "v7.db", request)
    engine = create_engine(url)
    plan = [PlanEntry(content="Migrate", status="in_progress")]
    with engine.begin() as connection:
        migrate(connection, target=7)
        columns = {c["name"] for c in inspect(connection).get_columns("sessions")}
        assert "plan" in columns and not {"agent", "spawned_by"} & columns
        insert_old_session(connection, plan=[entry.to_wire() for entry in plan])
    engine.dispose()
    store = await SqlStore.open(url)  # migrates
    try:
        old = await store.get("old")
        changed = await store.configure(
            "old", ConfigureSessionParams(session_id="old", agent="reviewer")
        )
    finally:
        await store.aclose()
    assert (old.agent, old.spawned_by, old.plan) == (None, None, plan)
    assert (changed.agent, changed.plan) == ("reviewer", plan)
