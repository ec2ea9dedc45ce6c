"""Compaction: the oldest turns summarized by the model, the summary sent in their place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.kernel.compaction import (
    SUMMARY_HEADER,
    SUMMARY_SYSTEM,
    compacted_view,
    plan,
)
from tether.kernel.window import EstimatingCounter
from tether.protocol import Message, MessageInput, Role, SessionBusy, ToolCall
from tether.protocol.kernel import (
    CompactionFinished,
    CompactionStarted,
    CompactParams,
    StopReason,
)
from tether.sessions.ids import utcnow, uuid7

from .support import KernelHarness

WORDS = "lorem ipsum dolor sit amet " * 8  # ~40 estimated tokens


def message(role: Role, text: str | None = None, **fields: object) -> Message:
    return Message(id=uuid7(), role=role, content=text, created_at=utcnow(), **fields)  # type: ignore[arg-type]


def turns(count: int, words: str = "") -> list[MessageInput]:
    """``count`` turns of a question and its answer (~7 estimated tokens each, plus ``words``)."""
    out: list[MessageInput] = []
    for index in range(count):
        out.append(MessageInput(role=Role.USER, content=f"question {index}? {words}"))
        out.append(MessageInput(role=Role.ASSISTANT, content=f"answer {index}. {words}"))
    return out


def texts(messages: object) -> str:
    return " ".join(str(m.content) for m in messages)  # type: ignore[attr-defined]


async def test_a_run_over_the_budget_stores_a_summary_and_sends_it_in_place_of_the_old_turns(
    tmp_path: Path,
) -> None:
    harness = KernelHarness(
        tmp_path,
        [{"text": "they asked 200 questions"}, {"text": "done"}, {"text": "again"}],
        config={"context": {"max_tokens": 3072}},  # the tools take 1148 of it
    )
    sid = await harness.session()
    old = await harness.store.append(sid, turns(200))
    result = await harness.run(sid, "next question")
    assert result.stop_reason is StopReason.END_TURN

    summarize, answer = harness.provider.requests
    assert summarize.system == SUMMARY_SYSTEM and summarize.tools == ()
    [transcript] = summarize.messages
    assert "question 0?" in str(transcript.content)
    assert "next question" not in str(transcript.content)

    history = await harness.store.history(sid)
    [summary] = [m for m in history if m.kind == "compaction"]
    assert summary.replaces is not None
    assert summary.replaces.first_id == old[0].id
    assert summary.content == f"{SUMMARY_HEADER}\n\nthey asked 200 questions"
    assert answer.messages[0] == summary
    assert "question 0?" not in texts(answer.messages)
    assert answer.messages[-1].content == "next question"
    replaced = [m.id for m in old].index(summary.replaces.last_id) + 1
    assert summary.replaces.count == replaced
    assert [m.id for m in answer.messages[1:-1]] == [m.id for m in old[replaced:]]
    assert len(history) == 400 + 3  # every message is still in the session

    kinds = [e.event.kind for e in harness.events]
    assert kinds.index("compaction_started") < kinds.index("compaction_finished")
    [finished] = [e.event for e in harness.events if isinstance(e.event, CompactionFinished)]
    assert finished.message_id == summary.id and finished.error is None
    [started] = [e.event for e in harness.events if isinstance(e.event, CompactionStarted)]
    assert started.messages == summary.replaces.count

    await harness.run(sid, "and another")  # fits now: no second summary
    later = harness.provider.requests[-1]
    assert later.messages[0] == summary and "question 0?" not in texts(later.messages)
    harness.provider.assert_used_up()


async def test_a_transcript_too_big_for_one_request_is_summarized_a_part_at_a_time(
    tmp_path: Path,
) -> None:
    harness = KernelHarness(
        tmp_path,
        [{"text": f"summary {i}"} for i in range(40)],
        config={"context": {"max_tokens": 1024}},
    )
    sid = await harness.session()
    await harness.store.append(sid, turns(100, WORDS))
    await harness.run(sid, "next question")
    *summaries, answer = harness.provider.requests
    assert len(summaries) > 2
    for index, request in enumerate(summaries):
        prompt = str(request.messages[0].content)
        assert (f"summary {index - 1}" in prompt) == (index > 0)
        assert EstimatingCounter().count_text(prompt) <= 1024
    assert str(answer.messages[0].content).endswith(f"summary {len(summaries) - 1}")
    assert "question 0?" not in texts(answer.messages)


async def test_a_failed_summary_leaves_the_old_turns_out_as_before(tmp_path: Path) -> None:
    harness = KernelHarness(
        tmp_path,
        [{"error": "overloaded", "status": 529}, {"text": "done"}],
        config={"context": {"max_tokens": 2048}},
    )
    sid = await harness.session()
    await harness.store.append(sid, turns(200))
    result = await harness.run(sid, "next question")
    assert result.stop_reason is StopReason.END_TURN
    [finished] = [e.event for e in harness.events if isinstance(e.event, CompactionFinished)]
    assert finished.message_id is None and "overloaded" in (finished.error or "")
    answer = harness.provider.requests[-1]
    assert "question 199?" in texts(answer.messages) and "question 100?" not in texts(
        answer.messages
    )
    assert not [m for m in await harness.store.history(sid) if m.kind == "compaction"]


async def test_compaction_drop_leaves_the_old_turns_out_without_a_summary(tmp_path: Path) -> None:
    harness = KernelHarness(
        tmp_path,
        [{"text": "done"}],
        config={"context": {"max_tokens": 2048, "compaction": "drop"}},
    )
    sid = await harness.session()
    await harness.store.append(sid, turns(200))
    await harness.run(sid, "next question")
    assert len(harness.provider.requests) == 1
    assert not [e for e in harness.events if isinstance(e.event, CompactionStarted)]


def test_a_summary_never_ends_between_a_tool_call_and_its_results() -> None:
    call = ToolCall(id="c1", name="read_file", arguments="{}")
    view = [
        message(Role.USER, WORDS),
        message(Role.ASSISTANT, tool_calls=[call]),
        message(Role.TOOL, WORDS * 20, tool_call_id="c1"),
        message(Role.ASSISTANT, "read it"),
        message(Role.USER, "now"),
    ]
    counter = EstimatingCounter()
    for keep in range(0, 2000, 25):
        found = plan(view, 4, keep, counter)
        if found is not None:
            assert len(found.replaced) in (1, 3, 4)  # before the call, or after its result
    assert plan(view, 4, 10_000, counter) is None  # everything fits: nothing to summarize


def test_the_view_puts_the_newest_summary_in_place_of_what_it_replaces() -> None:
    from tether.protocol import CompactedRange

    old = [message(Role.USER, "a"), message(Role.ASSISTANT, "b"), message(Role.USER, "c")]
    first = message(
        Role.USER,
        "s1",
        kind="compaction",
        replaces=CompactedRange(first_id=old[0].id, last_id=old[0].id, count=1),
    )
    history = [*old, first]
    assert compacted_view(history) == [first, old[1], old[2]]
    second = message(
        Role.USER,
        "s2",
        kind="compaction",
        replaces=CompactedRange(first_id=old[0].id, last_id=old[1].id, count=2),
    )
    tail = message(Role.ASSISTANT, "d")
    assert compacted_view([*history, tail, second]) == [second, old[2], tail]
    plain = [*old]
    assert compacted_view(plain) is plain


async def test_session_compact_summarizes_all_but_the_last_turn_under_a_lease(
    tmp_path: Path,
) -> None:
    harness = KernelHarness(tmp_path, [{"text": "short summary"}, {"text": "ok"}])
    sid = await harness.session()
    old = await harness.store.append(sid, turns(10))
    result = await harness.kernel.compact(CompactParams(session_id=sid), harness.events.append)
    assert result.compacted and result.message is not None
    assert result.message.replaces is not None
    assert result.message.replaces.last_id == old[-3].id  # the last turn is kept
    assert result.message.run_id == result.run_id
    assert [e.event.kind for e in harness.events] == ["compaction_started", "compaction_finished"]
    assert not (await harness.store.get(sid)).running  # the lease is given back

    await harness.run(sid, "go on")
    sent = harness.provider.requests[-1].messages
    assert [m.id for m in sent] == [result.message.id, old[-2].id, old[-1].id, sent[-1].id]

    again = await harness.kernel.compact(
        CompactParams(session_id=sid, keep_tokens=10_000), harness.events.append
    )
    assert not again.compacted  # it all fits in what is kept


async def test_session_compact_is_refused_while_a_run_holds_the_session(tmp_path: Path) -> None:
    from datetime import timedelta

    harness = KernelHarness(tmp_path, [])
    sid = await harness.session()
    await harness.store.append(sid, turns(3))
    await harness.store.claim_run(sid, "other-run", timedelta(minutes=1))
    with pytest.raises(SessionBusy):
        await harness.kernel.compact(CompactParams(session_id=sid), harness.events.append)


async def test_a_fork_from_before_the_summary_sends_its_whole_history(tmp_path: Path) -> None:
    from tether.protocol import ForkSessionParams

    harness = KernelHarness(
        tmp_path,
        [{"text": "summary"}, {"text": "done"}, {"text": "forked"}],
        config={"context": {"max_tokens": 3072}},
    )
    sid = await harness.session()
    old = await harness.store.append(sid, turns(200))
    await harness.run(sid, "next question")
    fork = await harness.store.fork(ForkSessionParams(session_id=sid, at_message_id=old[-1].id))
    harness.config = harness.config.overlay({"context": {"max_tokens": 100_000}})
    await harness.run(fork.session_id, "from the fork")
    sent = harness.provider.requests[-1].messages
    assert [m.id for m in sent[:400]] == [m.id for m in old]
    assert not [m for m in sent if m.kind == "compaction"]
