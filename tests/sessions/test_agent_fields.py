"""A session's agent profile and a sub-agent's origin, in every store."""

from __future__ import annotations

from tether.protocol.sessions import (
    ConfigureSessionParams,
    CreateSessionParams,
    ForkSessionParams,
    SpawnedBy,
)
from tether.sessions import SessionStore

from .conftest import WORKSPACE, user

ORIGIN = SpawnedBy(session_id="parent", run_id="run-1", tool_call_id="call-1")


async def test_a_session_keeps_its_agent_and_where_it_was_spawned(store: SessionStore) -> None:
    made = await store.create(CreateSessionParams(agent="reviewer"), WORKSPACE, spawned_by=ORIGIN)
    assert (made.agent, made.spawned_by) == ("reviewer", ORIGIN)
    got = await store.get(made.session_id)
    assert (got.agent, got.spawned_by) == ("reviewer", ORIGIN)
    listed = await store.list_sessions(workspace=WORKSPACE, cursor=None, limit=10)
    assert [(s.agent, s.spawned_by) for s in listed.sessions] == [("reviewer", ORIGIN)]

    plain = await store.create(CreateSessionParams(), WORKSPACE)
    assert (plain.agent, plain.spawned_by) == (None, None)


async def test_configure_sets_and_clears_the_agent(store: SessionStore) -> None:
    sid = (await store.create(CreateSessionParams(), WORKSPACE)).session_id
    fields = ConfigureSessionParams(session_id=sid, agent="fixer")
    assert (await store.configure(sid, fields)).agent == "fixer"
    assert (
        await store.configure(sid, ConfigureSessionParams(session_id=sid, title="t"))
    ).agent == ("fixer")
    cleared = ConfigureSessionParams(session_id=sid, agent=None)
    assert (await store.configure(sid, cleared)).agent is None


async def test_a_fork_keeps_the_agent_but_is_spawned_by_nothing(store: SessionStore) -> None:
    made = await store.create(CreateSessionParams(agent="reviewer"), WORKSPACE, spawned_by=ORIGIN)
    await store.append(made.session_id, [user("hello")])
    fork = await store.fork(ForkSessionParams(session_id=made.session_id))
    assert (fork.agent, fork.spawned_by) == ("reviewer", None)
