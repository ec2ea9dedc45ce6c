"""The history window: which messages of a session a model request carries under a token budget.

``context.max_tokens`` is a budget of *estimated* tokens for a whole request: the system prompt
and the tool definitions count against it first, then the messages. When the history does not
fit, the oldest turns are left out of the request (never out of the session):

- the **head** is always sent: every message up to the first user message, and on up to the
  first point where the history may be cut (so a tool exchange there stays whole);
- the **current turn** is always sent: this run's user prompt and everything after it, even
  when that alone is over the budget (a single oversized message goes as it is, and the provider
  decides what to do with it);
- between them, the request resumes at the earliest *cut point* from which the rest fits. A cut
  point is a message that is not a tool result and that no earlier tool call is still waiting
  on, so an assistant message that calls tools and the results of its calls are dropped or kept
  together, and a request never starts with an orphan tool result.

Counting is pluggable (:class:`TokenCounter`); :class:`EstimatingCounter`, the default, counts
about four characters per token. Each message is counted once per run, when the window first
sees it; choosing the cut is a binary search over running totals, so an iteration costs
O(log n) plus the messages added since the last one.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from typing import Protocol

import orjson

from tether.protocol import ImageBlock, Message, ResourceLinkBlock, Role, TextBlock, is_blocks
from tether.protocol.tools import ToolSpec

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # role and separators, per message
IMAGE_TOKENS = 1024  # an image, whatever its size (a provider's own count varies with it)
_TOOL, _USER = Role.TOOL, Role.USER


class TokenCounter(Protocol):
    """Estimates what text and messages cost in tokens."""

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...


class EstimatingCounter:
    """About four characters per token over the content text, tool call names and arguments,
    plus a few tokens per message; an image counts :data:`IMAGE_TOKENS`."""

    def count_text(self, text: str) -> int:
        return -(-len(text) // CHARS_PER_TOKEN)

    def count_message(self, message: Message) -> int:
        content = message.content
        tokens = MESSAGE_OVERHEAD
        if isinstance(content, str):
            chars = len(content)
        elif content is not None and not is_blocks(content):
            chars = len(orjson.dumps(content))  # any other JSON value goes as its JSON text
        else:
            chars = 0
            for block in content or ():
                if isinstance(block, TextBlock):
                    chars += len(block.text)
                elif isinstance(block, ImageBlock):
                    tokens += IMAGE_TOKENS
                elif isinstance(block, ResourceLinkBlock):
                    chars += len(block.uri) + len(block.name or "")
        calls = message.tool_calls
        if calls:
            for call in calls:
                chars += len(call.name) + len(call.arguments)
        return tokens + -(-chars // CHARS_PER_TOKEN)


def fixed_tokens(counter: TokenCounter, system: str | None, tools: Sequence[ToolSpec]) -> int:
    """What every request of a run spends before its messages: the system prompt and the tools."""
    tokens = counter.count_text(system) if system else 0
    for spec in tools:
        tokens += counter.count_text(spec.name + spec.description)
        tokens += counter.count_text(orjson.dumps(spec.parameters).decode())
    return tokens


def window(
    max_tokens: int | None, counter: TokenCounter, system: str | None, tools: Sequence[ToolSpec]
) -> HistoryWindow | None:
    """The window of a run (``context.max_tokens``; None: no window)."""
    if max_tokens is None:
        return None
    return HistoryWindow(max_tokens, counter, fixed=fixed_tokens(counter, system, tools))


class HistoryWindow:
    """The window of one run. :meth:`messages` is given the run's history each time (the same
    list, which only grows) and indexes what was added since the last call."""

    def __init__(self, max_tokens: int, counter: TokenCounter, *, fixed: int = 0) -> None:
        self.max_tokens = max_tokens
        self._budget = max_tokens - fixed  # what the messages may use
        self._counter = counter
        self._totals = [0]  # _totals[j]: tokens of history[:j]
        self._cuts: list[int] = []  # indices where a request may resume, ascending
        self._waiting: set[str] = set()  # tool calls made so far that have no result yet
        self._first_user: int | None = None
        self._head: int | None = None  # the first cut point after the first user message
        self.left_out = 0  # messages the last request left out

    @property
    def budget(self) -> int:
        """The estimated tokens the messages of a request may use."""
        return self._budget

    def fresh(self) -> HistoryWindow:
        """A window like this one for another history (after a compaction replaced a part)."""
        return HistoryWindow(self.max_tokens, self._counter, fixed=self.max_tokens - self._budget)

    def messages(self, history: Sequence[Message], turn_start: int) -> Sequence[Message]:
        """What to send: ``history`` itself when it fits, else its head and its newest part.
        ``turn_start`` is the index of this run's user prompt."""
        self.index(history)
        self.left_out = 0
        head = self._head
        total = self._totals[-1]
        if head is None or head >= turn_start or total <= self._budget:
            return history
        # the request resumes at the first cut i >= head where head + history[i:] fits
        need = total - self._budget + self._totals[head]  # smallest _totals[i] that fits
        start = bisect.bisect_left(self._totals, need)
        at = bisect.bisect_left(self._cuts, start)
        resume = min(self._cuts[at] if at < len(self._cuts) else turn_start, turn_start)
        if resume <= head:
            return history
        self.left_out = resume - head
        logger.debug(
            "history window: %d of %d messages left out (budget %d estimated tokens)",
            self.left_out,
            len(history),
            self.max_tokens,
        )
        return [*history[:head], *history[resume:]]

    def index(self, history: Sequence[Message]) -> None:
        """Count and classify the messages added since the last call (a loop kept tight: it
        sees the whole history once per run, which the kernel does as the run starts)."""
        totals = self._totals
        start = len(totals) - 1
        if start == len(history):
            return
        waiting, cuts, count = self._waiting, self._cuts, self._counter.count_message
        first_user, head, total = self._first_user, self._head, totals[-1]
        for index in range(start, len(history)):
            message = history[index]
            role = message.role
            if role is not _TOOL and not waiting:
                cuts.append(index)
                if head is None and first_user is not None:
                    head = index
            if role is _USER:
                if first_user is None:
                    first_user = index
            elif role is _TOOL:
                waiting.discard(message.tool_call_id)
            elif message.tool_calls:
                waiting.update([call.id for call in message.tool_calls])
            total += count(message)
            totals.append(total)
        self._first_user, self._head = first_user, head
