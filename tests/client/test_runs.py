"""kernel/run through TetherClient: progress events of the run, its result, and cancelling it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from tether.client import RequestCancelledError, Run, SessionBusyError, TetherClient
from tether.protocol.kernel import (
    MessageDelta,
    ProgressParams,
    RunFinished,
    RunResult,
    RunStarted,
    StopReason,
    ToolCallStarted,
    ToolCallUpdate,
)
from tether.protocol.messages import TextBlock
from tether.testing import tool_call

from .conftest import script

TWO_TURNS = [
    {
        "text": "Let me look.",
        "toolCalls": [
            tool_call("list_files", "c1"),
            tool_call("read_file", "c2", path="README.md"),
        ],
    },
    {"text": "It is a demo project."},
]


async def events_until(run: Run, kind: str) -> list[ProgressParams]:
    """The run's events up to the first of ``kind``."""
    seen = []
    async with asyncio.timeout(20):
        async for progress in run:
            seen.append(progress)
            if progress.event.kind == kind:
                return seen
    raise AssertionError(f"the run ended without {kind}")


async def test_a_run_yields_its_events_in_order_then_its_result(project: Path, tmp_path: Path):
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, TWO_TURNS)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "What is this?")
        events = [progress async for progress in run]
        result = await run
        again = await run.result()
        history = (await client.messages(sid)).messages

    assert isinstance(result, RunResult) and again == result
    assert result.stop_reason is StopReason.END_TURN and result.iterations == 2
    assert result.response == "It is a demo project."
    assert [(c.id, c.name, c.is_error) for c in result.tool_calls] == [
        ("c1", "list_files", False),
        ("c2", "read_file", False),
    ]
    assert run.done and run.run_id == result.run_id
    assert all(isinstance(e, ProgressParams) for e in events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {(e.session_id, e.run_id) for e in events} == {(sid, result.run_id)}
    assert isinstance(events[0].event, RunStarted) and isinstance(events[-1].event, RunFinished)
    assert events[-1].event.stop_reason is StopReason.END_TURN
    assert events[0].event.user_message_id == history[0].id
    text = "".join(e.event.text for e in events if isinstance(e.event, MessageDelta))
    assert text == "Let me look.It is a demo project."
    calls = [e.event for e in events if isinstance(e.event, ToolCallStarted)]
    assert [c.tool_call_id for c in calls] == ["c1", "c2"]
    updates = [e.event for e in events if isinstance(e.event, ToolCallUpdate)]
    assert sorted((u.tool_call_id, u.status) for u in updates if u.status != "in_progress") == [
        ("c1", "completed"),
        ("c2", "completed"),
    ]


async def test_a_run_awaited_first_keeps_its_events_and_a_run_can_be_awaited_directly(
    project: Path, tmp_path: Path
):
    turns = [{"text": "one"}, {"text": "two"}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "a", max_iterations=3, model="m", tools=["read_file"])
        result = await run
        events = [progress async for progress in run]
        second = await client.run(sid, [{"type": "text", "text": "b"}], model="m")
        history = (await client.messages(sid)).messages

    assert result.response == "one" and second.response == "two"
    assert isinstance(events[0].event, RunStarted) and isinstance(events[-1].event, RunFinished)
    assert events[0].event.max_iterations == 3
    assert history[2].content == [TextBlock(text="b")]


async def test_concurrent_runs_on_two_sessions_each_see_only_their_own_events(
    project: Path, tmp_path: Path
):
    turns = [{"text": "answer one", "delay": 0.2}, {"text": "answer two", "delay": 0.2}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        first = (await client.create_session()).session_id
        second = (await client.create_session()).session_id
        runs = [client.run(first, "a"), client.run(second, "b")]

        async def follow(run: Run) -> tuple[list[ProgressParams], RunResult]:
            return [progress async for progress in run], await run

        (events_a, result_a), (events_b, result_b) = await asyncio.gather(*map(follow, runs))

    assert result_a.run_id != result_b.run_id
    for events, result, sid in ((events_a, result_a, first), (events_b, result_b, second)):
        assert {(e.session_id, e.run_id) for e in events} == {(sid, result.run_id)}
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[-1].event.kind == "run_finished"
    assert {result_a.response, result_b.response} == {"answer one", "answer two"}


async def test_of_two_runs_sent_together_on_one_session_the_refused_one_raises_busy(
    project: Path, tmp_path: Path
):
    turns = [{"text": "only one", "delay": 0.2}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        runs = [client.run(sid, "a"), client.run(sid, "b")]
        outcomes = await asyncio.gather(*runs, return_exceptions=True)
        streams: list[list[ProgressParams] | SessionBusyError] = []
        for run in runs:
            try:
                streams.append([progress async for progress in run])
            except SessionBusyError as exc:
                streams.append(exc)

    pairs = list(zip(streams, outcomes, strict=True))
    [(taken, result)] = [(s, o) for s, o in pairs if isinstance(o, RunResult)]
    [(refused, error)] = [(s, o) for s, o in pairs if not isinstance(o, RunResult)]
    assert isinstance(result, RunResult) and result.response == "only one"
    assert isinstance(error, SessionBusyError) and error.session_id == sid
    assert refused is error  # no events: the iterator raises the refusal
    assert isinstance(taken, list)
    assert [e.seq for e in taken] == list(range(1, len(taken) + 1))
    assert {e.run_id for e in taken} == {result.run_id}


async def test_kernel_cancel_ends_the_run_with_a_cancelled_result(project: Path, tmp_path: Path):
    turns = [{"text": "a very long answer " * 20, "delay": 30}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "go")
        before = await events_until(run, "message_delta")
        assert (await client.get_session(sid)).running is True
        assert await client.cancel(sid) is True
        after = [progress async for progress in run]
        result = await run
        assert await client.cancel(sid) is False  # no run going any more

    assert result.stop_reason is StopReason.CANCELLED
    events = before + after
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1].event, RunFinished)
    assert events[-1].event.stop_reason is StopReason.CANCELLED


async def test_run_cancel_raises_request_cancelled_with_the_partial_result(
    project: Path, tmp_path: Path
):
    turns = [{"toolCalls": [tool_call("list_files", "c1")]}, {"text": "slow " * 20, "delay": 30}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "go")
        events = await events_until(run, "iteration_finished")
        events += await events_until(run, "iteration_started")
        run.cancel()
        with pytest.raises(RequestCancelledError) as from_iterator:
            async for progress in run:
                events.append(progress)
        with pytest.raises(RequestCancelledError) as from_result:
            await run
        history = (await client.messages(sid)).messages

    assert from_iterator.value is from_result.value and from_result.value.code == -32800
    partial = from_result.value.partial
    assert isinstance(partial, RunResult)
    assert partial.stop_reason is StopReason.CANCELLED and partial.iterations == 2
    assert [c.id for c in partial.tool_calls] == ["c1"]
    assert events[-1].event.kind == "run_finished"
    assert {e.run_id for e in events} == {partial.run_id}
    assert [m.role for m in history[:3]] == ["user", "assistant", "tool"]


async def test_an_interrupted_wait_for_an_event_loses_nothing(project: Path, tmp_path: Path):
    turns = [{"text": "first part then more", "delay": 0.5}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "go")
        events, interruptions = [], 0
        while True:
            try:
                events.append(await asyncio.wait_for(anext(run), 0.05))
            except TimeoutError:
                interruptions += 1
            except StopAsyncIteration:
                break

    assert interruptions > 0
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].event.kind == "run_finished"


async def test_leaving_the_client_with_a_run_going_cancels_it(project: Path, tmp_path: Path):
    turns = [{"text": "never finished", "delay": 60}]
    async with asyncio.timeout(20):
        async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
            sid = (await client.create_session()).session_id
            run = client.run(sid, "go")
            await events_until(run, "message_delta")
    assert client.returncode == 0
    with pytest.raises(RequestCancelledError):
        await run


async def test_tool_call_updates_report_failures(project: Path, tmp_path: Path):
    turns = [
        {"toolCalls": [tool_call("read_file", "c1", path="missing.txt")]},
        {"text": "no such file"},
    ]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "read it")
        events = [progress async for progress in run]
        result = await run
    updates = [e.event for e in events if isinstance(e.event, ToolCallUpdate)]
    assert [u.status for u in updates] == ["in_progress", "failed"]
    assert updates[-1].error and result.tool_calls[0].is_error


class Forecast(BaseModel):
    city: str
    celsius: int


async def test_a_pydantic_model_as_output_schema_gives_an_instance_of_it(
    project: Path, tmp_path: Path
):
    turns = [
        {"text": '{"city": "Oslo", "celsius": "cold"}'},
        {"text": '{"city": "Oslo", "celsius": -3}'},
    ]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        result = await client.run(sid, "Weather?", output_schema=Forecast, output_retries=1)
    assert result.stop_reason is StopReason.END_TURN and result.iterations == 2
    assert result.output == Forecast(city="Oslo", celsius=-3)


async def test_a_json_schema_as_output_schema_gives_the_json_and_failures_stay_none(
    project: Path, tmp_path: Path
):
    turns = [{"text": "[1]"}]
    schema = {"type": "array", "minItems": 2}
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        result = await client.run(sid, "Numbers?", output_schema=schema, output_retries=0)
    assert result.stop_reason is StopReason.OUTPUT_INVALID
    assert result.output is None and result.output_errors == ["the answer: [1] is too short"]


async def test_compact_summarizes_the_older_turns_of_a_session(project: Path, tmp_path: Path):
    turns = [{"text": "first"}, {"text": "second"}, {"text": "They said hello twice."}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        await client.run(sid, "hello")
        await client.run(sid, "hello again")
        compacted = await client.compact(sid)
        history = (await client.messages(sid)).messages
    assert compacted.compacted and compacted.message is not None
    assert compacted.message.content is not None and "They said hello twice." in str(
        compacted.message.content
    )
    assert [m.kind for m in history] == [None, None, None, None, "compaction"]
