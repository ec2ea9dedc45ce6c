"""The one builder of LSP work-done progress values."""

from __future__ import annotations

from tether.kernel.approval import REJECTED_RESULT
from tether.protocol.kernel import (
    IterationStarted,
    MessageDelta,
    RunFinished,
    RunStarted,
    StopReason,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.rpc.progress import MAX_REPORT_CHARS, WorkDoneProgress


def test_the_text_of_each_model_call_is_reported_apart_a_line_at_a_time() -> None:
    progress = WorkDoneProgress("tether: Explain")
    events = [
        RunStarted(max_iterations=5, user_message_id="u"),
        IterationStarted(iteration=1),
        MessageDelta(message_id="m1", text="Let me look"),
        MessageDelta(message_id="m1", text=" at it.\n"),
        MessageDelta(message_id="m1", text="\n"),
        IterationStarted(iteration=2),
        MessageDelta(message_id="m2", text="It is"),
        MessageDelta(message_id="m2", text=" fine."),
        RunFinished(stop_reason=StopReason.END_TURN, iterations=2),
    ]
    values = [progress.value(event) for event in events]
    assert values[0] == {
        "kind": "begin",
        "title": "tether: Explain",
        "message": "thinking",
        "cancellable": True,
    }
    messages = [value["message"] for value in values[1:] if value is not None]
    assert messages == [
        "iteration 1",
        "Let me look",
        "Let me look at it.",
        "iteration 2",
        "It is",
        "It is fine.",
        "end_turn",
    ]
    assert progress.final == {"kind": "end", "message": "end_turn"}


def test_a_rejected_call_is_reported_by_its_title_and_a_failed_one_by_its_error() -> None:
    progress = WorkDoneProgress()
    progress.value(
        ToolCallStarted(tool_call_id="c1", name="edit_file", arguments="{}", title="Edit a.py")
    )
    rejected = ToolCallUpdate(
        tool_call_id="c1", status=ToolCallStatus.FAILED, error=REJECTED_RESULT
    )
    assert progress.value(rejected) == {"kind": "report", "message": "rejected: Edit a.py"}
    failed = ToolCallUpdate(
        tool_call_id="c2", status=ToolCallStatus.FAILED, error="boom\nno such file"
    )
    assert progress.value(failed) == {"kind": "report", "message": "failed: no such file"}


def test_a_long_line_is_cut_to_its_end_and_a_repeated_report_is_left_out() -> None:
    progress = WorkDoneProgress()
    long_line = "x" * (MAX_REPORT_CHARS + 20)
    value = progress.value(MessageDelta(message_id="m", text=long_line))
    assert value is not None and len(value["message"]) == MAX_REPORT_CHARS
    assert value["message"].startswith("…")
    assert progress.value(MessageDelta(message_id="m", text="\n")) is None


def test_every_kind_of_event_has_a_value_and_the_run_begins_and_ends_once() -> None:
    from tests.events import every_progress_event

    progress = WorkDoneProgress()
    values = [value for e in every_progress_event() if (value := progress.value(e)) is not None]
    assert [value["kind"] for value in values[:1] + values[-1:]] == ["begin", "end"]
    assert all(value["kind"] == "report" for value in values[1:-1])
    assert {"summarizing older turns", "rejected: Run make", "failed: exit 2", "plan 1/3 done"} <= {
        value["message"] for value in values[1:-1]
    }
