"""Forks, expiry, deletion and the per-session fields, against every store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tether.protocol import (
    ConfigureSessionParams,
    ErrorCode,
    InvalidParams,
    Message,
    Session,
    SessionNotFound,
)
from tether.protocol.kernel import Usage
from tether.protocol.sessions import CreateSessionParams, ForkSessionParams
from tether.sessions import MemoryStore, SessionService, SessionStore
from tether.sessions.ids import utcnow

from .conftest import WORKSPACE, answering, calling, user


async def texts(store: SessionStore, session_id: str) -> list[str]:
    return [str(m.content) for m in await store.history(session_id)]


async def fork(store: SessionStore, session_id: str, **fields: object) -> Session:
    return await store.fork(ForkSessionParams(session_id=session_id, **fields))


async def fill(store: SessionStore, session_id: str, *contents: str) -> list[Message]:
    return await store.append(session_id, [user(c) for c in contents])


async def test_a_fork_inherits_the_fields_and_the_history_up_to_the_fork_point(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.configure(
        sid, ConfigureSessionParams(session_id=sid, state={"k": [1]}, allowed_models=["m1"])
    )
    await store.add_usage(sid, Usage(input_tokens=5, output_tokens=7))
    messages = await fill(store, sid, "a", "b", "c")

    child = await fork(store, sid, at_message_id=messages[1].id)

    assert child.session_id != sid
    assert child.parent_session_id == sid
    assert child.forked_from_message_id == messages[1].id
    assert (child.title, child.model, child.system_prompt) == ("first", "m1", "be brief")
    assert child.settings == session.settings and child.metadata == session.metadata
    assert (child.tools, child.allowed_models, child.state) == (["read"], ["m1"], {"k": [1]})
    assert child.usage == Usage() and child.message_count == 2
    assert await store.get(child.session_id) == child
    assert await store.history(child.session_id) == messages[:2]
    page = await store.messages(child.session_id, cursor=None, limit=10, order="desc")
    assert [m.content for m in page.messages] == ["b", "a"] and page.total == 2


async def test_a_fork_without_a_message_id_takes_the_whole_history_and_params_replace_fields(
    store: SessionStore, session: Session
) -> None:
    messages = await fill(store, session.session_id, "a", "b")
    child = await fork(store, session.session_id, title="branch", tools=[], allowed_models=["m2"])
    assert child.forked_from_message_id == messages[-1].id
    assert (child.title, child.tools, child.allowed_models) == ("branch", [], ["m2"])
    assert await texts(store, child.session_id) == ["a", "b"]


async def test_a_fork_may_narrow_the_allow_lists_but_never_widen_them(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.configure(
        sid, ConfigureSessionParams(session_id=sid, tools=["read", "search"], allowed_models=["a"])
    )
    narrower = await fork(store, sid, tools=["search"], allowed_models=[])
    assert (narrower.tools, narrower.allowed_models) == (["search"], [])

    with pytest.raises(InvalidParams) as raised:
        await fork(store, sid, tools=["read", "run_command", "write_file"], allowed_models=["a"])
    error = raised.value
    assert error.code == ErrorCode.INVALID_PARAMS
    assert [(f["field"], f["type"]) for f in error.data["fields"]] == [("tools", "widens")]
    assert error.data["widened"] == {"tools": ["run_command", "write_file"]}
    assert error.data["allowed"] == {"tools": ["read", "search"]}

    with pytest.raises(InvalidParams) as raised:  # null: no limit at all
        await fork(store, sid, tools=None, allowed_models=["a", "b"])
    assert raised.value.data["widened"] == {"tools": None, "allowedModels": ["b"]}
    listed = await store.list_sessions(workspace=None, cursor=None, limit=10)
    assert {s.session_id for s in listed.sessions} == {sid, narrower.session_id}


async def test_a_parent_without_an_allow_list_lets_a_fork_set_any(
    store: SessionStore, session: Session
) -> None:
    child = await fork(store, session.session_id, allowed_models=["x", "y"])
    assert child.allowed_models == ["x", "y"]
    grandchild = await fork(store, child.session_id, allowed_models=["y"])
    assert grandchild.allowed_models == ["y"]
    with pytest.raises(InvalidParams):
        await fork(store, grandchild.session_id, allowed_models=["x"])


async def test_a_fork_of_an_empty_session_is_empty(store: SessionStore, session: Session) -> None:
    child = await fork(store, session.session_id)
    assert child.forked_from_message_id is None and child.message_count == 0
    await fill(store, child.session_id, "x")
    assert await texts(store, child.session_id) == ["x"]
    assert await texts(store, session.session_id) == []


async def test_appending_to_either_side_never_changes_the_other(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    messages = await fill(store, sid, "a", "b", "c")
    child = await fork(store, sid, at_message_id=messages[1].id)

    await fill(store, sid, "parent")
    await fill(store, child.session_id, "child")

    assert await texts(store, sid) == ["a", "b", "c", "parent"]
    assert await texts(store, child.session_id) == ["a", "b", "child"]
    assert (await store.get(child.session_id)).message_count == 3
    assert (await store.get(sid)).message_count == 4


async def test_a_fork_of_a_fork_chains_the_prefixes(store: SessionStore, session: Session) -> None:
    sid = session.session_id
    messages = await fill(store, sid, "a", "b", "c")
    child = await fork(store, sid, at_message_id=messages[1].id)
    child_messages = await fill(store, child.session_id, "d", "e")
    grandchild = await fork(store, child.session_id, at_message_id=child_messages[0].id)
    await fill(store, grandchild.session_id, "f")

    assert grandchild.parent_session_id == child.session_id
    assert await texts(store, grandchild.session_id) == ["a", "b", "d", "f"]
    # a fork point inside an inherited prefix
    early = await fork(store, grandchild.session_id, at_message_id=messages[0].id)
    assert await texts(store, early.session_id) == ["a"]


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_paging_a_fork_walks_across_its_segments(
    store: SessionStore, session: Session, order: str
) -> None:
    sid = session.session_id
    await fill(store, sid, *(f"p{i}" for i in range(7)))
    child = await fork(store, sid)
    await fill(store, child.session_id, *(f"c{i}" for i in range(5)))
    grandchild = await fork(store, child.session_id)
    await fill(store, grandchild.session_id, *(f"g{i}" for i in range(4)))

    seen: list[str] = []
    cursor = None
    while True:
        page = await store.messages(
            grandchild.session_id,
            cursor=cursor,
            limit=3,
            order=order,  # type: ignore[arg-type]
        )
        assert page.total == 16
        seen.extend(str(m.content) for m in page.messages)
        cursor = page.next_cursor
        if cursor is None:
            break
    expected = [*(f"p{i}" for i in range(7)), *(f"c{i}" for i in range(5))]
    expected += [f"g{i}" for i in range(4)]
    assert seen == (expected if order == "asc" else expected[::-1])


async def test_a_fork_answers_tool_calls_of_its_prefix_only(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.append(sid, [user("go"), calling("c1"), answering("c1")])
    child = await fork(store, sid)
    await store.append(sid, [calling("late")])
    await store.append(child.session_id, [answering("c1")])  # a call of the shared prefix
    with pytest.raises(InvalidParams):
        await store.append(child.session_id, [answering("late")])


async def test_forking_inside_a_tool_exchange_is_refused(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    stored = await store.append(
        sid, [user("go"), calling("c1", "c2"), answering("c1"), answering("c2"), user("next")]
    )
    for inside in (stored[1], stored[2]):
        with pytest.raises(InvalidParams) as refused:
            await fork(store, sid, at_message_id=inside.id)
        assert refused.value.code == ErrorCode.INVALID_PARAMS
        assert refused.value.data["fields"][0]["field"] == "atMessageId"
        assert "tool exchange" in refused.value.message
    for complete in (stored[0], stored[3], stored[4]):
        await fork(store, sid, at_message_id=complete.id)


async def test_forking_at_an_unknown_message_is_invalid_params(
    store: SessionStore, session: Session
) -> None:
    other = await store.create(CreateSessionParams(), WORKSPACE)
    [foreign] = await fill(store, other.session_id, "elsewhere")
    for message_id in ("no-such-message", foreign.id):
        with pytest.raises(InvalidParams) as refused:
            await fork(store, session.session_id, at_message_id=message_id)
        assert refused.value.data["fields"][0]["field"] == "atMessageId"
    with pytest.raises(SessionNotFound):
        await fork(store, "no-such-session")


async def test_clearing_or_deleting_the_parent_leaves_the_fork_its_history(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, "a", "b")
    child = await fork(store, sid)
    second = await fork(store, sid)

    await store.clear(sid)
    assert await texts(store, sid) == []
    assert await texts(store, child.session_id) == ["a", "b"]
    await fill(store, sid, "fresh")
    assert await texts(store, child.session_id) == ["a", "b"]

    await store.delete(sid)
    with pytest.raises(SessionNotFound):
        await store.get(sid)
    kept = await store.get(child.session_id)
    assert kept.parent_session_id == sid
    assert await texts(store, child.session_id) == ["a", "b"]
    await store.delete(child.session_id)
    assert await texts(store, second.session_id) == ["a", "b"]


async def test_delete_removes_the_messages_nothing_else_holds(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, "a", "b")
    child = await fork(store, sid)
    await store.delete(child.session_id)
    await store.delete(sid)
    await _assert_no_rows_left(store)


async def _assert_no_rows_left(store: SessionStore) -> None:
    if isinstance(store, MemoryStore):
        assert store._records == {}
        return
    from sqlalchemy import Connection, func, select

    from tether.sessions.sql import SqlStore, metadata

    assert isinstance(store, SqlStore)

    def counts(connection: Connection) -> dict[str, int]:
        return {
            table.name: connection.execute(select(func.count()).select_from(table)).scalar_one()
            for table in metadata.sorted_tables
            if table.name != "schema_version"
        }

    assert set((await store._read(counts)).values()) == {0}


async def test_state_allowed_models_and_usage_are_kept(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.configure(
        sid,
        ConfigureSessionParams(session_id=sid, state={"a": {"b": 1}}, allowed_models=["x", "y"]),
    )
    await store.add_usage(sid, Usage(input_tokens=3, output_tokens=4))
    await store.add_usage(sid, Usage(input_tokens=10, output_tokens=1))
    got = await store.get(sid)
    assert (got.state, got.allowed_models) == ({"a": {"b": 1}}, ["x", "y"])
    assert got.usage == Usage(input_tokens=13, output_tokens=5)
    with pytest.raises(SessionNotFound):
        await store.add_usage("no-such-session", Usage())


async def test_a_session_s_cost_sums_the_runs_whose_cost_was_known(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.add_usage(sid, Usage(input_tokens=3, output_tokens=4))
    assert (await store.get(sid)).usage.cost is None  # no run priced yet: unknown, not 0
    await store.add_usage(sid, Usage(input_tokens=3, output_tokens=4, cost=0.25))
    await store.add_usage(sid, Usage(input_tokens=1, output_tokens=1))  # a model not priced
    await store.add_usage(sid, Usage(input_tokens=1, output_tokens=1, cost=0.5))
    got = (await store.get(sid)).usage
    assert got.cost == pytest.approx(0.75) and got.input_tokens == 8


async def test_expire_deletes_sessions_idle_since_the_cutoff_but_not_the_kept_ones(
    store: SessionStore,
) -> None:
    old = await store.create(CreateSessionParams(title="old"), WORKSPACE)
    running = await store.create(CreateSessionParams(title="running"), WORKSPACE)
    cutoff = utcnow() + timedelta(microseconds=1)
    later = utcnow() + timedelta(seconds=1)
    fresh = await store.create(CreateSessionParams(title="fresh"), WORKSPACE)
    assert fresh.updated_at < later

    removed = await store.expire(cutoff, keep=lambda sid: sid == running.session_id)

    assert removed == [old.session_id]
    with pytest.raises(SessionNotFound):
        await store.get(old.session_id)
    await store.get(running.session_id)
    await store.get(fresh.session_id)


async def test_the_service_sweeps_with_its_clock_and_spares_running_sessions(
    store: SessionStore,
) -> None:
    service = SessionService(store)
    idle = await store.create(CreateSessionParams(), WORKSPACE)
    busy = await store.create(CreateSessionParams(), WORKSPACE)
    await fill(store, idle.session_id, "a")
    await store.claim_run(busy.session_id, "run-1", timedelta(minutes=5))  # the store's clock
    ttl = timedelta(days=30)

    assert await service.sweep(ttl, utcnow() + timedelta(days=29)) == []
    assert await service.sweep(ttl, utcnow() + timedelta(days=31)) == [idle.session_id]
    with pytest.raises(SessionNotFound):
        await store.messages(idle.session_id, cursor=None, limit=10, order="asc")
    await store.release_run(busy.session_id, "run-1")
    assert await service.sweep(ttl, utcnow() + timedelta(days=31)) == [busy.session_id]
