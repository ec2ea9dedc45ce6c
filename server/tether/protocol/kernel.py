"""``kernel/run``, ``kernel/cancel`` and the ``kernel/progress`` events."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Generic, Literal

from pydantic import Field, JsonValue, field_validator
from typing_extensions import TypeVar

from tether.protocol.base import Params, WireModel
from tether.protocol.messages import Content, Message
from tether.protocol.plans import Plan
from tether.protocol.tools import ProposedChange, ToolKind
from tether.protocol.usage import Usage


class StopReason(StrEnum):
    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"  # the model's answer was cut at its output token limit
    REFUSAL = "refusal"  # the model (or the provider's filter) refused to answer
    MAX_ITERATIONS = "max_iterations"
    CANCELLED = "cancelled"
    OUTPUT_INVALID = "output_invalid"  # the answer still failed the outputSchema after retries
    ERROR = "error"  # only in a run_finished event: the kernel/run request answers with an error


class RunParams(Params):
    session_id: str = Field(min_length=1)
    prompt: Content
    max_iterations: int | None = Field(default=None, ge=1, le=1000)
    model: str | None = None
    tools: list[str] | None = None
    author: str | None = Field(
        default=None,
        min_length=1,
        description="the author of the messages the run writes; default: the session's agentId",
    )
    directory: str | None = Field(
        default=None,
        description="the folder inside the workspace the turn works in (relative to its root, or "
        "absolute): the AGENTS.md files from the root down to it are read",
    )
    work_done_token: str | int | None = None
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema the final answer must satisfy; it is returned parsed as `output`",
    )
    output_retries: int | None = Field(
        default=None, ge=0, le=10, description="re-asks after an invalid answer (default 2)"
    )

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, prompt: Content) -> Content:
        if not prompt or (isinstance(prompt, str) and not prompt.strip()):
            raise ValueError("the prompt is empty")
        return prompt


class CompactParams(Params):
    """``session/compact``: summarize the session's older turns now."""

    session_id: str = Field(min_length=1)
    keep_tokens: int | None = Field(
        default=None,
        ge=0,
        description="estimated tokens of recent turns kept as they are (default: half of "
        "`context.max_tokens`, or the last turn when there is no budget)",
    )
    work_done_token: str | int | None = None


class CompactResult(WireModel):
    compacted: bool = Field(description="false: there was nothing old enough to summarize")
    message: Message | None = Field(default=None, description="the compaction message stored")
    run_id: str


class CancelParams(Params):
    session_id: str = Field(min_length=1)


class CancelResult(WireModel):
    cancelled: bool


class ToolCallRecord(WireModel):
    iteration: int
    id: str
    name: str
    arguments: str
    result: str
    is_error: bool = False
    output: JsonValue | None = Field(
        default=None, description="the structured result beside the text, when the tool gave one"
    )


class RunWarning(WireModel):
    """A problem that did not stop the run but that the user should fix: a workspace config file
    that was left out because it is invalid or sets a key it may not (``code`` -32013, ``data``
    ``{key, source}`` as in the error it would have been). Sent after ``run_started`` and kept in
    the run's result."""

    kind: Literal["warning"] = "warning"
    code: int = Field(description="the error code of the problem, e.g. -32013 (ConfigError)")
    message: str
    data: dict[str, Any] | None = None


class Notice(WireModel):
    """Something a person should know about a run that is neither an error of the request nor
    part of a tool call: a source of tools (an MCP server) that failed to start, named with its
    reason in ``data: {source, reason}``, sent after ``run_started``; a hook that failed or timed
    out, sent after its ``hook`` event."""

    kind: Literal["notice"] = "notice"
    level: Literal["info", "warning", "error"] = "warning"
    message: str
    data: dict[str, Any] | None = None


OutputT = TypeVar("OutputT", default=Any)
"""The type of a run's ``output``: ``Any`` on the wire, the output model in the client."""


class RunResult(WireModel, Generic[OutputT]):
    # RunResult[Model] (what the client returns for output_schema=Model) types output as Model

    run_id: str
    session_id: str
    stop_reason: StopReason
    response: str = ""
    iterations: int
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: Usage | None = None
    model: str | None = Field(
        default=None, description="the model the run asked (its usage.cost is for that model)"
    )
    warnings: list[RunWarning] | None = Field(
        default=None, description="problems to fix that did not stop the run (omitted: none)"
    )
    output: OutputT | None = Field(
        default=None, description="with outputSchema: the final answer, parsed and valid"
    )
    output_errors: list[str] | None = Field(
        default=None, description="stopReason output_invalid: why the last answer was refused"
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


class ThoughtDelta(WireModel):
    """A piece of the model's reasoning, streamed before (or between) its answer."""

    kind: Literal["thought_delta"] = "thought_delta"
    message_id: str = Field(description="the assistant message the reasoning leads to")
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
    diff: ProposedChange | None = Field(
        default=None, description="an edit: the change it proposes, before it is approved or run"
    )


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


class CompactionStarted(WireModel):
    """The older turns are being summarized (a model call) before the run goes on."""

    kind: Literal["compaction_started"] = "compaction_started"
    messages: int = Field(description="how many messages the summary is to replace")
    tokens: int = Field(description="their estimated tokens")


class CompactionFinished(WireModel):
    """The summary is stored (``messageId``), or ``error`` says why there is none (the run then
    leaves the oldest turns out of its requests instead)."""

    kind: Literal["compaction_finished"] = "compaction_finished"
    message_id: str | None = None
    messages: int
    summary_tokens: int = Field(default=0, description="estimated tokens of the summary")
    summary: str | None = Field(default=None, description="the summary the model wrote")
    error: str | None = None


HookEventName = Literal[
    "pre_tool_use", "post_tool_use", "user_prompt_submit", "stop", "session_start"
]


class HookRun(WireModel):
    """A configured hook ran (``[[hooks.<event>]]``): ``ok`` (exit 0), ``blocked`` (exit 2, or a
    ``{"decision": "block"}`` answer: ``message`` is the reason the model or the user is given),
    ``error`` (another exit code, or it could not start: a warning, the run goes on) or
    ``timeout`` (killed with its processes once its timeout passed; the run goes on)."""

    kind: Literal["hook"] = "hook"
    name: str = Field(description="the hook's `name`, else its command")
    event: HookEventName
    outcome: Literal["ok", "blocked", "error", "timeout"]
    duration_ms: float = Field(ge=0, description="how long the hook ran, in milliseconds")
    tool_call_id: str | None = Field(
        default=None, description="pre_tool_use and post_tool_use: the call it ran for"
    )
    exit_code: int | None = Field(default=None, description="omitted when it was killed")
    message: str | None = Field(
        default=None, description="blocked: the reason; error or timeout: what went wrong"
    )


class CheckpointRecorded(WireModel):
    """The run changed the workspace's files and tether recorded it: ``session/rewind`` at its
    prompt restores them. Sent again as a later step of the run widens ``files``."""

    kind: Literal["checkpoint"] = "checkpoint"
    checkpoint_id: str
    files: list[str] = Field(default_factory=list, description="the paths changed so far")
    skipped: list[str] | None = Field(
        default=None, description="changed paths a size cap left untracked"
    )


class RunFinished(WireModel):
    kind: Literal["run_finished"] = "run_finished"
    stop_reason: StopReason
    iterations: int
    usage: Usage | None = Field(
        default=None, description="what the run used (as in its result), with its cost if known"
    )


ProgressEvent = Annotated[
    RunStarted
    | IterationStarted
    | MessageDelta
    | ThoughtDelta
    | ToolCallStarted
    | ToolCallUpdate
    | IterationFinished
    | RunFinished
    | RunWarning
    | CompactionStarted
    | CompactionFinished
    | Notice
    | Plan
    | HookRun
    | CheckpointRecorded,
    Field(discriminator="kind"),
]


class ProgressParams(WireModel):
    """The params of a ``kernel/progress`` notification."""

    session_id: str
    run_id: str
    seq: int = Field(ge=1, description="1, 2, 3... within a run")
    event: ProgressEvent
    parent_run_id: str | None = Field(
        default=None, description="a sub-agent's run: the run whose `task` call started it"
    )
    parent_tool_call_id: str | None = Field(
        default=None, description="a sub-agent's run: the `task` call that started it"
    )


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
    diff: ProposedChange | None = Field(
        default=None, description="an edit: the change it proposes (what `allow` lets it make)"
    )


class PermissionResult(WireModel):
    """The answer: ``allow_always`` and ``reject_always`` are remembered with the session
    (``Session.permissions``) for every later call of that tool."""

    outcome: Literal["allow", "allow_always", "reject", "reject_always"]
