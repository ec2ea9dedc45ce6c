"""Run leases in every store: claim, renew, release, expiry, and the writes a live lease refuses.

Time is a clock the test moves (no waiting). "Another process" is a second store on the same
database with a holder of its own (SQL stores only: a memory store lives in one process).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
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
from tether.sessions.lease import Holder

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


# --- a holder of this host that is gone ----------------------------------------------------------


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A real process of this host, killed (and waited for) at the end."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def dead(process: subprocess.Popen[bytes], *, reaped: bool = True) -> None:
    """Kill ``process``; not reaped: left a zombie (dead, not waited for)."""
    process.kill()
    if reaped:
        process.wait()
    else:  # waits until it has ended, without reaping it
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)


async def held_by(
    stores: Stores, request: pytest.FixtureRequest, tmp_path: Path, holder: Holder | str
) -> SessionStore:
    """A store of another process on the same database, whose holder is ``holder``."""
    stores.another()  # memory stores: skipped
    encoded = holder if isinstance(holder, str) else holder.encode()
    return await open_store(stores.kind, tmp_path, request, clock=stores.clock, holder=encoded)


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
async def test_a_live_lease_of_a_process_of_this_host_that_is_gone_is_taken_over_at_once(
    stores: Stores,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    child: subprocess.Popen[bytes],
    reaped: bool,
) -> None:
    holder = await held_by(stores, request, tmp_path, Holder.of(child.pid))
    try:
        sid = await new_session(stores.here)
        await holder.claim_run(sid, "run-1", LEASE)
        await holder.append(sid, [user("prompt"), calling("c1")], run_id="run-1")
        with pytest.raises(SessionBusy):
            await stores.here.claim_run(sid, "run-2", LEASE)  # it runs: the lease holds
        dead(child, reaped=reaped)
        assert (await stores.here.get(sid)).running is False
        await stores.here.claim_run(sid, "run-2", LEASE)  # no time has passed
        assert (await stores.here.get(sid)).running is True
        assert await holder.renew_run(sid, "run-1", LEASE) is False
        await stores.here.append(sid, [answering("c1")], run_id="run-2")
        assert [m.run_id for m in await stores.here.history(sid)] == ["run-1"] * 2 + ["run-2"]
    finally:
        await holder.aclose()


async def test_the_writes_a_gone_holders_lease_blocked_go_on(
    stores: Stores, request: pytest.FixtureRequest, tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    holder = await held_by(stores, request, tmp_path, Holder.of(child.pid))
    try:
        sids = [await new_session(stores.here) for _ in range(4)]
        for sid in sids:
            await holder.claim_run(sid, "run-1", LEASE)
            await holder.append(sid, [user("prompt")], run_id="run-1")
        dead(child)
        append, clear, delete, fork = sids
        await stores.here.append(append, [user("after the crash")])
        assert (await stores.here.clear(clear)).message_count == 0
        await stores.here.delete(delete)
        forked = await stores.here.fork(ForkSessionParams(session_id=fork))
        assert forked.message_count == 1
        later = utcnow() + timedelta(days=1)
        swept = await stores.here.expire(later, keep=lambda s: False)
        assert set(swept) == {append, clear, fork, forked.session_id}
    finally:
        await holder.aclose()


async def test_two_processes_that_find_the_same_holder_gone_take_its_lease_once(
    stores: Stores, request: pytest.FixtureRequest, tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    holder = await held_by(stores, request, tmp_path, Holder.of(child.pid))
    try:
        sid = await new_session(stores.here)
        await holder.claim_run(sid, "run-1", LEASE)
        dead(child)
        claimers = [stores.here, stores.another()]
        outcomes = await asyncio.gather(
            *(claimers[i % 2].claim_run(sid, f"run-{i + 2}", LEASE) for i in range(10)),
            return_exceptions=True,
        )
        assert sum(outcome is None for outcome in outcomes) == 1
        refusals = [o for o in outcomes if o is not None]
        assert all(isinstance(o, SessionBusy) for o in refusals)
        winner = f"run-{outcomes.index(None) + 2}"
        assert {busy_data_of(o)["runId"] for o in refusals} == {winner}
    finally:
        await holder.aclose()


def busy_data_of(error: BaseException) -> dict[str, object]:
    assert isinstance(error, SessionBusy) and isinstance(error.data, dict)
    return error.data


def other_host(holder: Holder) -> Holder:
    return dataclasses.replace(holder, host=f"another-boot-id {holder.host}")


def old_form(holder: Holder) -> str:
    return f"host:{holder.pid}:aa"  # what tether wrote before holders named their host


@pytest.mark.parametrize(
    ("form", "dies"),
    [(lambda h: h, False), (other_host, True), (old_form, True)],
    ids=["live-here", "dead-on-another-host", "dead-in-the-old-form"],
)
async def test_a_lease_whose_holder_is_not_known_to_be_gone_holds_until_it_expires(
    stores: Stores,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    child: subprocess.Popen[bytes],
    form: Callable[[Holder], Holder | str],
    dies: bool,
) -> None:
    """A holder that runs; or one of another host (its pid here means nothing), or in the old
    form, even dead: its lease holds until it expires."""
    holder = await held_by(stores, request, tmp_path, form(Holder.of(child.pid)))
    try:
        sid = await new_session(stores.here)
        await holder.claim_run(sid, "run-1", LEASE)
        if dies:
            dead(child)
        with pytest.raises(SessionBusy) as caught:
            await stores.here.claim_run(sid, "run-2", LEASE)
        assert busy_data(caught) == {
            "sessionId": sid,
            "runId": "run-1",
            "holder": "another-process",
        }
        with pytest.raises(SessionBusy):
            await stores.here.append(sid, [user("in between")])
        assert (await stores.here.get(sid)).running is True
        stores.clock.advance(11)
        await stores.here.claim_run(sid, "run-2", LEASE)
    finally:
        await holder.aclose()


async def test_a_process_that_took_the_pid_of_a_gone_holder_holds_nothing(
    stores: Stores, request: pytest.FixtureRequest, tmp_path: Path, child: subprocess.Popen[bytes]
) -> None:
    """The pid runs, but started at another time: it is another process (a pid reused)."""
    reused = Holder.of(child.pid)
    reused = dataclasses.replace(reused, start=reused.start + 1)
    holder = await held_by(stores, request, tmp_path, reused)
    try:
        sid = await new_session(stores.here)
        await holder.claim_run(sid, "run-1", LEASE)
        await stores.here.claim_run(sid, "run-2", LEASE)
    finally:
        await holder.aclose()
