"""Run leases in every store: claim, renew, release, expiry, and the writes a live lease refuses.

Time is a clock the test moves (no waiting). "Another process" is a second store on the same
database with a holder of its own (SQL stores only: a memory store lives in one process).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from tether.protocol import (
    ConfigureSessionParams,
    ErrorCode,
    ForkSessionParams,
    Role,
    RunLeaseLost,
    Session,
    SessionBusy,
    SessionNotFound,
)
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import SessionStore
from tether.sessions.ids import utcnow

from .conftest import STORES, WORKSPACE, Clock, answering, calling, open_store, user

LEASE = timedelta(seconds=10)


@dataclass
class Stores:
    kind: str
    clock: Clock
    here: SessionStore  # this process
    other: SessionStore | None  # another process on the same database (None: memory)

    def another(self) -> SessionStore:
        if self.other is None:
            pytest.skip("a memory store is not shared between processes")
        return self.other


@pytest.fixture(params=STORES)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    clock = Clock()
    here = await open_store(request.param, tmp_path, request, clock=clock, holder="host:1:aa")
    other = None
    if request.param != "memory":
        other = await open_store(request.param, tmp_path, request, clock=clock, holder="host:2:bb")
    yield Stores(request.param, clock, here, other)
    await here.aclose()
    if other is not None:
        await other.aclose()


async def new_session(store: SessionStore) -> str:
    return (await store.create(CreateSessionParams(), WORKSPACE)).session_id


def busy_data(caught: pytest.ExceptionInfo[SessionBusy]) -> dict[str, object]:
    assert caught.value.code == ErrorCode.SESSION_BUSY
    data = caught.value.data
    assert isinstance(data, dict)
    return data


# --- claim, renew, release ----------------------------------------------------------------------


async def test_a_second_claim_is_refused_naming_the_run_and_this_process(stores: Stores) -> None:
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    with pytest.raises(SessionBusy) as caught:
        await store.claim_run(sid, "run-2", LEASE)
    assert busy_data(caught) == {"sessionId": sid, "runId": "run-1", "holder": "this-process"}


async def test_a_claim_from_another_process_is_refused_naming_it(stores: Stores) -> None:
    other = stores.another()
    sid = await new_session(stores.here)
    await stores.here.claim_run(sid, "run-1", LEASE)
    with pytest.raises(SessionBusy) as caught:
        await other.claim_run(sid, "run-2", LEASE)
    assert busy_data(caught) == {"sessionId": sid, "runId": "run-1", "holder": "another-process"}
    assert (await other.get(sid)).running is True


async def test_of_many_concurrent_claims_exactly_one_wins(stores: Stores) -> None:
    sid = await new_session(stores.here)
    claimers = [stores.here] if stores.other is None else [stores.here, stores.other]
    outcomes = await asyncio.gather(
        *(claimers[i % len(claimers)].claim_run(sid, f"run-{i}", LEASE) for i in range(20)),
        return_exceptions=True,
    )
    assert sum(outcome is None for outcome in outcomes) == 1
    assert all(isinstance(o, SessionBusy) for o in outcomes if o is not None)


async def test_claiming_an_unknown_session_raises_session_not_found(stores: Stores) -> None:
    with pytest.raises(SessionNotFound):
        await stores.here.claim_run("no-such-session", "run-1", LEASE)


async def test_running_is_true_while_the_lease_is_held_and_false_after_release(
    stores: Stores,
) -> None:
    store = stores.here
    sid = await new_session(store)
    assert (await store.get(sid)).running is False
    await store.claim_run(sid, "run-1", LEASE)
    assert (await store.get(sid)).running is True
    [listed] = (await store.list_sessions(workspace=None, cursor=None, limit=10)).sessions
    assert listed.running is True
    await store.release_run(sid, "run-1")
    assert (await store.get(sid)).running is False
    await store.claim_run(sid, "run-2", LEASE)  # free again


async def test_a_lease_not_renewed_expires_and_another_run_takes_it_over(stores: Stores) -> None:
    store = stores.here
    claimer = stores.other or store
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    stores.clock.advance(9)
    assert (await store.get(sid)).running is True
    stores.clock.advance(2)
    assert (await store.get(sid)).running is False
    await claimer.claim_run(sid, "run-2", LEASE)
    assert await store.renew_run(sid, "run-1", LEASE) is False
    with pytest.raises(RunLeaseLost) as caught:
        await store.append(sid, [user("late")], run_id="run-1")
    assert busy_data(caught) == {"sessionId": sid, "runId": "run-1", "leaseLost": True}
    await claimer.append(sid, [user("mine")], run_id="run-2")
    assert [m.content for m in await store.history(sid)] == ["mine"]


async def test_renewing_keeps_the_lease_past_its_first_term(stores: Stores) -> None:
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    for _ in range(5):
        stores.clock.advance(6)
        assert await store.renew_run(sid, "run-1", LEASE) is True
    await store.append(sid, [user("still mine")], run_id="run-1")
    with pytest.raises(SessionBusy):
        await (stores.other or store).claim_run(sid, "run-2", LEASE)


async def test_a_lease_that_expired_cannot_be_renewed_even_when_nobody_took_it(
    stores: Stores,
) -> None:
    """Meanwhile others could write (an expired lease protects nothing): the run must stop."""
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    stores.clock.advance(11)
    assert await store.renew_run(sid, "run-1", LEASE) is False
    with pytest.raises(RunLeaseLost):
        await store.append(sid, [user("late")], run_id="run-1")


async def test_releasing_a_lease_the_run_does_not_hold_changes_nothing(stores: Stores) -> None:
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    await store.release_run(sid, "run-2")
    await store.release_run("no-such-session", "run-1")
    assert (await store.get(sid)).running is True
    assert await store.renew_run("no-such-session", "run-1", LEASE) is False


# --- what a live lease refuses ----------------------------------------------------------------


async def test_appends_of_others_are_refused_while_the_run_appends(stores: Stores) -> None:
    store = stores.here
    sid = await new_session(store)
    await store.append(sid, [user("before")])
    await store.claim_run(sid, "run-1", LEASE)
    for writer in filter(None, [store, stores.other]):
        with pytest.raises(SessionBusy) as caught:
            await writer.append(sid, [user("in between")])
        assert busy_data(caught)["runId"] == "run-1"
        assert not isinstance(caught.value, RunLeaseLost)
    await store.append(sid, [user("prompt"), calling("c1")], run_id="run-1")
    await store.append(sid, [answering("c1")], run_id="run-1")
    with pytest.raises(RunLeaseLost):
        await store.append(sid, [user("other run")], run_id="run-2")
    await store.release_run(sid, "run-1")
    await store.append(sid, [user("after")])
    history = await store.history(sid)
    assert [m.content for m in history if m.role is Role.USER] == ["before", "prompt", "after"]
    assert (await store.get(sid)).message_count == 5


async def test_a_run_append_without_a_lease_is_refused(stores: Stores) -> None:
    sid = await new_session(stores.here)
    with pytest.raises(RunLeaseLost):
        await stores.here.append(sid, [user("hi")], run_id="run-1")
    assert await stores.here.history(sid) == []


@pytest.mark.parametrize("method", ["clear", "delete"])
async def test_clear_and_delete_are_refused_while_leased_and_allowed_once_expired(
    stores: Stores, method: str
) -> None:
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    await store.append(sid, [user("prompt")], run_id="run-1")
    for writer in filter(None, [store, stores.other]):
        with pytest.raises(SessionBusy) as caught:
            await getattr(writer, method)(sid)
        assert busy_data(caught)["runId"] == "run-1"
    assert (await store.get(sid)).message_count == 1
    stores.clock.advance(11)  # the holder died: its lease protects nothing any more
    await getattr(stores.other or store, method)(sid)


async def test_a_fork_inside_the_running_turn_is_refused_and_before_it_allowed(
    stores: Stores,
) -> None:
    store = stores.here
    sid = await new_session(store)
    [before] = await store.append(sid, [user("earlier turn")])
    await store.claim_run(sid, "run-1", LEASE)
    assert (await store.fork(ForkSessionParams(session_id=sid))).message_count == 1
    [prompt] = await store.append(sid, [user("prompt")], run_id="run-1")
    for forker in filter(None, [store, stores.other]):
        for at in (prompt.id, None):  # None: the last message, the run's
            with pytest.raises(SessionBusy) as caught:
                await forker.fork(ForkSessionParams(session_id=sid, at_message_id=at))
            assert busy_data(caught)["runId"] == "run-1"
        fork = await forker.fork(ForkSessionParams(session_id=sid, at_message_id=before.id))
        assert fork.message_count == 1 and fork.running is False
    await store.release_run(sid, "run-1")
    fork = await store.fork(ForkSessionParams(session_id=sid, at_message_id=prompt.id))
    assert fork.message_count == 2


async def test_a_sweep_skips_a_leased_session_until_its_lease_expires(stores: Stores) -> None:
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    later = utcnow() + timedelta(days=1)
    for sweeper in filter(None, [store, stores.other]):
        assert await sweeper.expire(later, keep=lambda s: False) == []
    stores.clock.advance(11)
    assert await (stores.other or store).expire(later, keep=lambda s: False) == [sid]


async def test_configure_goes_on_while_leased(stores: Stores) -> None:
    """The run's own state changes (``state_set``) and the client's settings are not refused."""
    store = stores.here
    sid = await new_session(store)
    await store.claim_run(sid, "run-1", LEASE)
    changed: Session = await store.configure(
        sid, ConfigureSessionParams(session_id=sid, title="renamed")
    )
    assert changed.title == "renamed" and changed.running is True
