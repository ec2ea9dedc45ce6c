"""Hooks in a kernel in process (real hook commands): what their answers do to a run, and the
edges the end-to-end tests leave out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.kernel.hooks import matches
from tether.protocol.kernel import HookRun, RunStarted, StopReason

from .support import KernelHarness, tool_call


def hooks(**events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"hooks": events, "tools": {"approval": "auto"}}


def hook_events(harness: KernelHarness) -> list[HookRun]:
    return [p.event for p in harness.events if isinstance(p.event, HookRun)]


@pytest.mark.parametrize(
    ("matcher", "name", "expected"),
    [
        ("*", "write_file", True),
        ("write_file", "write_file", True),
        ("write_file", "read_file", False),
        ("*_file", "edit_file", True),
        ("write_file|edit_file", "edit_file", True),
        ("write_file | run_*", "run_command", True),
        ("docs__*", "write_file", False),
        ("Write", "write", False),  # case counts
    ],
)
def test_a_matcher_is_a_glob_with_alternatives(matcher: str, name: str, expected: bool) -> None:
    assert matches(matcher, name) is expected


async def test_a_stop_hook_that_blocks_at_the_last_iteration_ends_the_run_max_iterations(
    tmp_path: Path,
) -> None:
    stop = [{"command": "echo not yet >&2; exit 2"}]
    harness = KernelHarness(tmp_path, [{"text": "Done."}], config=hooks(stop=stop))
    sid = await harness.session()
    result = await harness.run(sid, max_iterations=1)
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    roles = [m.role for m in await harness.store.history(sid)]
    assert roles == ["user", "assistant"]  # no note for a model that is not asked again


async def test_decision_block_in_hook_specific_output_blocks_like_exit_2(tmp_path: Path) -> None:
    answer = '{"hookSpecificOutput": {"decision": "block", "reason": "read-only day"}}'
    pre = [{"command": f"echo '{answer}'", "matcher": "write_file"}]
    turns = [
        {"toolCalls": [tool_call("c1", "write_file", path="a.txt", content="x")]},
        {"text": "Fine."},
    ]
    harness = KernelHarness(tmp_path, turns, config=hooks(pre_tool_use=pre))
    result = await harness.run(await harness.session())
    [record] = result.tool_calls
    assert (record.result, record.is_error) == ("read-only day", True)
    assert not (tmp_path / "a.txt").exists()
    [event] = hook_events(harness)
    assert (event.outcome, event.exit_code, event.message) == ("blocked", 0, "read-only day")


async def test_hooks_of_one_event_run_in_order_and_the_first_block_ends_them(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"
    pre = [
        {"command": f"echo first >> {log}", "name": "first"},
        {"command": f"echo second >> {log}; exit 2", "name": "second"},
        {"command": f"echo third >> {log}", "name": "third"},
    ]
    turns = [{"toolCalls": [tool_call("c1", "read_file", path="x")]}, {"text": "Ok."}]
    harness = KernelHarness(tmp_path, turns, config=hooks(pre_tool_use=pre))
    await harness.run(await harness.session())
    assert log.read_text().split() == ["first", "second"]
    assert [(e.name, e.outcome) for e in hook_events(harness)] == [
        ("first", "ok"),
        ("second", "blocked"),
    ]


async def test_a_hook_that_cannot_start_is_an_error_and_the_run_goes_on(tmp_path: Path) -> None:
    submit = [{"command": "exec /nonexistent/hook", "name": "missing"}]
    harness = KernelHarness(tmp_path, [{"text": "Hi."}], config=hooks(user_prompt_submit=submit))
    result = await harness.run(await harness.session())
    assert result.stop_reason is StopReason.END_TURN
    [event] = hook_events(harness)
    assert event.outcome == "error" and event.exit_code == 127


async def test_without_hooks_the_prompt_is_stored_before_run_started(tmp_path: Path) -> None:
    harness = KernelHarness(tmp_path, [{"text": "Hi."}])
    sid = await harness.session()
    await harness.run(sid)
    started = harness.events[0].event
    assert isinstance(started, RunStarted)
    [user, _] = await harness.store.history(sid)
    assert started.user_message_id == user.id
