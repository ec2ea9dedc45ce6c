"""Compaction: the model summarizes the oldest turns, and the summary is sent in their place.

A compaction is a durable message of the session: role ``user``, ``kind: "compaction"``, its
``content`` the summary (with a line that says what it is), ``replaces`` the range of messages
it stands for: everything from the start of the history up to ``lastId`` (a later compaction
summarizes the earlier summary with the turns after it, so the newest one stands for all). The
session keeps every message; only what a request carries changes (:func:`compacted_view`).

What is summarized is chosen like the history window's cut (:mod:`tether.kernel.window`): the
summary ends right before a *cut point*, a message that is not a tool result and that no earlier
call still waits on, so a tool call and its results are summarized, or kept, together. The
newest turns that fit in ``keep_tokens`` are kept as they are; a run's own prompt always is.

The summarizing request is a separate model call with no tools: the old turns go as a plain
transcript in one user message (tool calls and results as lines of text, so that no provider
sees a tool exchange without the tools it names). A transcript bigger than one request may carry
is summarized a part at a time, each request carrying the summary so far.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from tether.kernel.window import TokenCounter
from tether.protocol import (
    CompactedRange,
    ImageBlock,
    Message,
    MessageInput,
    ResourceLinkBlock,
    Role,
    TextBlock,
)
from tether.protocol.kernel import (
    CompactionFinished,
    CompactionStarted,
    ProgressEvent,
)
from tether.protocol.messages import is_blocks
from tether.protocol.usage import Usage
from tether.providers.base import ModelRequest, Provider
from tether.providers.content import flatten_text
from tether.sessions.ids import utcnow, uuid7

COMPACTION = "compaction"
SUMMARY_HEADER = "Summary of the earlier part of this conversation (the turns it replaces are "
SUMMARY_HEADER += "no longer shown):"
SUMMARY_SYSTEM = (
    "You summarize a conversation between a user and an AI coding assistant so that the "
    "assistant can go on with the work without the original turns. Keep what matters for what "
    "comes next: the user's goals and requests, decisions made, files and commands involved, "
    "facts learned from tool results, errors met and how they were solved, and what remains "
    "to be done. Be concise and concrete; write the summary only, with no preamble."
)
SUMMARY_PROMPT = "Summarize it."
MAX_LINE_CHARS = 4000  # one message's text in a transcript (a big tool result is shortened)
MIN_CHUNK_TOKENS = 512
ANSWER_TOKENS = 256  # what a summary is expected to cost, for the parts of a long transcript


def is_compaction(message: Message) -> bool:
    return message.kind == COMPACTION and message.replaces is not None


def compacted_view(history: list[Message]) -> list[Message]:
    """What a request is built from: ``history`` with its newest compaction in place of the
    messages it replaces, and no other compaction message. ``history`` itself when it holds no
    compaction (the caller may then keep extending the one list)."""
    latest = next((m for m in reversed(history) if is_compaction(m)), None)
    if latest is None:
        return history
    assert latest.replaces is not None
    last = next((i for i, m in enumerate(history) if m.id == latest.replaces.last_id), None)
    rest = history if last is None else history[last + 1 :]
    kept = [m for m in rest if m.kind != COMPACTION]
    return kept if last is None else [latest, *kept]


@dataclass(frozen=True)
class Plan:
    """The oldest messages of a view that one summary is to replace: ``view[:cut]``."""

    replaced: Sequence[Message]
    tokens: int  # their estimated tokens
    span: CompactedRange


def last_turn(view: Sequence[Message]) -> int:
    """Where the view's last turn starts (its last user message), or its end if it has none."""
    for index in range(len(view) - 1, -1, -1):
        if view[index].role is Role.USER and not is_compaction(view[index]):
            return index
    return len(view)


def plan(
    view: Sequence[Message], turn_start: int, keep_tokens: int, counter: TokenCounter
) -> Plan | None:
    """What to summarize so that ``view[cut:]`` fits in ``keep_tokens`` (or is the turn that
    starts at ``turn_start``, which is always kept): ``view[:cut]`` for the earliest such cut
    point. None when there is nothing new to summarize."""
    costs = [counter.count_message(m) for m in view]
    cuts = _cut_points(view, min(turn_start, len(view)))
    kept = sum(costs[turn_start:])
    cut = cuts[-1] if cuts else 0
    for index in range(len(cuts) - 1, -1, -1):  # the earliest cut from which the rest fits
        start = cuts[index]
        end = cuts[index + 1] if index + 1 < len(cuts) else turn_start
        kept += sum(costs[start:end])
        if kept > keep_tokens:
            break
        cut = start
    summary_first = bool(view) and is_compaction(view[0])
    if cut <= (1 if summary_first else 0):
        return None
    replaced = view[:cut]
    previous = view[0].replaces if summary_first else None
    count = cut - 1 + previous.count if previous is not None else cut
    first_id = previous.first_id if previous is not None else view[0].id
    return Plan(
        replaced=replaced,
        tokens=sum(costs[:cut]),
        span=CompactedRange(first_id=first_id, last_id=replaced[-1].id, count=count),
    )


def _cut_points(view: Sequence[Message], end: int) -> list[int]:
    """Indices up to ``end`` (included, when it is one) where a request may resume (0 first:
    nothing left out)."""
    waiting: set[str] = set()
    cuts: list[int] = []
    for index, message in enumerate(view[: end + 1]):
        if message.role is not Role.TOOL and not waiting:
            cuts.append(index)
        if message.role is Role.TOOL:
            waiting.discard(message.tool_call_id or "")
        elif message.tool_calls:
            waiting.update(call.id for call in message.tool_calls)
    return cuts


def summary_input(plan: Plan, summary: str) -> MessageInput:
    """The compaction message to store."""
    return MessageInput(
        role=Role.USER,
        content=f"{SUMMARY_HEADER}\n\n{summary.strip()}",
        kind=COMPACTION,
        replaces=plan.span,
    )


@dataclass
class Summarizer:
    """Asks the model for the summary of a plan's messages."""

    provider: Provider
    model: str
    counter: TokenCounter
    max_tokens: int | None  # the most one request may carry (None: the whole transcript)
    usage: Usage
    calls: list[Usage] = field(default_factory=list)  # each summary request's own, for its price

    async def summarize(self, messages: Sequence[Message]) -> str:
        summary = ""
        for chunk in self._chunks(messages):
            prompt = _prompt(summary, chunk)
            request = ModelRequest(
                model=self.model,
                system=SUMMARY_SYSTEM,
                messages=[Message(id=uuid7(), role=Role.USER, content=prompt, created_at=utcnow())],
            )
            completion = await self.provider.request(request)
            if completion.usage is not None:
                self.usage.input_tokens += completion.usage.input_tokens
                self.usage.output_tokens += completion.usage.output_tokens
                self.calls.append(completion.usage)
            text = (completion.content or "").strip()
            if not text:
                raise RuntimeError("the model answered the summary request with no text")
            summary = text
        return summary

    def _chunks(self, messages: Sequence[Message]) -> list[list[str]]:
        """The transcript's lines, in parts that each fit one request beside the summarizing
        prompt, the summary so far and its answer (:data:`ANSWER_TOKENS` each)."""
        lines = [_line(message) for message in messages]
        if self.max_tokens is None:
            return [lines]
        fixed = self.counter.count_text(SUMMARY_SYSTEM) + 2 * ANSWER_TOKENS
        budget = max(self.max_tokens - fixed, MIN_CHUNK_TOKENS)
        chunks: list[list[str]] = [[]]
        used = 0
        for line in lines:
            cost = self.counter.count_text(line) + 1
            if chunks[-1] and used + cost > budget:
                chunks.append([])
                used = 0
            chunks[-1].append(line)
            used += cost
        return chunks


def _prompt(summary: str, lines: list[str]) -> str:
    transcript = "\n\n".join(lines)
    if summary:
        return (
            f"The summary of the conversation so far:\n\n{summary}\n\nIt went on like this:"
            f"\n\n{transcript}\n\nWrite one summary of all of it."
        )
    return f"The conversation:\n\n{transcript}\n\n{SUMMARY_PROMPT}"


def _line(message: Message) -> str:
    """A message as a line of the transcript."""
    if is_compaction(message):
        return f"[earlier summary] {_text(message)}"
    if message.role is Role.TOOL:
        label = "error" if message.is_error else "result"
        return f"[tool {label} for {message.tool_call_id}] {_text(message)}"
    if message.role is Role.ASSISTANT:
        parts = [f"[assistant] {_text(message)}"] if _text(message) else []
        parts += [
            f"[assistant calls {c.name} ({c.id})] {_clip(c.arguments)}"
            for c in message.tool_calls or ()
        ]
        return "\n".join(parts) or "[assistant]"
    return f"[{message.role.value}] {_text(message)}"


def _text(message: Message) -> str:
    content = message.content
    if not is_blocks(content):  # text, or any other JSON value as its JSON text
        return _clip(flatten_text(content))
    parts: list[str] = []
    for block in content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock):
            parts.append(f"[image {block.mime_type}]")
        elif isinstance(block, ResourceLinkBlock):
            parts.append(f"[resource {block.uri}]")
    return _clip("\n".join(parts))


def _clip(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return f"{text[:MAX_LINE_CHARS]} [... {len(text) - MAX_LINE_CHARS} characters left out]"


async def compact(
    plan: Plan,
    summarizer: Summarizer,
    persist: Callable[[MessageInput], Awaitable[Message]],
    emit: Callable[[ProgressEvent], None],
) -> Message:
    """Summarize the plan's messages and store the compaction message with ``persist``:
    ``compaction_started`` before, ``compaction_finished`` after (with the error, which is then
    raised, when it failed). Returns the stored message."""
    count = plan.span.count
    emit(CompactionStarted(messages=count, tokens=plan.tokens))
    try:
        summary = await summarizer.summarize(plan.replaced)
        stored = await persist(summary_input(plan, summary))
    except Exception as exc:
        emit(CompactionFinished(messages=count, error=str(exc) or type(exc).__name__))
        raise
    emit(
        CompactionFinished(
            message_id=stored.id,
            messages=count,
            summary_tokens=summarizer.counter.count_text(summary),
            summary=summary,
        )
    )
    return stored
