"""The model's reasoning kept with the assistant message it led to (``metadata.reasoning``), so a
reopened session shows it as a live one did; never counted or summarized as answer text."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether.kernel.compaction import SUMMARY_SYSTEM
from tether.kernel.window import EstimatingCounter
from tether.protocol import ForkSessionParams, MessageInput, Role
from tether.protocol.kernel import MessageDelta, ProgressParams, RunParams, StopReason
from tether.protocol.kernel import ThoughtDelta as Thought
from tether.protocol.messages import MAX_REASONING_CHARS, REASONING_KEY, kept_reasoning

from .support import KernelHarness, tool_call

RUN_TIMEOUT = 10


def reasoning_of(message: object) -> object:
    return (getattr(message, "metadata", None) or {}).get(REASONING_KEY)


async def test_each_assistant_message_keeps_the_reasoning_that_streamed_before_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("42\n")
    harness = KernelHarness(
        tmp_path,
        [
            {
                "thinking": "The notes will say.",
                "toolCalls": [tool_call("c1", "read_file", path="notes.txt")],
            },
            {"thinking": "It is 42.", "text": "The answer is 42."},
        ],
        config={"tools": {"approval": "auto"}},
    )
    sid = await harness.session()
    result = await harness.run(sid, "What is it?")
    assert result.response == "The answer is 42."

    history = await harness.store.history(sid)
    assistants = [m for m in history if m.role is Role.ASSISTANT]
    assert [reasoning_of(m) for m in assistants] == ["The notes will say.", "It is 42."]
    thoughts = [e.event for e in harness.events if isinstance(e.event, Thought)]
    for assistant in assistants:  # the live events named the message that keeps them
        streamed = "".join(t.text for t in thoughts if t.message_id == assistant.id)
        assert streamed == reasoning_of(assistant)
    assert all(m.content != "It is 42." for m in history)  # never the answer's text


async def test_a_message_without_reasoning_has_no_reasoning_key(tmp_path: Path) -> None:
    harness = KernelHarness(tmp_path, [{"text": "Hi."}])
    sid = await harness.session()
    await harness.run(sid, "hello")
    [assistant] = [m for m in await harness.store.history(sid) if m.role is Role.ASSISTANT]
    assert REASONING_KEY not in (assistant.metadata or {})


async def test_reasoning_longer_than_the_bound_keeps_its_start_and_end(tmp_path: Path) -> None:
    long = "a" * MAX_REASONING_CHARS + "b" * 1000 + "the end"
    harness = KernelHarness(tmp_path, [{"thinking": long, "text": "ok"}])
    sid = await harness.session()
    await harness.run(sid, "think hard")
    [assistant] = [m for m in await harness.store.history(sid) if m.role is Role.ASSISTANT]
    kept = reasoning_of(assistant)
    assert isinstance(kept, str) and kept == kept_reasoning(long)
    assert kept.startswith("a" * 1000) and kept.endswith("bbbthe end")
    assert f"{len(long) - MAX_REASONING_CHARS} characters of reasoning left out" in kept
    assert len(kept) < MAX_REASONING_CHARS + 100
    assert kept_reasoning("short") == "short"


async def test_an_answer_cut_by_a_cancellation_keeps_its_reasoning_too(tmp_path: Path) -> None:
    harness = KernelHarness(
        tmp_path, [{"thinking": "Let me see.", "text": "a long answer", "delay": 60}]
    )
    sid = await harness.session()
    answering = asyncio.Event()

    def emit(event: ProgressParams) -> None:
        if isinstance(event.event, MessageDelta):
            answering.set()

    handle = harness.kernel.start(RunParams(session_id=sid, prompt="go"), emit)
    await asyncio.wait_for(answering.wait(), RUN_TIMEOUT)
    handle.cancel()
    result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    assert result.stop_reason is StopReason.CANCELLED
    [cut] = [m for m in await harness.store.history(sid) if m.role is Role.ASSISTANT]
    assert cut.metadata == {"cancelled": True, REASONING_KEY: "Let me see."}
    assert cut.content == "a "  # the first piece streamed before the delay


async def test_the_window_does_not_count_the_kept_reasoning(tmp_path: Path) -> None:
    """It is not sent to the model (tests/providers/test_thinking.py), so it takes no room."""
    harness = KernelHarness(tmp_path, [{"thinking": "PRIVATE-THOUGHT", "text": "Hi."}])
    sid = await harness.session()
    await harness.run(sid, "hello")
    [assistant] = [m for m in await harness.store.history(sid) if m.role is Role.ASSISTANT]
    counter = EstimatingCounter()
    bare = assistant.model_copy(update={"metadata": None})
    assert counter.count_message(assistant) == counter.count_message(bare)


async def test_a_summary_of_old_turns_does_not_read_their_reasoning(tmp_path: Path) -> None:
    harness = KernelHarness(
        tmp_path,
        [{"text": "they talked"}, {"text": "done"}],
        config={"context": {"max_tokens": 3072}},
    )
    sid = await harness.session()
    old: list[MessageInput] = []
    for index in range(200):
        old.append(MessageInput(role=Role.USER, content=f"question {index}?"))
        old.append(
            MessageInput(
                role=Role.ASSISTANT,
                content=f"answer {index}.",
                metadata={REASONING_KEY: f"PRIVATE-THOUGHT {index}"},
            )
        )
    await harness.store.append(sid, old)
    await harness.run(sid, "next question")
    summarize, _ = harness.provider.requests
    assert summarize.system == SUMMARY_SYSTEM
    transcript = str(summarize.messages[0].content)
    assert "answer 0." in transcript and "PRIVATE-THOUGHT" not in transcript


async def test_a_fork_keeps_the_reasoning_of_the_messages_it_shares(tmp_path: Path) -> None:
    harness = KernelHarness(tmp_path, [{"thinking": "Hmm.", "text": "Hi."}])
    sid = await harness.session()
    await harness.run(sid, "hello")
    history = await harness.store.history(sid)
    fork = await harness.store.fork(ForkSessionParams(session_id=sid, at_message_id=history[-1].id))
    forked = await harness.store.history(fork.session_id)
    assert [reasoning_of(m) for m in forked] == [None, "Hmm."]
