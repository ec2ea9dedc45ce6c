"""The history window: what a model request carries when the history is over the budget."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tether.config import TetherConfig
from tether.kernel.window import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    EstimatingCounter,
    HistoryWindow,
    fixed_tokens,
)
from tether.protocol import (
    ConfigError,
    ImageBlock,
    Message,
    MessageInput,
    Role,
    TextBlock,
    ToolCall,
)
from tether.protocol.tools import ToolSpec

from .support import KernelHarness, tool_call

_ids = itertools.count(1)
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def msg(role: Role, content: str | None = "x", **fields: Any) -> Message:
    return Message(id=f"m{next(_ids)}", role=role, content=content, created_at=NOW, **fields)


def user(text: str = "question") -> Message:
    return msg(Role.USER, text)


def answer(text: str = "answer") -> Message:
    return msg(Role.ASSISTANT, text)


def calls(*ids: str) -> Message:
    return msg(
        Role.ASSISTANT,
        None,
        tool_calls=[ToolCall(id=i, name="read_file", arguments="{}") for i in ids],
    )


def result(call_id: str) -> Message:
    return msg(Role.TOOL, "output", tool_call_id=call_id)


class Tens:
    """Every message costs 10 tokens, text one per character."""

    def count_text(self, text: str) -> int:
        return len(text)

    def count_message(self, message: Message) -> int:
        return 10


def check_request(history: Sequence[Message], sent: Sequence[Message], turn_start: int) -> None:
    """What every request must be: a prefix up to the first user message, then a suffix that
    holds the whole current turn, without a tool result whose call is not sent or a call whose
    results are not."""
    first_user = next(i for i, m in enumerate(history) if m.role is Role.USER)
    assert [m.id for m in sent[: first_user + 1]] == [m.id for m in history[: first_user + 1]]
    left_out = len(history) - len(sent)
    if left_out:
        head = next(i for i in range(len(sent)) if sent[i].id != history[i].id)
        assert [m.id for m in sent[head:]] == [m.id for m in history[head + left_out :]]
        assert head + left_out <= turn_start
    made = {c.id for m in sent if m.tool_calls for c in m.tool_calls}
    answered = {m.tool_call_id for m in sent if m.role is Role.TOOL}
    assert made == answered


def exchange(n: int) -> list[Message]:
    """A question, a call with two parallel results, and an answer."""
    return [user(f"q{n}"), calls(f"a{n}", f"b{n}"), result(f"a{n}"), result(f"b{n}"), answer()]


HISTORIES = {
    "exchanges": [*exchange(1), *exchange(2), *exchange(3), user("now")],
    "chat": [user(), answer(), user(), answer(), user(), answer(), user("now")],
    "tools right after the first question": [
        user(),
        calls("x"),
        result("x"),
        calls("y"),
        result("y"),
        answer(),
        user(),
        answer(),
        user("now"),
    ],
    "a result appended after a later message": [
        user(),
        answer(),
        user(),
        calls("late"),
        user("more"),
        result("late"),
        user("now"),
    ],
    "a greeting before the first question": [answer("hi"), user(), answer(), user(), user("now")],
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_every_budget_gives_a_valid_request_that_keeps_the_head_and_the_current_turn(name: str):
    history = HISTORIES[name]
    turn_start = len(history) - 1
    for budget in range(0, 10 * len(history) + 11):
        window = HistoryWindow(budget, Tens())
        sent = window.messages(history, turn_start)
        check_request(history, sent, turn_start)
        assert window.left_out == len(history) - len(sent)
        if 10 * len(history) <= budget:
            assert sent is history  # no window at all: the history itself, not a copy


def test_the_oldest_turns_are_left_out_first_and_a_tool_pair_goes_whole():
    history = HISTORIES["exchanges"]  # 16 messages: 3 exchanges of 5, then the prompt
    # the budget fits the first question and 9 more: resuming 9 from the end would cut the
    # second exchange between its call and its results, so it resumes at its answer instead
    sent = HistoryWindow(100, Tens()).messages(history, 15)
    assert sent == [history[0], *history[9:]]
    assert sent[1].role is Role.ASSISTANT and not sent[1].tool_calls
    sent = HistoryWindow(110, Tens()).messages(history, 15)  # room for the call: kept whole
    assert sent == [history[0], *history[6:]]
    assert sent[1].tool_calls and [m.role for m in sent[2:4]] == [Role.TOOL, Role.TOOL]


def test_the_first_user_message_is_kept_when_everything_between_goes():
    history = HISTORIES["chat"]
    sent = HistoryWindow(0, Tens()).messages(history, len(history) - 1)
    assert sent == [history[0], history[-1]]


def test_the_current_turn_is_sent_whole_even_over_the_budget():
    history = [user(), answer(), user("now"), calls("c"), result("c"), answer("more")]
    sent = HistoryWindow(30, Tens()).messages(history, 2)
    assert sent == [history[0], *history[2:]]


def test_a_single_oversized_message_is_sent_as_it_is():
    history = [user("x" * 40_000)]
    window = HistoryWindow(1024, EstimatingCounter())
    assert window.messages(history, 0) is history
    history = [user(), answer(), user("x" * 40_000)]
    assert HistoryWindow(1024, EstimatingCounter()).messages(history, 2) == [
        history[0],
        history[2],
    ]


def test_the_system_prompt_and_tools_count_against_the_budget():
    history = HISTORIES["chat"]
    roomy = HistoryWindow(70, Tens()).messages(history, 6)
    assert roomy is history
    spec = ToolSpec(name="t", description="d", parameters={"type": "object"})
    fixed = fixed_tokens(Tens(), "a system prompt of some length", [spec])
    assert fixed == len("a system prompt of some length") + len("td") + len('{"type":"object"}')
    tight = HistoryWindow(70, Tens(), fixed=fixed).messages(history, 6)
    assert len(tight) < len(history)


def test_growing_history_is_indexed_incrementally_with_the_same_answer_as_afresh():
    history: list[Message] = [*exchange(1), *exchange(2), user("now")]
    window = HistoryWindow(95, Tens())
    turn_start = len(history) - 1
    for step in [[], [calls("s1"), result("s1")], [calls("s2", "s3"), result("s2"), result("s3")]]:
        history += step  # an iteration's call and results, persisted before the next request
        sent = window.messages(history, turn_start)
        assert sent == HistoryWindow(95, Tens()).messages(history, turn_start)
        check_request(history, sent, turn_start)


def test_the_estimating_counter_counts_characters_calls_and_images():
    counter = EstimatingCounter()
    assert counter.count_text("12345678") == 2 and counter.count_text("123456789") == 3
    assert counter.count_message(user("12345678")) == MESSAGE_OVERHEAD + 2
    call = ToolCall(id="c", name="read_file", arguments='{"path":"a.py"}')  # 9 + 15 chars
    assert counter.count_message(msg(Role.ASSISTANT, None, tool_calls=[call])) == (
        MESSAGE_OVERHEAD + 6
    )
    image = ImageBlock(mime_type="image/png", data="aGVsbG8=")
    blocks = msg(Role.USER, [TextBlock(text="look"), image])
    assert counter.count_message(blocks) == MESSAGE_OVERHEAD + IMAGE_TOKENS + 1


# --- through the kernel -------------------------------------------------------------------------


def big(role: Role, n: int, **fields: Any) -> MessageInput:
    return MessageInput(role=role, content=f"{n} " + "word " * 400, **fields)  # ~500 tokens


async def test_a_run_over_the_budget_sends_a_window_and_the_session_keeps_everything(
    tmp_path: Path,
):
    harness = KernelHarness(
        tmp_path,
        [{"toolCalls": [tool_call("now1", "list_files")]}, {"text": "done"}],
        config={"context": {"maxTokens": 2000, "compaction": "drop"}},
    )
    sid = await harness.session()
    earlier: list[MessageInput] = []
    for n in range(6):
        earlier += [
            big(Role.USER, n),
            MessageInput(
                role=Role.ASSISTANT,
                tool_calls=[ToolCall(id=f"old{n}", name="list_files", arguments="{}")],
            ),
            big(Role.TOOL, n, tool_call_id=f"old{n}"),
            big(Role.ASSISTANT, n),
        ]
    await harness.store.append(sid, earlier)
    await harness.run(sid, prompt="now")

    history = await harness.store.history(sid)
    assert len(history) == len(earlier) + 4  # prompt, call, result, answer: nothing removed
    for request in harness.provider.requests:
        sent = list(request.messages)
        seen = next(i for i, m in enumerate(history) if m.id == sent[-1].id) + 1
        assert len(sent) < seen  # a window: some of what the session had was left out
        check_request(history[:seen], sent, turn_start=len(earlier))
        assert sent[0].content == earlier[0].content
        assert any(m.content == "now" for m in sent)
    last = harness.provider.requests[-1].messages
    assert [m.role for m in last[-3:]] == [Role.USER, Role.ASSISTANT, Role.TOOL]


async def test_without_context_max_tokens_every_message_is_sent(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "ok"}])
    sid = await harness.session()
    await harness.store.append(sid, [big(Role.USER, n) for n in range(40)])
    await harness.run(sid)
    assert len(harness.provider.requests[0].messages) == 41


@pytest.mark.parametrize("value", [0, 1023, -5, "lots"])
def test_context_max_tokens_below_the_minimum_is_a_config_error(value: object):
    with pytest.raises(ConfigError) as raised:
        TetherConfig().overlay({"context": {"max_tokens": value}})
    assert raised.value.data["key"] == "context.max_tokens"
