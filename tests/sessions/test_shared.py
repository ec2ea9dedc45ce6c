"""Several stores on one database, as several tether processes share one: each has its own
connections (its own pool), so their transactions overlap as those of separate processes do.

Each race is run for many rounds; whatever the interleaving, the end state must be one that a
single process could have produced: a fork holds its whole prefix or was refused because its
parent was gone, no message row outlives every session that holds it, no call fails otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, func, or_, select

from tests.postgres import OwnServer, new_database
from tether.protocol import Message, SessionNotFound
from tether.protocol.sessions import CreateSessionParams, ForkSessionParams
from tether.sessions.ids import utcnow
from tether.sessions.sql import (
    SCHEMA_VERSION,
    SqlStore,
    make_engine,
    messages_table,
    migrate,
    schema_version,
    segments_table,
    sessions_table,
    sqlite_url,
    tool_calls_table,
)

from .conftest import WORKSPACE, answering, calling, user

KINDS = ["sqlite", "sqlite-core", "postgres"]
ROUNDS = {"sqlite": 10, "sqlite-core": 10, "postgres": 40}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def pair(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[SqlStore, SqlStore]]:
    """Two stores on one database."""
    if kind == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = sqlite_url(tmp_path / "shared.db")
    fast = kind == "sqlite"
    one = await SqlStore.open(url, fast=fast)
    two = await SqlStore.open(url, fast=fast)
    yield one, two
    await one.aclose()
    await two.aclose()


def _unheld(connection: Connection) -> dict[str, int]:
    """Rows of messages and tool calls whose owner no session holds or inherits."""

    def count(table: Any) -> int:
        owner = table.c.owner
        held = or_(
            select(sessions_table.c.id).where(sessions_table.c.owner == owner).exists(),
            select(segments_table.c.seq).where(segments_table.c.owner == owner).exists(),
        )
        query = select(func.count()).select_from(table).where(~held)
        return int(connection.execute(query).scalar_one())

    return {"messages": count(messages_table), "tool_calls": count(tool_calls_table)}


async def assert_nothing_unheld(store: SqlStore) -> None:
    assert await store._read(_unheld) == {"messages": 0, "tool_calls": 0}


async def assert_empty(store: SqlStore) -> None:
    def counts(connection: Connection) -> dict[str, int]:
        return {
            table.name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (sessions_table, segments_table, messages_table, tool_calls_table)
        }

    assert await store._read(counts) == dict.fromkeys(
        ("sessions", "segments", "messages", "tool_calls"), 0
    )


async def parent_with_history(store: SqlStore, count: int = 30) -> tuple[str, list[Message]]:
    """A session of ``count`` messages, tool calls among them, some in a prefix it inherits."""
    root = (await store.create(CreateSessionParams(), WORKSPACE)).session_id
    first = await store.append(root, [user("0"), calling("c0"), answering("c0")])
    forked = await store.fork(ForkSessionParams(session_id=root))
    await store.delete(root)  # the fork keeps the prefix: rows of an owner it inherits
    sid = forked.session_id
    rest = await store.append(sid, [user(str(i)) for i in range(3, count)])
    return sid, first + rest


async def outcome(call: Any) -> Any:
    """The result of ``call``, or the SessionNotFound it raised (any other error fails)."""
    try:
        return await call
    except SessionNotFound as exc:
        return exc


@pytest.mark.parametrize("action", ["delete", "clear"])
async def test_a_fork_racing_a_delete_or_clear_of_its_parent_holds_its_whole_prefix(
    pair: tuple[SqlStore, SqlStore], kind: str, action: str
) -> None:
    one, two = pair
    forks_made = 0
    for done in range(ROUNDS[kind] * 10):  # until a fork came first, which is up to chance
        if done >= ROUNDS[kind] and forks_made:
            break
        sid, history = await parent_with_history(one)
        remove = one.delete(sid) if action == "delete" else one.clear(sid)
        forked, _ = await asyncio.gather(
            outcome(two.fork(ForkSessionParams(session_id=sid))), remove
        )
        if isinstance(forked, SessionNotFound):  # the delete came first: nothing to fork
            assert action == "delete"
            continue
        forks_made += 1
        # the fork came first (all 30) or after the clear (none); never a count without rows
        count = forked.message_count
        assert count in (0, len(history))
        for store in (one, two):
            assert await store.history(forked.session_id) == history[:count]
            page = await store.messages(forked.session_id, cursor=None, limit=10, order="desc")
            assert page.total == count and page.messages == history[:count][::-1][:10]
        await assert_nothing_unheld(two)
    assert forks_made > 0


async def test_deleting_a_parent_and_its_fork_at_once_frees_every_row(
    pair: tuple[SqlStore, SqlStore], kind: str
) -> None:
    one, two = pair
    for _ in range(ROUNDS[kind]):
        sid, _ = await parent_with_history(one)
        child = await one.fork(ForkSessionParams(session_id=sid))
        await one.append(child.session_id, [user("own")])
        await asyncio.gather(one.delete(sid), two.delete(child.session_id))
        await assert_empty(two)


async def test_two_sweeps_at_once_delete_every_idle_session_once(
    pair: tuple[SqlStore, SqlStore], kind: str
) -> None:
    one, two = pair
    for _ in range(max(2, ROUNDS[kind] // 8)):
        made = set()
        for _ in range(4):
            sid, _ = await parent_with_history(one, 6)
            child = await one.fork(ForkSessionParams(session_id=sid))
            made |= {sid, child.session_id}
        later = utcnow() + timedelta(hours=1)
        removed_one, removed_two = await asyncio.gather(
            one.expire(later, lambda _: False), two.expire(later, lambda _: False)
        )
        assert set(removed_one) | set(removed_two) == made
        assert not set(removed_one) & set(removed_two)
        await assert_empty(two)


async def test_forks_and_deletes_of_a_family_from_two_stores_leave_no_unheld_rows(
    pair: tuple[SqlStore, SqlStore], kind: str
) -> None:
    """Forks of forks while their parents are deleted and cleared: every survivor is whole."""
    one, two = pair
    for _ in range(max(2, ROUNDS[kind] // 4)):
        sid, history = await parent_with_history(one, 12)
        child = await one.fork(ForkSessionParams(session_id=sid))
        results = await asyncio.gather(
            outcome(two.fork(ForkSessionParams(session_id=child.session_id))),
            outcome(one.fork(ForkSessionParams(session_id=sid))),
            one.delete(sid),
            outcome(two.clear(child.session_id)),
            outcome(one.delete(child.session_id)),
        )
        for made in results[:2]:
            if isinstance(made, SessionNotFound):
                continue
            assert made.message_count in (0, len(history))
            assert await two.history(made.session_id) == history[: made.message_count]
            await one.delete(made.session_id)
        await assert_empty(two)


# --- order ----------------------------------------------------------------------------------


async def pipelined(store: SqlStore, sid: str, name: str, count: int, in_flight: int) -> None:
    """``count`` appends sent in order by one client, ``in_flight`` of them unanswered at once
    (each request starts at once, as the server starts a task per request)."""
    window = asyncio.Semaphore(in_flight)
    sent: list[asyncio.Task[list[Message]]] = []

    async def send(i: int) -> list[Message]:
        try:
            return await store.append(sid, [user(f"{name}{i}")])
        finally:
            window.release()

    for i in range(count):
        await window.acquire()
        sent.append(asyncio.create_task(send(i)))
    await asyncio.gather(*sent)


async def test_pipelined_appends_of_two_stores_commit_in_the_order_sent_and_in_time_order(
    pair: tuple[SqlStore, SqlStore], kind: str
) -> None:
    one, two = pair
    sid = (await one.create(CreateSessionParams(), WORKSPACE)).session_id
    count = 60 if kind == "postgres" else 150
    await asyncio.gather(pipelined(one, sid, "a", count, 8), pipelined(two, sid, "b", count, 8))
    history = await two.history(sid)
    assert len(history) == 2 * count
    for name in "ab":
        sent = [str(m.content) for m in history if str(m.content).startswith(name)]
        assert sent == [f"{name}{i}" for i in range(count)]
    times = [m.created_at for m in history]
    assert times == sorted(times)


# --- opening together -----------------------------------------------------------------------

OPENERS = 6


def fresh_database(kind: str, tmp_path: Path, request: pytest.FixtureRequest, n: int = 0) -> str:
    """The URL of a new, empty database."""
    if kind == "postgres":
        return new_database(request.getfixturevalue("postgres_server"))
    return sqlite_url(tmp_path / f"new{n}.db")


async def open_all_at_once(url: str) -> list[SqlStore]:
    """``OPENERS`` stores opened at once, each on its own thread and connections."""
    opened = await asyncio.gather(*(SqlStore.open(url) for _ in range(OPENERS)))
    return list(opened)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_stores_opening_an_empty_database_at_once_all_open_it(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    for n in range(3):  # a new database each time: the race is in creating the schema
        stores = await open_all_at_once(fresh_database(kind, tmp_path, request, n))
        try:
            sessions = [await s.create(CreateSessionParams(), WORKSPACE) for s in stores]
            listed = await stores[0].list_sessions(workspace=None, cursor=None, limit=100)
            assert {s.session_id for s in listed.sessions} == {s.session_id for s in sessions}
            assert await stores[-1]._read(_version) == SCHEMA_VERSION
        finally:
            for store in stores:
                await store.aclose()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_stores_opening_an_old_database_at_once_migrate_it_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = fresh_database(kind, tmp_path, request)
    engine = make_engine(url)
    with engine.begin() as connection:
        migrate(connection, target=1)
    engine.dispose()

    stores = await open_all_at_once(url)
    try:
        session = await stores[0].create(CreateSessionParams(), WORKSPACE)
        await stores[1].append(session.session_id, [user("after the migration")])
        assert await stores[-1]._read(_version) == SCHEMA_VERSION
        assert await stores[-1]._read(_versions) == 1  # one row: migrated once
    finally:
        for store in stores:
            await store.aclose()


def _version(connection: Connection) -> int:
    return int(connection.execute(select(schema_version.c.version)).scalar_one())


def _versions(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(schema_version)).scalar_one())


# --- a database that restarts -----------------------------------------------------------------


async def test_a_postgresql_restart_between_two_requests_fails_neither(
    own_postgres: OwnServer,
) -> None:
    url = new_database(own_postgres.url)
    store = await SqlStore.open(url)
    other = await SqlStore.open(url)
    try:
        session = await store.create(CreateSessionParams(), WORKSPACE)
        sid = session.session_id
        await store.append(sid, [user("before")])
        await other.get(sid)  # both hold a connection that the restart will close
        own_postgres.restart()
        # every kind of call, each the first on its store's connection since the restart
        appended = await store.append(sid, [user("after")])
        assert [m.content for m in await other.history(sid)] == ["before", "after"]
        own_postgres.restart()
        page = await store.messages(sid, cursor=None, limit=10, order="desc")
        assert page.messages[0] == appended[0]
        child = await other.fork(ForkSessionParams(session_id=sid))
        own_postgres.restart()
        await store.delete(sid)
        assert [m.content for m in await other.history(child.session_id)] == ["before", "after"]
    finally:
        await store.aclose()
        await other.aclose()


async def test_a_page_read_racing_a_clear_sees_the_history_before_or_after_it(
    pair: tuple[SqlStore, SqlStore], kind: str
) -> None:
    one, two = pair
    for _ in range(ROUNDS[kind]):
        sid, history = await parent_with_history(one)
        page, _ = await asyncio.gather(
            two.messages(sid, cursor=None, limit=50, order="desc"), one.clear(sid)
        )
        assert (page.total, page.messages) in ((0, []), (len(history), history[::-1]))


async def test_on_postgresql_reads_are_snapshots_and_writes_read_committed_whatever_the_default(
    postgres_url: str,
) -> None:
    engine = make_engine(postgres_url)
    with engine.connect() as connection:
        name = connection.exec_driver_sql("SELECT current_database()").scalar_one()
        connection.exec_driver_sql(
            f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'serializable'"
        )
        connection.commit()
    engine.dispose()
    store = await SqlStore.open(postgres_url)
    try:

        def level(connection: Connection) -> str:
            return str(connection.exec_driver_sql("SHOW transaction_isolation").scalar_one())

        for _ in range(2):  # each transaction sets its own, whatever the one before had
            assert await store._read(level) == "repeatable read"
            assert await store._write(level) == "read committed"
    finally:
        await store.aclose()
