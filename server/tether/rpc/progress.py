"""Kernel events on the wire: ``kernel/progress`` notifications, and LSP ``$/progress`` when the
request carried a ``workDoneToken``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.protocol.kernel import (
    CompactionStarted,
    IterationStarted,
    ProgressEvent,
    ProgressParams,
    RunFinished,
    RunStarted,
    ToolCallStarted,
)

Notify = Callable[[str, Any], None]


def progress_emitter(
    notify: Notify, work_done_token: str | int | None
) -> Callable[[ProgressParams], None]:
    def emit(params: ProgressParams) -> None:
        notify("kernel/progress", params)
        if work_done_token is not None:
            value = work_done_value(params.event)
            if value is not None:
                notify("$/progress", {"token": work_done_token, "value": value})

    return emit


def work_done_value(event: ProgressEvent) -> dict[str, Any] | None:
    """The LSP work-done progress value for a kernel event, for those an editor shows."""
    match event:
        case RunStarted():
            return {"kind": "begin", "title": "tether", "message": "thinking", "cancellable": True}
        case IterationStarted(iteration=iteration):
            return {"kind": "report", "message": f"iteration {iteration}"}
        case ToolCallStarted(name=name):
            return {"kind": "report", "message": f"tool {name}"}
        case CompactionStarted():
            return {"kind": "report", "message": "summarizing older turns"}
        case RunFinished(stop_reason=reason):
            return {"kind": "end", "message": str(reason)}
        case _:
            return None
