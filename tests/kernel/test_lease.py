"""The kernel's run lease in process: taken before anything is recorded, released however the run
ends, and a run that loses it stops without writing another message."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tether.config import TetherConfig
from tether.kernel.kernel import Kernel
from tether.memory import Memory
from tether.protocol import (
    CreateSessionParams,
    ErrorCode,
    ProviderError,
    RequestCancelled,
    Role,
    RunLeaseLost,
    SessionBusy,
)
from tether.protocol.kernel import ProgressParams, RunParams, RunResult, StopReason
from tether.providers.scripted import ScriptedProvider
from tether.sessions import MemoryStore

from ..sessions.conftest import Clock
from .test_run import Tools, call

RUN_TIMEOUT = 30.0


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        turns: list[dict[str, Any]],
        lease: str = "10s",
        store: type[MemoryStore] = MemoryStore,
    ) -> None:
        self.clock = Clock()
        self.store = store(clock=self.clock)
        self.tools = Tools("first")
        self.events: list[ProgressParams] = []
        self.workspace = tmp_path
        provider = ScriptedProvider(turns)
        config = TetherConfig.model_validate(
            {"provider": {"type": "scripted", "model": "m"}, "sessions": {"lease": lease}}
        )
        self.kernel = Kernel(
            self.store,
            config=lambda workspace: config,
            providers=lambda _: provider,
            tools=self._tools,
            memory=lambda root, paths: Memory(),
        )

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> Tools:
        return self.tools

    async def session(self) -> str:
        params = CreateSessionParams()
        return (await self.store.create(params, self.workspace.as_uri())).session_id

    async def run(self, session_id: str) -> RunResult:
        params = RunParams(session_id=session_id, prompt="go")
        return await asyncio.wait_for(self.kernel.run(params, self.events.append), RUN_TIMEOUT)

    async def started(self) -> None:
        await asyncio.wait_for(self.tools.started.setdefault("first", asyncio.Event()).wait(), 30)


async def test_a_second_run_is_refused_naming_the_first_and_this_process(tmp_path: Path) -> None:
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}, {"text": "done"}])
    sid = await harness.session()
    first = asyncio.ensure_future(harness.run(sid))
    await harness.started()
    with pytest.raises(SessionBusy) as caught:
        await harness.run(sid)
    [run_id] = {e.run_id for e in harness.events}
    assert caught.value.data == {"sessionId": sid, "runId": run_id, "holder": "this-process"}
    assert (await harness.store.get(sid)).running is True
    harness.tools.gate("first").set()
    assert (await first).stop_reason is StopReason.END_TURN
    assert (await harness.store.get(sid)).running is False


async def test_the_lease_is_released_however_the_run_ends(tmp_path: Path) -> None:
    harness = Harness(tmp_path, [{"text": "done"}])  # then the script runs out: a failure
    sid = await harness.session()
    await harness.run(sid)
    assert (await harness.store.get(sid)).running is False
    with pytest.raises(ProviderError):
        await harness.run(sid)
    assert (await harness.store.get(sid)).running is False


async def test_a_run_cancelled_by_its_request_releases_the_lease(tmp_path: Path) -> None:
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}])
    sid = await harness.session()
    params = RunParams(session_id=sid, prompt="go")
    run = asyncio.ensure_future(harness.kernel.run(params, harness.events.append))
    await harness.started()
    run.cancel()
    with pytest.raises(RequestCancelled):
        await run
    assert (await harness.store.get(sid)).running is False


async def test_a_run_whose_lease_was_taken_over_writes_nothing_more_and_fails(
    tmp_path: Path,
) -> None:
    """Suspended past its lease (the clock jumps), the run finds another run in its session."""
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}, {"text": "never"}])
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await harness.started()
    harness.clock.advance(11)
    await harness.store.claim_run(sid, "other-run", timedelta(seconds=10))
    harness.tools.gate("first").set()  # its result comes too late
    with pytest.raises(RunLeaseLost) as caught:
        await run
    [run_id] = {e.run_id for e in harness.events}
    assert caught.value.code == ErrorCode.SESSION_BUSY
    assert caught.value.data == {"sessionId": sid, "runId": run_id, "leaseLost": True}
    finished = harness.events[-1].event
    assert (finished.kind, getattr(finished, "stop_reason", None)) == ("run_finished", "error")
    history = await harness.store.history(sid)
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT]  # no result of its own
    assert (await harness.store.get(sid)).running is True  # the other run's lease stays


async def test_a_renewal_that_finds_the_lease_lost_stops_the_run_at_once(tmp_path: Path) -> None:
    """The run waits on a tool that would never end; the renewal (every third of a one-second
    lease) finds another run holding the session and cancels it."""
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}], lease="1s")
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await harness.started()
    harness.clock.advance(2)
    await harness.store.claim_run(sid, "other-run", timedelta(seconds=60))
    with pytest.raises(RunLeaseLost):
        await run
    assert harness.tools.cancelled == ["first"]
    history = await harness.store.history(sid)
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT]


class CountedRenewals(MemoryStore):
    """A store that counts the renewals of run leases."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.renewals = 0
        self.third = asyncio.Event()  # set at the third renewal

    async def renew_run(self, session_id: str, run_id: str, lease: timedelta) -> bool:
        self.renewals += 1
        if self.renewals == 3:
            self.third.set()
        return await super().renew_run(session_id, run_id, lease)


async def test_a_long_run_renews_its_lease_every_third_of_it_until_it_ends(tmp_path: Path) -> None:
    """A one-second lease is renewed again and again while the run waits on its tool (so the
    run keeps it and goes on), and no more once the run has ended."""
    turns: list[dict[str, Any]] = [{"toolCalls": [call("a", "first")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, lease="1s", store=CountedRenewals)
    store = harness.store
    assert isinstance(store, CountedRenewals)
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await harness.started()
    await asyncio.wait_for(store.third.wait(), RUN_TIMEOUT)
    harness.tools.gate("first").set()
    result = await run
    assert result.stop_reason is StopReason.END_TURN and result.response == "done"
    renewed = store.renewals
    await asyncio.sleep(0.7)  # two renewal periods
    assert store.renewals == renewed


async def test_a_run_that_ends_before_its_first_renewal_leaves_none_behind(tmp_path: Path) -> None:
    harness = Harness(tmp_path, [{"text": "done"}], lease="1s", store=CountedRenewals)
    store = harness.store
    assert isinstance(store, CountedRenewals)
    result = await harness.run(await harness.session())
    assert result.stop_reason is StopReason.END_TURN
    await asyncio.sleep(0.7)  # past the first renewal's time
    assert store.renewals == 0


class SlowClaims(MemoryStore):
    """A store whose claims wait until the test lets them through, and then go through even if
    their caller was cancelled meanwhile: a SQL store's claim runs on a worker thread."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.claiming = asyncio.Event()
        self.go = asyncio.Event()
        self.claimed = asyncio.Event()

    async def claim_run(self, session_id: str, run_id: str, lease: timedelta) -> None:
        self.claiming.set()
        await asyncio.shield(self._claim_when_let(session_id, run_id, lease))

    async def _claim_when_let(self, session_id: str, run_id: str, lease: timedelta) -> None:
        await self.go.wait()
        await super().claim_run(session_id, run_id, lease)
        self.claimed.set()


async def test_a_claim_cancelled_twice_while_it_waits_still_gives_its_lease_back(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, [{"text": "never"}])
    store = harness.kernel._store = SlowClaims(clock=harness.clock)
    sid = (await store.create(CreateSessionParams(), tmp_path.as_uri())).session_id
    run = asyncio.ensure_future(
        harness.kernel.run(RunParams(session_id=sid, prompt="go"), harness.events.append)
    )
    await asyncio.wait_for(store.claiming.wait(), RUN_TIMEOUT)
    run.cancel()
    await asyncio.sleep(0)  # the first cancellation is being handled: now a second one
    run.cancel()
    with pytest.raises((RequestCancelled, asyncio.CancelledError)):
        await run
    store.go.set()  # the claim the store was doing goes through all the same
    await asyncio.wait_for(store.claimed.wait(), RUN_TIMEOUT)
    while harness.kernel._giving_back:  # bounded by the test's timeout
        await asyncio.gather(*harness.kernel._giving_back)
    assert (await store.get(sid)).running is False


async def test_a_cancel_sent_while_the_run_claims_its_lease_stops_it_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, [{"text": "never"}])
    store = harness.kernel._store = SlowClaims(clock=harness.clock)
    sid = (await store.create(CreateSessionParams(), tmp_path.as_uri())).session_id
    run = asyncio.ensure_future(
        harness.kernel.run(RunParams(session_id=sid, prompt="go"), harness.events.append)
    )
    await asyncio.wait_for(store.claiming.wait(), RUN_TIMEOUT)
    assert harness.kernel.cancel(sid) is True  # not "nothing to cancel"
    store.go.set()
    result = await asyncio.wait_for(run, RUN_TIMEOUT)
    assert (result.stop_reason, result.iterations) == (StopReason.CANCELLED, 0)
    assert await store.history(sid) == []
    assert (await store.get(sid)).running is False
    assert harness.kernel.cancel(sid) is False  # nothing left to stop
    assert harness.kernel._handles == {}


async def test_a_handle_cancelled_before_its_claim_never_starts_and_answers_cancelled(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, [{"text": "never"}])
    store = harness.kernel._store = SlowClaims(clock=harness.clock)
    sid = (await store.create(CreateSessionParams(), tmp_path.as_uri())).session_id
    handle = harness.kernel.start(RunParams(session_id=sid, prompt="go"), harness.events.append)
    assert harness.kernel.cancel(sid) is True  # before the run took one step
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    assert (result.stop_reason, result.iterations) == (StopReason.CANCELLED, 0)
    assert not store.claiming.is_set()  # it never asked for the lease
    assert (await store.history(sid), harness.events) == ([], [])
    assert harness.kernel._handles == {}


async def test_a_handle_cancelled_while_its_run_streams_answers_cancelled(tmp_path: Path) -> None:
    harness = Harness(tmp_path, [{"text": "a long answer", "delay": 60}])
    sid = await harness.session()
    started = asyncio.Event()

    def emit(event: ProgressParams) -> None:
        started.set()

    handle = harness.kernel.start(RunParams(session_id=sid, prompt="go"), emit)
    await asyncio.wait_for(started.wait(), RUN_TIMEOUT)
    assert handle.cancel() is True
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    assert result.stop_reason is StopReason.CANCELLED
    assert (await harness.store.get(sid)).running is False
    assert handle.cancel() is False  # it has ended


async def test_cancelling_the_await_of_a_handle_cancels_its_run_with_its_partial_result(
    tmp_path: Path,
) -> None:
    harness = Harness(tmp_path, [{"text": "a long answer", "delay": 60}])
    sid = await harness.session()
    started = asyncio.Event()

    def emit(event: ProgressParams) -> None:
        started.set()

    handle = harness.kernel.start(RunParams(session_id=sid, prompt="go"), emit)
    waiting = asyncio.ensure_future(handle.result())
    await asyncio.wait_for(started.wait(), RUN_TIMEOUT)
    waiting.cancel()
    with pytest.raises(RequestCancelled) as raised:
        await asyncio.wait_for(waiting, RUN_TIMEOUT)
    assert raised.value.data["stopReason"] == "cancelled"
    assert (await harness.store.get(sid)).running is False
