"""``kernel/run``, ``kernel/cancel`` and the ``kernel/progress`` events."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tether.protocol.base import Params, WireModel
from tether.protocol.messages import Content
from tether.protocol.tools import ToolKind


class StopReason(StrEnum):
    END_TURN = "end_turn"
    MAX_ITERATIONS = "max_iterations"
    CANCELLED = "cancelled"
    ERROR = "error"  # only in a run_finished event: the kernel/run request answers with an error


class RunParams(Params):
    session_id: str = Field(min_length=1)
    prompt: Content
    max_iterations: int | None = Field(default=None, ge=1, le=1000)
    model: str | None = None
    tools: list[str] | None = None
    work_done_token: str | int | None = None

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, prompt: Content) -> Content:
        if not prompt or (isinstance(prompt, str) and not prompt.strip()):
            raise ValueError("the prompt is empty")
        return prompt


class CancelParams(Params):
    session_id: str = Field(min_length=1)


class CancelResult(WireModel):
    cancelled: bool


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0


class ToolCallRecord(WireModel):
    iteration: int
    id: str
    name: str
    arguments: str
    result: str
    is_error: bool = False


class RunWarning(WireModel):
    """A problem that did not stop the run but that the user should fix: a workspace config file
    that was left out because it is invalid or sets a key it may not (``code`` -32013, ``data``
    ``{key, source}`` as in the error it would have been). Sent after ``run_started`` and kept in
    the run's result."""

    kind: Literal["warning"] = "warning"
    code: int = Field(description="the error code of the problem, e.g. -32013 (ConfigError)")
    message: str
    data: dict[str, Any] | None = None


class RunResult(WireModel):
    run_id: str
    session_id: str
    stop_reason: StopReason
    response: str = ""
    iterations: int
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: Usage | None = None
    warnings: list[RunWarning] | None = Field(
        default=None, description="problems to fix that did not stop the run (omitted: none)"
    )


class ToolCallStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunStarted(WireModel):
    kind: Literal["run_started"] = "run_started"
    max_iterations: int
    user_message_id: str


class IterationStarted(WireModel):
    kind: Literal["iteration_started"] = "iteration_started"
    iteration: int


class MessageDelta(WireModel):
    kind: Literal["message_delta"] = "message_delta"
    message_id: str
    text: str


class ToolCallStarted(WireModel):
    kind: Literal["tool_call"] = "tool_call"
    tool_call_id: str
    name: str
    arguments: str
    title: str = Field(
        default="", description="what a person reads: `Read src/app.py`, `Run pytest -q`"
    )
    # ``kind`` names the event, so the tool's kind is ``toolKind`` on the wire.
    tool_kind: ToolKind = Field(
        default=ToolKind.OTHER, description="the tool's kind (other for a tool not on offer)"
    )
    status: Literal[ToolCallStatus.PENDING] = ToolCallStatus.PENDING


class ToolCallUpdate(WireModel):
    kind: Literal["tool_call_update"] = "tool_call_update"
    tool_call_id: str
    status: ToolCallStatus
    result: str | None = None
    error: str | None = None
    diff: str | None = Field(default=None, description="unified diff of what an edit changed")
    progress: str | None = Field(
        default=None, description="a line of progress the running tool reported (in_progress)"
    )


class IterationFinished(WireModel):
    kind: Literal["iteration_finished"] = "iteration_finished"
    iteration: int
    tool_calls: int


class RunFinished(WireModel):
    kind: Literal["run_finished"] = "run_finished"
    stop_reason: StopReason
    iterations: int


ProgressEvent = Annotated[
    RunStarted
    | IterationStarted
    | MessageDelta
    | ToolCallStarted
    | ToolCallUpdate
    | IterationFinished
    | RunFinished
    | RunWarning,
    Field(discriminator="kind"),
]


class ProgressParams(WireModel):
    """The params of a ``kernel/progress`` notification."""

    session_id: str
    run_id: str
    seq: int = Field(ge=1, description="1, 2, 3... within a run")
    event: ProgressEvent


class PermissionToolCall(WireModel):
    id: str
    name: str
    arguments: str
    title: str = Field(default="", description="the same title as the call's `tool_call` event")


class PermissionParams(WireModel):
    """``tool/requestPermission``, a server to client request."""

    session_id: str
    run_id: str
    tool_call: PermissionToolCall
    reason: str | None = Field(
        default=None,
        description="why this call is asked about whatever the policy (a protected path)",
    )


class PermissionResult(WireModel):
    outcome: Literal["allow", "allow_always", "reject"]
