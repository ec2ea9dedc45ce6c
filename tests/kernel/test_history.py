"""What the model is sent of a history whose tool results are out of place."""

from __future__ import annotations

from pathlib import Path

from tether.kernel.history import in_model_order
from tether.protocol import MessageInput, Role, ToolCall

from .support import KernelHarness
from .test_window import answer, calls, result, user


def test_a_history_in_order_is_returned_as_it_is() -> None:
    history = [user(), calls("a", "b"), result("a"), result("b"), answer()]
    assert in_model_order(history) is history


def test_a_result_that_came_after_other_messages_is_sent_right_after_its_call() -> None:
    first, call, later, late = user(), calls("x"), user("meanwhile"), result("x")
    assert in_model_order([first, call, later, late]) == [first, call, late, later]


def test_only_the_first_result_of_a_call_is_sent() -> None:
    call, interrupted, real, next_question = calls("x"), result("x"), result("x"), user()
    history = [user(), call, interrupted, next_question, real]
    assert in_model_order(history)[1:] == [call, interrupted, next_question]


def test_results_are_sent_in_the_order_of_the_calls() -> None:
    call = calls("a", "b")
    b, a = result("b"), result("a")
    assert in_model_order([call, b, a]) == [call, a, b]


async def test_a_run_on_a_session_with_a_late_result_sends_a_valid_history(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "done"}])
    sid = await harness.session()
    call = ToolCall(id="x", name="read_file", arguments="{}")
    await harness.store.append(
        sid,
        [
            MessageInput(role=Role.USER, content="first"),
            MessageInput(role=Role.ASSISTANT, tool_calls=[call]),
            MessageInput(role=Role.USER, content="appended while the call had no result"),
        ],
    )
    await harness.run(sid, "go on")

    sent = harness.provider.requests[0].messages
    assert [(m.role, m.tool_call_id) for m in sent] == [
        (Role.USER, None),
        (Role.ASSISTANT, None),
        (Role.TOOL, "x"),
        (Role.USER, None),
        (Role.USER, None),
    ]
    assert len(await harness.store.history(sid)) == 6  # the session keeps its own order
