"""One ``kernel/run``: observe → think → act until the model answers, runs out of iterations, or
is cancelled.

Each iteration is one step that returns what comes next (:class:`RunAgain` or :class:`Final`);
cancellation arrives as ``CancelledError`` wherever the run is waiting and ends it as
``cancelled``. Whatever happens, the session stays valid for the model: every assistant tool call
that was persisted gets a result, and a cancelled call is recorded as the error result
"cancelled". A run that fails (the provider gave up) keeps what it persisted, and its calls get
results too. A run whose lease on the session was lost (see :mod:`tether.kernel.kernel`) cannot
write any more: it ends in error (``RunLeaseLost``), and the calls it leaves without results are
answered "interrupted" by the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, assert_never

from tether.kernel import compaction, structured
from tether.kernel.approval import Gate
from tether.kernel.checkpoints import RunCheckpoints
from tether.kernel.history import in_model_order
from tether.kernel.hooks import Hooks, tool_input
from tether.kernel.subagents import TASK_TOOL, Subagents, add_child_usage
from tether.kernel.window import HistoryWindow, TokenCounter
from tether.protocol import (
    Content,
    Message,
    MessageInput,
    PromptRefused,
    Role,
    RunLeaseLost,
    TextBlock,
    ToolCall,
)
from tether.protocol.kernel import (
    IterationFinished,
    IterationStarted,
    MessageDelta,
    Notice,
    ProgressEvent,
    ProgressParams,
    RunFinished,
    RunResult,
    RunStarted,
    RunWarning,
    StopReason,
    ToolCallRecord,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.protocol.kernel import ThoughtDelta as Thought
from tether.protocol.messages import (
    CANCELLED_KEY,
    DIFF_KEY,
    HOOK_KEY,
    REASONING_KEY,
    STOP_REASON_KEY,
    TOOL_KINDS_KEY,
    USAGE_KEY,
    kept_reasoning,
)
from tether.protocol.tools import ProposedChange, ToolKind, ToolSpec
from tether.protocol.usage import Usage
from tether.providers import prices
from tether.providers.base import Completion, ModelRequest, Provider, TextDelta, ThoughtDelta
from tether.sessions.ids import uuid7
from tether.sessions.store import SessionStore
from tether.tools.base import ToolContext, ToolExecutor, ToolResult
from tether.tools.titles import call_title

if TYPE_CHECKING:
    from tether.telemetry import RunTelemetry

logger = logging.getLogger(__name__)
Emit = Callable[[ProgressParams], None]


@dataclass
class _Streaming:
    """The model call under way: its message's id, and the answer and reasoning streamed so far
    (kept when the run is cancelled before the call completes)."""

    message_id: str
    text: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)


def add_usage(total: Usage, turn: Usage) -> Usage:
    """``total`` with one model turn's usage added: counts are summed (an optional count stays
    unknown until a turn reports it); the context size is the latest turn's."""

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return Usage(
        input_tokens=total.input_tokens + turn.input_tokens,
        output_tokens=total.output_tokens + turn.output_tokens,
        reasoning_tokens=plus(total.reasoning_tokens, turn.reasoning_tokens),
        cached_tokens=plus(total.cached_tokens, turn.cached_tokens),
        context_tokens=turn.context_tokens or total.context_tokens,
    )


def cancelling() -> bool:
    """Whether the current task was asked to stop (``kernel/cancel``, a lost lease, the
    request's own cancellation). A ``CancelledError`` raised while it was not came from inside
    (a library that ended a wait of its own so): it is no cancellation of the run."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def not_cancelled(what: str) -> RuntimeError:
    """The error a ``CancelledError`` that nobody asked for becomes: a run never ends
    ``cancelled`` unless it was cancelled."""
    logger.error("%s ended with a cancellation nobody asked for", what, exc_info=True)
    return RuntimeError(f"{what} was interrupted from inside (no one cancelled it)")


CANCELLED_RESULT = "cancelled"
# A final answer the provider ended so (its finish reason, in the words every provider maps its
# own to) is not a whole answer: the run stops saying why, and no output schema judges it.
CUT_ANSWERS = {"length": StopReason.MAX_TOKENS, "content_filter": StopReason.REFUSAL}
INTERRUPTED_RESULT = "interrupted"
RESTARTED = "it is started again at the next run"


@dataclass(frozen=True)
class RunAgain:
    """The model called tools: their results are in; ask it again."""


@dataclass(frozen=True)
class Final:
    stop_reason: StopReason


Step = RunAgain | Final


@dataclass
class LeaseState:
    """Whether the run still holds its session's lease (set by the kernel's renewal)."""

    lost: bool = False


@dataclass(kw_only=True)
class RunSetup:
    """Everything a run is given, resolved from configuration, session and request."""

    session_id: str
    store: SessionStore
    provider: Provider
    tools: ToolExecutor
    tool_specs: Sequence[ToolSpec]
    context: ToolContext
    model: str
    system: str | None
    max_iterations: int
    history: list[Message]
    emit: Emit
    approval: Gate
    settings: dict[str, object] = field(default_factory=dict)
    window: HistoryWindow | None = None  # None: every request carries the whole history
    # Over the window: the oldest turns are summarized, counted with this (None: left out).
    compaction: TokenCounter | None = None
    output: structured.OutputCheck | None = None  # kernel/run outputSchema
    warnings: Sequence[RunWarning] = ()  # sent after run_started, kept in the result
    lease: LeaseState = field(default_factory=LeaseState)
    author: str | None = None  # of the assistant and tool messages the run writes
    hooks: Hooks | None = None  # the user's [[hooks.*]]; None: none configured
    subagents: Subagents | None = None  # runs the ``task`` calls; None: ``task`` is not offered
    parent: tuple[str, str] | None = None  # a sub-agent's: its parent's run and task call ids
    checkpoints: RunCheckpoints | None = None  # records what edit and execute calls change
    prompt_metadata: dict[str, Any] | None = None  # of the user message (a slash command's)
    # Which of the executor's tools the run offers (the session's, the request's and the mode's
    # choice), applied again when a source's tools change mid-run (ToolExecutor.refreshed).
    offer: Callable[[list[ToolSpec]], list[ToolSpec]] = list
    telemetry: RunTelemetry | None = None  # its spans (tether.kernel.tracing); None: untraced


class Run:
    def __init__(self, setup: RunSetup) -> None:
        self._setup = setup
        self.run_id = setup.context.run_id
        self._history = setup.history  # the session's history; grows as the run persists messages
        self._view = self._history  # what requests are built from (compaction.compacted_view)
        self._turn_start = 0  # where this run's prompt is in the view
        self._window = setup.window
        self._compaction_failed = False
        self._allowed = {spec.name: spec for spec in setup.tool_specs}
        self._seq = 0
        self.iterations = 0
        self._started = time.perf_counter()  # set again as the run starts
        self.response = ""
        self.records: list[ToolCallRecord] = []
        self.usage = Usage()
        self._calls: list[Usage] = []  # the usage of each model call, priced as the run ends
        self.output: object = None
        self.output_errors: list[str] | None = None
        self._unanswered: list[ToolCall] = []  # persisted calls still waiting for their result
        self._results: dict[str, ToolResult] = {}
        self._kinds: dict[str, ToolKind] = {}  # tool call id -> the kind its tool_call said
        self._streaming: _Streaming | None = None  # an answer not yet persisted
        self._prompt_id = ""  # the run's user message
        self._hooks = setup.hooks
        self._hook_blocked: dict[str, ToolResult] = {}  # call id -> a pre_tool_use block
        self._hook_context: dict[str, str] = {}  # call id -> what pre_tool_use hooks added
        self._stop_hook_active = False  # a stop hook already kept the run going

    @property
    def prompt_screened(self) -> bool:
        """Whether a ``user_prompt_submit`` hook may refuse the prompt."""
        return self._hooks is not None and self._hooks.has("user_prompt_submit")

    async def execute(self, prompt: Content) -> RunResult:
        """The whole run; cancellation ends it with ``stopReason: "cancelled"``."""
        telemetry = self._setup.telemetry
        if telemetry is None:
            return await self._execute(prompt)
        with telemetry.run(prompt_text(prompt)) as span:
            result = await self._execute(prompt)
            span.finished(result)
            return result

    async def _execute(self, prompt: Content) -> RunResult:
        await self._answer_dangling_calls()
        self._history = self._view = in_model_order(self._history)
        user_id = self._prompt_id = uuid7()
        if self._hooks is None:  # stored before run_started (with hooks, once they let it in)
            await self._start_turn(prompt, user_id)
        self._started = time.perf_counter()
        logger.debug(
            "run %s of session %s started (model %s, at most %d iterations)",
            self.run_id,
            self._setup.session_id,
            self._setup.model,
            self._setup.max_iterations,
        )
        self._emit(RunStarted(max_iterations=self._setup.max_iterations, user_message_id=user_id))
        for warning in self._setup.warnings:
            self._emit(warning)
        redact = self._setup.context.secrets.redact
        for failure in self._setup.tools.failures():
            self._emit(
                Notice(
                    message=redact(f"{failure.describe()}; {RESTARTED}"),
                    data={"source": failure.source, "reason": redact(failure.reason)},
                )
            )
        try:
            if self._hooks is not None:
                await self._start_turn(
                    prompt, user_id, *await self._prompt_hooks(self._hooks, prompt)
                )
            stop = await self._loop()
        except asyncio.CancelledError:
            if not cancelling():
                await self._fail(not_cancelled("the run"))
            stop = await self._stop_cancelled()
        except BaseException as exc:
            await self._fail(exc)
        await self._add_usage()
        self._log_end(stop.value)
        self._emit(RunFinished(stop_reason=stop, iterations=self.iterations, usage=self.usage))
        return self.result(stop)

    def _log_end(self, stop: str, error: BaseException | None = None) -> None:
        logger.debug(
            "run %s of session %s ended: %s after %d iterations in %.0f ms%s",
            self.run_id,
            self._setup.session_id,
            stop,
            self.iterations,
            (time.perf_counter() - self._started) * 1000,
            f" ({type(error).__name__})" if error is not None else "",
        )

    async def _start_turn(
        self,
        prompt: Content,
        user_id: str,
        before: Sequence[MessageInput] = (),
        after: Sequence[MessageInput] = (),
    ) -> None:
        """Store the prompt (with what hooks added around it), and start the view there."""
        user = MessageInput(role=Role.USER, content=prompt, metadata=self._setup.prompt_metadata)
        messages = [*before, user, *after]
        ids = [uuid7() for _ in before] + [user_id] + [uuid7() for _ in after]
        stored = await self._persist(messages, ids=ids)
        self._view = compaction.compacted_view(self._history)
        self._turn_start = len(self._view) - len(stored)
        if self._window is not None:
            self._window.index(self._view)  # counts the history once, as the run starts

    async def _prompt_hooks(
        self, hooks: Hooks, prompt: Content
    ) -> tuple[list[MessageInput], list[MessageInput]]:
        """``session_start`` (before a session's first prompt) and ``user_prompt_submit``: the
        context they add, as system messages before and after the prompt. ``PromptRefused`` when
        a ``user_prompt_submit`` hook blocks (a ``session_start`` hook cannot block)."""
        before: list[MessageInput] = []
        if not self._history:
            started = await hooks.run("session_start", {"source": "startup"}, self._emit)
            before = _hook_messages(started.context, "session_start")
        submitted = await hooks.run(
            "user_prompt_submit", {"prompt": prompt_text(prompt)}, self._emit
        )
        if submitted.blocked is not None:
            raise PromptRefused(submitted.blocked_by or "", submitted.blocked)
        return before, _hook_messages(submitted.context, "user_prompt_submit")

    async def _stop_cancelled(self) -> StopReason:
        """Cancelled: the unfinished calls get "cancelled". Cancelled because the lease was
        lost: the run fails instead (it may not write)."""
        if self._setup.lease.lost:
            await self._fail(RunLeaseLost(self._setup.session_id, self.run_id))
        try:
            await self._record_cancelled_calls()
            await self._keep_cut_answer()
        except RunLeaseLost as lost:
            await self._fail(lost)
        return StopReason.CANCELLED

    async def _keep_cut_answer(self) -> None:
        """The text an answer streamed before the run was cancelled is kept, as the user saw
        it: an assistant message with ``metadata.cancelled`` (its id the one the deltas named)."""
        streaming, self._streaming = self._streaming, None
        if streaming is None or not "".join(streaming.text):
            return
        metadata: dict[str, Any] = {CANCELLED_KEY: True}
        if reasoning := "".join(streaming.thoughts):
            metadata[REASONING_KEY] = kept_reasoning(reasoning)
        cut = MessageInput(
            role=Role.ASSISTANT,
            content="".join(streaming.text),
            metadata=metadata,
            author=self._setup.author,
        )
        await self._persist([cut], ids=[streaming.message_id])

    async def _fail(self, error: BaseException) -> NoReturn:
        """End with ``error``: the calls get results (unless the lease is lost: the run's writes
        are refused, and the next run answers them "interrupted"), the usage is added, and
        ``run_finished`` says ``error``."""
        if not (self._setup.lease.lost or isinstance(error, RunLeaseLost)):
            try:
                await self._record_cancelled_calls()
            except RunLeaseLost as lost:
                error = lost
        await self._add_usage()
        self._log_end(StopReason.ERROR.value, error)
        self._emit(
            RunFinished(stop_reason=StopReason.ERROR, iterations=self.iterations, usage=self.usage)
        )
        raise error

    def result(self, stop: StopReason) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            session_id=self._setup.session_id,
            stop_reason=stop,
            response=self.response,
            iterations=self.iterations,
            tool_calls=self.records,
            usage=self.usage,
            model=self._setup.model or None,
            warnings=list(self._setup.warnings) or None,
            output=self.output,
            output_errors=self.output_errors if stop is StopReason.OUTPUT_INVALID else None,
        )

    async def _loop(self) -> StopReason:
        while self.iterations < self._setup.max_iterations:
            step = await self._iterate()
            match step:
                case RunAgain():
                    continue
                case Final(stop_reason=reason):
                    return reason
                case _:
                    assert_never(step)
        return StopReason.MAX_ITERATIONS

    async def _iterate(self) -> Step:
        self.iterations += 1
        self._emit(IterationStarted(iteration=self.iterations))
        message_id = uuid7()
        completion = await self._think(message_id)
        self._streaming = None
        calls = completion.tool_calls
        self.response = completion.content or ""
        content = completion.content or (None if calls else "")  # an empty answer is still one
        assistant = MessageInput(
            role=Role.ASSISTANT,
            content=content,
            tool_calls=calls or None,
            metadata=self._assistant_metadata(completion),
            author=self._setup.author,
        )
        await self._persist([assistant], ids=[message_id])
        self._unanswered = list(calls)
        if not calls:
            self._emit(IterationFinished(iteration=self.iterations, tool_calls=0))
            cut = CUT_ANSWERS.get(completion.finish_reason or "")
            if cut is not None:
                return Final(cut)
            if self._hooks is not None and (kept := await self._stop_hooks(self._hooks)):
                return kept
            return await self._final_answer()
        await self._act(calls)
        await self._persist_results()
        self._emit(IterationFinished(iteration=self.iterations, tool_calls=len(calls)))
        return RunAgain()

    def _assistant_metadata(self, completion: Completion) -> dict[str, Any] | None:
        """What the provider needs sent back (thinking blocks), and what a replay needs: the
        reasoning that streamed (``reasoning``, never sent to a model), the kind of each tool
        called (``toolKinds``, but ``other``), the usage of this model call, and why the run ends
        on it when the model cut it short (``stopReason``)."""
        metadata = dict(completion.metadata or {})
        if completion.reasoning:
            metadata[REASONING_KEY] = kept_reasoning(completion.reasoning)
        for call in completion.tool_calls:
            spec = self._allowed.get(call.name)
            self._kinds[call.id] = spec.kind if spec is not None else ToolKind.OTHER
        kinds = {c.id: str(self._kinds[c.id]) for c in completion.tool_calls}
        kinds = {call_id: kind for call_id, kind in kinds.items() if kind != ToolKind.OTHER}
        if kinds:  # other, the default, is not stored
            metadata[TOOL_KINDS_KEY] = kinds
        if completion.usage is not None:
            metadata[USAGE_KEY] = completion.usage.to_wire()
        cut = CUT_ANSWERS.get(completion.finish_reason or "")
        if cut is not None and not completion.tool_calls:  # the run ends on it, saying why
            metadata[STOP_REASON_KEY] = str(cut)
        return metadata or None

    async def _stop_hooks(self, hooks: Hooks) -> Step | None:
        """``stop``: a hook that blocks has the model told its reason (a user message) and the
        run go on, while iterations are left (else the run ends ``max_iterations``)."""
        verdict = await hooks.run(
            "stop",
            {"stop_hook_active": self._stop_hook_active, "response": self.response},
            self._emit,
        )
        if verdict.blocked is None:
            return None
        if self.iterations >= self._setup.max_iterations:
            return Final(StopReason.MAX_ITERATIONS)
        self._stop_hook_active = True
        note = MessageInput(
            role=Role.USER,
            content=f"A stop hook did not let the run end: {verdict.blocked}",
            metadata={HOOK_KEY: "stop"},
        )
        await self._persist([note])
        return RunAgain()

    async def _final_answer(self) -> Step:
        """The run ends, unless its answer fails the output schema and may be asked again."""
        check = self._setup.output
        if check is None:
            return Final(StopReason.END_TURN)
        value, errors = check.parse(self.response)
        if not errors:
            self.output, self.output_errors = value, None
            return Final(StopReason.END_TURN)
        self.output_errors = errors
        if check.retries <= 0:
            return Final(StopReason.OUTPUT_INVALID)
        check.retries -= 1
        await self._persist([MessageInput(role=Role.USER, content=structured.retry_prompt(errors))])
        return RunAgain()

    def _request_messages(self) -> Sequence[Message]:
        """The history, or as much of it as the window lets the request carry."""
        window = self._window
        if window is None:
            return self._view
        return window.messages(self._view, self._turn_start)

    async def _fitting_messages(self) -> Sequence[Message]:
        """What the request carries: when the window would leave turns out, they are
        summarized first (when the run compacts and no compaction of it failed yet)."""
        messages = self._request_messages()
        window = self._window
        if window is None or not window.left_out or self._setup.compaction is None:
            return messages
        if not self._compaction_failed and await self._compact(window, self._setup.compaction):
            return self._request_messages()
        return messages

    async def _compact(self, window: HistoryWindow, counter: TokenCounter) -> bool:
        """Summarize the oldest turns, keeping recent ones worth half the budget; False when
        there was nothing to summarize or the summary failed (the run then leaves turns out)."""
        plan = compaction.plan(self._view, self._turn_start, window.budget // 2, counter)
        if plan is None:
            return False
        kept = self._view[len(plan.replaced) :]  # before the summary joins the history
        summarizer = compaction.Summarizer(
            self._setup.provider, self._setup.model, counter, window.max_tokens, self.usage
        )
        try:
            stored = await compaction.compact(
                plan, summarizer, self._persist_compaction, self._emit
            )
            self._calls.extend(summarizer.calls)
        except (RunLeaseLost, asyncio.CancelledError):
            raise
        except Exception:
            logger.warning("compaction failed; the oldest turns are left out", exc_info=True)
            self._compaction_failed = True
            return False
        self._turn_start -= len(plan.replaced) - 1
        self._view = [stored, *kept]
        self._window = window.fresh()
        self._window.index(self._view)
        return True

    async def _persist_compaction(self, message: MessageInput) -> Message:
        stored = await self._setup.store.append(
            self._setup.session_id, [message], run_id=self.run_id
        )
        self._history.extend(stored)  # not in the view: the caller puts it in place
        return stored[0]

    async def _offer_changed_tools(self) -> None:
        """A source said its tools changed (MCP ``tools/list_changed``): the next model call
        sees the new list."""
        specs = await self._setup.tools.refreshed()
        if specs is None:
            return
        self._setup.tool_specs = self._setup.offer(list(specs))
        self._allowed = {spec.name: spec for spec in self._setup.tool_specs}

    async def _think(self, message_id: str) -> Completion:
        await self._offer_changed_tools()
        telemetry = self._setup.telemetry
        if telemetry is None:
            return await self._ask_model(message_id)
        with telemetry.chat() as span:
            completion = await self._ask_model(message_id)
            span.finished(completion)
            return completion

    async def _ask_model(self, message_id: str) -> Completion:
        setup = self._setup
        native = setup.output is not None and setup.provider.native_output
        request = ModelRequest(
            model=setup.model,
            system=structured.system_prompt(setup.system, setup.output, native),
            messages=await self._fitting_messages(),
            tools=setup.tool_specs,
            settings=setup.settings,
            output=setup.output.spec if native and setup.output is not None else None,
        )
        completion: Completion | None = None
        async with contextlib.aclosing(setup.provider.stream(request)) as events:
            streamed = self._streaming = _Streaming(message_id)
            async for event in events:  # closed at once, even when the run is cancelled
                if isinstance(event, TextDelta):
                    if event.text:
                        streamed.text.append(event.text)
                        self._emit(MessageDelta(message_id=message_id, text=event.text))
                elif isinstance(event, ThoughtDelta):
                    if event.text:
                        streamed.thoughts.append(event.text)
                        self._emit(Thought(message_id=message_id, text=event.text))
                else:
                    completion = event
        if completion is None:
            raise RuntimeError(f"provider {setup.provider.name} ended without a completion")
        if request.output is not None:
            completion = setup.provider.structured_answer(completion, request.output)
        if completion.usage is not None:
            self.usage = add_usage(self.usage, completion.usage)
            self._calls.append(completion.usage)
        return completion

    async def _act(self, calls: Sequence[ToolCall]) -> None:
        """Run the calls concurrently; results are kept in the order the model asked for them.
        An edit's proposed change is computed first: its ``tool_call`` and its permission
        question carry it."""
        self._results = {}
        try:
            if self._hooks is not None:
                calls = await asyncio.gather(*(self._before_tool(self._hooks, c) for c in calls))
            changes = await self._proposed_changes(calls)
        except asyncio.CancelledError:
            self._announce(calls, {})  # each call is shown before its end (cancelled) is
            raise
        self._announce(calls, changes)
        recorder = self._setup.checkpoints
        if recorder is not None:
            kinds = [self._recorded_kind(call) for call in calls]
            await recorder.before(kinds, self._emit, self._written_paths(kinds, changes))
        try:
            async with asyncio.TaskGroup() as group:  # one failing cancels the others
                for call in calls:
                    group.create_task(self._call(call, changes.get(call.id)))
        finally:
            if recorder is not None:  # what the calls changed, even when cancelled
                await asyncio.shield(recorder.after(self._prompt_id, self._emit))

    def _recorded_kind(self, call: ToolCall) -> ToolKind:
        """The call's kind as checkpoints see it: a ``task`` call's sub-agent may edit and
        execute (its own session records that too; the parent's turn covers it as well)."""
        if call.name == TASK_TOOL and self._setup.subagents is not None:
            return ToolKind.EXECUTE
        return self._kinds.get(call.id, ToolKind.OTHER)

    def _written_paths(
        self, kinds: Sequence[ToolKind], changes: Mapping[str, ProposedChange]
    ) -> set[str] | None:
        """The only files a step's calls can write, when that is known: every call that may
        change files is an edit, whose proposed change names its file (an edit without one
        writes none, or fails), and no hook runs a command around them. None otherwise."""
        if ToolKind.EXECUTE in kinds or self._hooks is not None:
            return None
        return {change.path for change in changes.values()}

    async def _before_tool(self, hooks: Hooks, call: ToolCall) -> ToolCall:
        """``pre_tool_use``: the call as its hooks leave it (``updatedInput``); a block is kept
        as the call's result, the context they add for its result."""
        if call.name not in self._allowed:  # not on offer: it fails anyway
            return call
        verdict = await hooks.run(
            "pre_tool_use",
            {"tool_name": call.name, "tool_input": tool_input(call.arguments)},
            self._emit,
            tool_name=call.name,
            tool_call_id=call.id,
        )
        if verdict.blocked is not None:
            self._hook_blocked[call.id] = ToolResult(verdict.blocked, is_error=True)
            return call
        if verdict.context:
            self._hook_context[call.id] = verdict.context
        if verdict.updated_input is not None:
            return call.model_copy(update={"arguments": json.dumps(verdict.updated_input)})
        return call

    async def _after_tool(self, hooks: Hooks, call: ToolCall, result: ToolResult) -> ToolResult:
        """``post_tool_use``: a block fails the call (its reason first, the tool's own result
        after it: the tool did run); the context hooks added joins the result."""
        verdict = await hooks.run(
            "post_tool_use",
            {
                "tool_name": call.name,
                "tool_input": tool_input(call.arguments),
                "tool_result": self._redacted(result).content,
                "is_error": result.is_error,
            },
            self._emit,
            tool_name=call.name,
            tool_call_id=call.id,
        )
        parts = [verdict.blocked, result.content, self._hook_context.pop(call.id, None)]
        parts.append(verdict.context)
        content = "\n\n".join(part for part in parts if part)
        is_error = result.is_error or verdict.blocked is not None
        return dataclasses.replace(result, content=content, is_error=is_error)

    def _announce(self, calls: Sequence[ToolCall], changes: dict[str, ProposedChange]) -> None:
        """The ``tool_call`` event of each call, with the change an edit proposes."""
        for call in calls:
            self._emit(
                ToolCallStarted(
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    title=call_title(call.name, call.arguments),
                    tool_kind=self._kinds.get(call.id, ToolKind.OTHER),
                    diff=changes.get(call.id),
                )
            )

    async def _proposed_changes(self, calls: Sequence[ToolCall]) -> dict[str, ProposedChange]:
        """The change each edit among ``calls`` proposes (by call id), without the configured
        secrets; an edit that will fail proposes none."""
        edits = [
            call
            for call in calls
            if (spec := self._allowed.get(call.name)) is not None and spec.kind is ToolKind.EDIT
        ]
        if not edits:
            return {}
        tools, context = self._setup.tools, self._setup.context
        found = await asyncio.gather(
            *(tools.proposed_change(call.name, call.arguments, context) for call in edits)
        )
        redact = context.secrets.redact
        return {
            call.id: change.model_copy(
                update={
                    "old_text": None if change.old_text is None else redact(change.old_text),
                    "new_text": redact(change.new_text),
                }
            )
            if context.secrets
            else change
            for call, change in zip(edits, found, strict=True)
            if change is not None
        }

    async def _call(self, call: ToolCall, change: ProposedChange | None = None) -> None:
        """One call and its last update.

        A ``CancelledError`` that is not the cancellation of this call's task (the task group
        cancels it when the run is cancelled or another call failed) was raised inside the call
        on its own: the call ends with the error result "cancelled" and the run goes on. Left to
        end the task, it would leave the call without a result, as the task group lets a child
        end cancelled without a word.
        """
        try:
            result = self._redacted(await self._traced_outcome(call, change))
        except asyncio.CancelledError:
            if cancelling():
                raise
            self._cancelled(call)
            return
        self._results[call.id] = result
        status = ToolCallStatus.FAILED if result.is_error else ToolCallStatus.COMPLETED
        self._emit(
            ToolCallUpdate(
                tool_call_id=call.id,
                status=status,
                result=None if result.is_error else result.content,
                error=result.content if result.is_error else None,
                diff=result.diff,
            )
        )

    async def _traced_outcome(self, call: ToolCall, change: ProposedChange | None) -> ToolResult:
        telemetry = self._setup.telemetry
        if telemetry is None:
            return await self._outcome(call, change)
        with telemetry.tool(call) as span:
            result = await self._outcome(call, change)
            span.finished(result.content, result.is_error)
            return result

    async def _outcome(self, call: ToolCall, change: ProposedChange | None) -> ToolResult:
        """Approved (when its kind needs it), then run; a refusal is its result."""
        spec = self._allowed.get(call.name)
        if spec is None:
            self._emit(ToolCallUpdate(tool_call_id=call.id, status=ToolCallStatus.IN_PROGRESS))
            return ToolResult(self._not_available(call.name), True)
        blocked = self._hook_blocked.pop(call.id, None)
        if blocked is not None:
            return blocked
        workspace = self._setup.context.workspace
        protected = self._setup.tools.protected(call.name, call.arguments, workspace)
        refusal = await self._setup.approval.check(spec, call, protected, change)
        if refusal is not None:
            return refusal
        self._emit(ToolCallUpdate(tool_call_id=call.id, status=ToolCallStatus.IN_PROGRESS))
        context = dataclasses.replace(
            self._setup.context,
            tool_call_id=call.id,
            progress=self._progress_of(call),
            protected_approved=protected is not None,
        )
        result = await self._execute_call(call, context)
        if self._hooks is not None:
            result = await self._after_tool(self._hooks, call, result)
        return result

    async def _execute_call(self, call: ToolCall, context: ToolContext) -> ToolResult:
        """Run the call: a ``task`` by its sub-agent (whose usage joins the run's), any other
        by the tools."""
        subagents = self._setup.subagents
        if subagents is not None and call.name == TASK_TOOL:
            result, usage = await subagents.run(call.arguments, context)
            self.usage = add_child_usage(self.usage, usage)
            return result
        return await self._setup.tools.execute(call.name, call.arguments, context)

    def _not_available(self, name: str) -> str:
        """Why a tool is not on offer: the failure of its source (an MCP server that did not
        start), else the list of those that are."""
        for failure in self._setup.tools.failures():
            if name.startswith(failure.prefix):
                return f"tool {name!r} is not available: {failure.describe()}; {RESTARTED}"
        available = ", ".join(sorted(self._allowed)) or "none"
        return f"tool {name!r} is not available (available: {available})"

    def _result_of(self, call: ToolCall) -> ToolResult:
        result = self._results.get(call.id)
        return self._cancelled(call) if result is None else result

    def _cancelled(self, call: ToolCall) -> ToolResult:
        """The call's result is the error "cancelled" (its last update says so)."""
        result = self._results[call.id] = ToolResult(CANCELLED_RESULT, is_error=True)
        self._emit(ToolCallUpdate(tool_call_id=call.id, status=ToolCallStatus.CANCELLED))
        return result

    def _redacted(self, result: ToolResult) -> ToolResult:
        """``result`` without the configured secrets (the one place every tool's result, MCP
        servers' included, passes before it is shown or recorded)."""
        secrets = self._setup.context.secrets
        if not secrets:
            return result
        return dataclasses.replace(
            result,
            content=secrets.redact(result.content),
            diff=None if result.diff is None else secrets.redact(result.diff),
            output=secrets.redact_json(result.output),
        )

    def _progress_of(self, call: ToolCall) -> Callable[[str], None]:
        redact = self._setup.context.secrets.redact

        def progress(text: str) -> None:
            if call.id not in self._results:  # nothing after the call's last update
                self._emit(
                    ToolCallUpdate(
                        tool_call_id=call.id,
                        status=ToolCallStatus.IN_PROGRESS,
                        progress=redact(text),
                    )
                )

        return progress

    async def _persist_results(self) -> None:
        """Persist a result for every call still unanswered: a call that has none (it ended
        without one) gets "cancelled". They count as answered once persisted; a cancellation
        that arrives meanwhile waits for the write (a store may finish it anyway), so no call is
        answered twice."""
        calls = self._unanswered
        results = [self._result_of(call) for call in calls]
        write = asyncio.ensure_future(
            self._persist(
                [
                    MessageInput(
                        role=Role.TOOL,
                        tool_call_id=call.id,
                        name=call.name,
                        content=result.content,
                        is_error=result.is_error or None,
                        output=result.output,
                        author=self._setup.author,
                        metadata={DIFF_KEY: result.diff} if result.diff is not None else None,
                    )
                    for call, result in zip(calls, results, strict=True)
                ]
            )
        )
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await write
            if not write.cancelled() and write.exception() is None:
                self._answered(calls, results)
            raise
        self._answered(calls, results)

    def _answered(self, calls: list[ToolCall], results: list[ToolResult]) -> None:
        self._unanswered = []
        self.records.extend(
            ToolCallRecord(
                iteration=self.iterations,
                id=call.id,
                name=call.name,
                arguments=call.arguments,
                result=result.content,
                is_error=result.is_error,
                output=result.output,
            )
            for call, result in zip(calls, results, strict=True)
        )

    async def _record_cancelled_calls(self) -> None:
        """Give every persisted call a result: finished ones keep theirs, the rest "cancelled"."""
        if self._unanswered:
            await self._persist_results()

    async def _answer_dangling_calls(self) -> None:
        """Tool calls left without a result (a client appended them so, or a server stopped in
        the middle of a run) get the error result "interrupted": providers refuse a history with
        an unanswered call."""
        answered = {m.tool_call_id for m in self._history if m.role is Role.TOOL}
        dangling = [
            (message, call)
            for message in self._history
            if message.tool_calls
            for call in message.tool_calls
            if call.id not in answered
        ]
        if dangling:
            await self._persist(
                [
                    MessageInput(
                        role=Role.TOOL,
                        tool_call_id=call.id,
                        name=call.name,
                        content=INTERRUPTED_RESULT,
                        is_error=True,
                        author=message.author,
                    )
                    for message, call in dangling
                ]
            )

    async def _persist(
        self, messages: list[MessageInput], ids: list[str] | None = None
    ) -> list[Message]:
        stored = await self._setup.store.append(
            self._setup.session_id, messages, run_id=self.run_id, ids=ids
        )
        self._history.extend(stored)
        if self._view is not self._history:
            self._view.extend(stored)
        return stored

    async def _add_usage(self) -> None:
        """Price what the run used, and add it to the session's totals (whatever way it
        ended)."""
        self.usage = self.usage.model_copy(update={"cost": await self._cost()})
        if self.usage.input_tokens or self.usage.output_tokens:
            await self._setup.store.add_usage(self._setup.session_id, self.usage)

    async def _cost(self) -> float | None:
        """What the run's model calls cost (None: unknown). The first pricing of a process
        loads the price table: on a thread, so that other sessions' runs do not wait on it."""
        source, calls = self._setup.provider.prices, self._calls
        if source is None or not calls:
            return None
        if prices.loaded():
            return prices.cost(source, self._setup.model, calls)
        return await asyncio.to_thread(prices.cost, source, self._setup.model, list(calls))

    def emit(self, event: ProgressEvent) -> None:
        """Send an event of this run from outside its loop (the plan a tool stored)."""
        self._emit(event)

    def _emit(self, event: ProgressEvent) -> None:
        self._seq += 1
        progress = ProgressParams(
            session_id=self._setup.session_id, run_id=self.run_id, seq=self._seq, event=event
        )
        if self._setup.parent is not None:  # a sub-agent's event names its parent
            progress.parent_run_id, progress.parent_tool_call_id = self._setup.parent
        self._setup.emit(progress)


def _hook_messages(context: str | None, event: str) -> list[MessageInput]:
    """What a hook added for the model, as a system message of the history (none: nothing)."""
    if not context:
        return []
    return [MessageInput(role=Role.SYSTEM, content=context, metadata={HOOK_KEY: event})]


def prompt_text(prompt: Content) -> str:
    """The text of a prompt (its text blocks, one after the other)."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(block.text for block in prompt if isinstance(block, TextBlock))
