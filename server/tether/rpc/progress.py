"""Kernel events on the wire: ``kernel/progress`` notifications, and LSP ``$/progress`` when the
request carried a ``workDoneToken``.

:class:`WorkDoneProgress` is the one place where LSP work-done progress values are built, for
every run that reports on a token: a ``kernel/run`` or ``session/compact`` with a
``workDoneToken``, and the turns of the LSP face's ``tether.ask``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

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
    ThoughtDelta,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.protocol.plans import Plan

Notify = Callable[[str, Any], None]
MAX_REPORT_CHARS = 80  # of a report's message: what a status line shows


class WorkDoneProgress:
    """The ``$/progress`` values of one run: ``begin`` (cancellable) at ``run_started``, a
    ``report`` per model call (``iteration N``), per line of its streamed text (the text of one
    model call never runs into the next's), per tool call (``tool <title>``) and per failed or
    rejected call, at ``compaction_started``, per plan (``plan N/M done``); ``end`` with the stop
    reason at ``run_finished``. A report that would repeat the one before is left out."""

    def __init__(self, title: str = "tether") -> None:
        self.title = title
        self.message = "thinking"  # the latest report, the message of a late begin
        self.final: dict[str, Any] | None = None  # the end value, once the run has ended
        self._line = ""  # the last complete non-blank line of the text being streamed
        self._partial = ""  # the text streamed after that line's end
        self._message_id: str | None = None
        self._calls: dict[str, str] = {}  # tool call id -> its title

    def begin(self, message: str | None = None) -> dict[str, Any]:
        return {
            "kind": "begin",
            "title": self.title,
            "message": message or self.message,
            "cancellable": True,
        }

    def end(self, message: str | None = None) -> dict[str, Any]:
        """The ``end`` value; once sent, the same again (for a token made after the end)."""
        if self.final is None:
            self.final = {"kind": "end"} if message is None else {"kind": "end", "message": message}
        return self.final

    def value(self, event: ProgressEvent) -> dict[str, Any] | None:
        """The value for ``event``, for the events an editor shows (None for the others)."""
        match event:
            case RunStarted():
                return self.begin()
            case IterationStarted(iteration=iteration):
                return self._report(f"iteration {iteration}")
            case MessageDelta():
                return self._report(self._streamed(event))
            case ToolCallStarted(tool_call_id=call_id, name=name, title=title):
                self._calls[call_id] = title or name
                return self._report(f"tool {title or name}")
            case ToolCallUpdate(status=ToolCallStatus.FAILED, error=error, tool_call_id=call_id):
                if error == REJECTED_RESULT:
                    return self._report(f"rejected: {self._calls.get(call_id, call_id)}")
                return self._report(f"failed: {_last_line(error or '')}")
            case ToolCallUpdate():
                return None  # running or done: the call's report already names it
            case CompactionStarted():
                return self._report("summarizing older turns")
            case RunFinished(stop_reason=reason):
                return self.end(str(reason))
            case ThoughtDelta() | IterationFinished() | CompactionFinished():
                return None  # a status line shows what is being written, not the reasoning
            case RunWarning() | Notice() | CheckpointRecorded():
                return None  # not for a status line: kernel/progress carries them
            case HookRun(outcome="blocked", name=name):
                return self._report(f"hook {name} blocked")
            case HookRun():
                return None  # ran through, or failed and told with a notice
            case Plan(entries=entries):
                done = sum(entry.status == "completed" for entry in entries)
                return self._report(f"plan {done}/{len(entries)} done")
            case _:
                assert_never(event)

    def _streamed(self, delta: MessageDelta) -> str:
        """The line of the model's text being written, once ``delta`` is added to it (a new
        model call starts a new text)."""
        if delta.message_id != self._message_id:
            self._message_id, self._line, self._partial = delta.message_id, "", ""
        *lines, self._partial = (self._partial + delta.text).split("\n")
        for line in lines:
            if line.strip():
                self._line = line.strip()
        return _clip(self._partial.strip() or self._line)

    def _report(self, message: str) -> dict[str, Any] | None:
        if not message or message == self.message:
            return None
        self.message = message
        return {"kind": "report", "message": message}


def progress_emitter(
    notify: Notify, work_done_token: str | int | None, progress: WorkDoneProgress | None = None
) -> Callable[[ProgressParams], None]:
    """Sends each event as ``kernel/progress``, and on ``work_done_token`` as ``$/progress``."""
    values = progress or WorkDoneProgress()

    def emit(params: ProgressParams) -> None:
        notify("kernel/progress", params)
        # A sub-agent's events are its own run's: the token reports the parent's run alone.
        if work_done_token is not None and params.parent_run_id is None:
            value = values.value(params.event)
            if value is not None:
                notify("$/progress", {"token": work_done_token, "value": value})

    return emit


def _last_line(text: str) -> str:
    return _clip(text.rstrip().rsplit("\n", 1)[-1].strip())


def _clip(line: str) -> str:
    if len(line) <= MAX_REPORT_CHARS:
        return line
    return "…" + line[-(MAX_REPORT_CHARS - 1) :]
