"""One sample of every kind of ``kernel/progress`` event (and of each state a kind branches on),
for the tests that feed a face the whole union: a face that forgets a kind fails them at run time
(its ``assert_never``) as it fails ``make typecheck``."""

from __future__ import annotations

from typing import get_args

from tether.kernel.approval import REJECTED_RESULT
from tether.protocol.kernel import (
    CheckpointRecorded,
    CompactionFinished,
    CompactionStarted,
    HookRun,
    IterationFinished,
    IterationStarted,
    MessageDelta,
    Notice,
    ProgressEvent,
    ProgressParams,
    RunFinished,
    RunStarted,
    RunWarning,
    StopReason,
    ThoughtDelta,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.protocol.plans import Plan, PlanEntry
from tether.protocol.tools import ProposedChange, ToolKind


def progress_event_kinds() -> tuple[type, ...]:
    """The members of the ``ProgressEvent`` union (``Annotated[A | B | ..., discriminator]``)."""
    union, *_ = get_args(ProgressEvent)
    return get_args(union)


def every_progress_event() -> list[ProgressEvent]:
    """A run's events in a plausible order, every kind at least once, every tool call status."""
    return [
        RunStarted(max_iterations=5, user_message_id="u1"),
        RunWarning(code=-32013, message="the workspace config file was left out: bad key"),
        Notice(level="error", message="the MCP server 'x' did not start", data={"source": "x"}),
        CompactionStarted(messages=40, tokens=900),
        CompactionFinished(message_id="c1", messages=40, summary="They fixed the parser."),
        CompactionStarted(messages=50, tokens=1000),
        CompactionFinished(messages=50, error="overloaded"),
        IterationStarted(iteration=1),
        ThoughtDelta(message_id="m1", text="Looking at the file."),
        MessageDelta(message_id="m1", text="Let me edit it.\n"),
        ToolCallStarted(
            tool_call_id="t1",
            name="edit_file",
            arguments='{"path": "a.py"}',
            title="Edit a.py",
            tool_kind=ToolKind.EDIT,
            diff=ProposedChange(path="a.py", old_text="x = 1\n", new_text="x = 2\n"),
        ),
        ToolCallUpdate(tool_call_id="t1", status=ToolCallStatus.PENDING),
        ToolCallUpdate(tool_call_id="t1", status=ToolCallStatus.IN_PROGRESS),
        ToolCallUpdate(tool_call_id="t1", status=ToolCallStatus.IN_PROGRESS, progress="step 1"),
        ToolCallUpdate(
            tool_call_id="t1",
            status=ToolCallStatus.COMPLETED,
            result="edited a.py",
            diff="--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n",
        ),
        Plan(
            entries=[
                PlanEntry(content="Edit a.py", status="completed"),
                PlanEntry(content="Run make", status="in_progress", priority="high"),
                PlanEntry(content="Report", status="pending"),
            ]
        ),
        ToolCallStarted(tool_call_id="t2", name="run_command", arguments="{}", title="Run make"),
        ToolCallUpdate(tool_call_id="t2", status=ToolCallStatus.FAILED, error=REJECTED_RESULT),
        HookRun(
            name="guard",
            event="pre_tool_use",
            outcome="blocked",
            duration_ms=3.5,
            tool_call_id="t3",
            exit_code=2,
            message="no commands on Fridays",
        ),
        HookRun(name="fmt", event="post_tool_use", outcome="ok", duration_ms=1.2, exit_code=0),
        ToolCallStarted(tool_call_id="t3", name="run_command", arguments="{}"),
        ToolCallUpdate(tool_call_id="t3", status=ToolCallStatus.FAILED, error="exit 2"),
        ToolCallStarted(tool_call_id="t4", name="read_file", arguments="{}"),
        ToolCallUpdate(tool_call_id="t4", status=ToolCallStatus.CANCELLED),
        CheckpointRecorded(checkpoint_id="k1", files=["a.py"], skipped=["big.bin"]),
        IterationFinished(iteration=1, tool_calls=4),
        IterationStarted(iteration=2),
        MessageDelta(message_id="m2", text="Done."),
        IterationFinished(iteration=2, tool_calls=0),
        RunFinished(stop_reason=StopReason.END_TURN, iterations=2),
    ]


def every_progress(session_id: str = "s", run_id: str = "r") -> list[ProgressParams]:
    """:func:`every_progress_event` as the ``kernel/progress`` params of one run."""
    return [
        ProgressParams(session_id=session_id, run_id=run_id, seq=seq, event=event)
        for seq, event in enumerate(every_progress_event(), 1)
    ]
