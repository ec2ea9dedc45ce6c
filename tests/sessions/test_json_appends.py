"""A small ``session/append`` stored and answered at once (``MemoryStore.append_json``).

It must store what the sliced path (``append_slices`` of one slice, then the handler's encoding)
stores, answer the same bytes, and refuse what that path refuses, storing nothing. The two are run
side by side on two memory stores with the same ids and the same clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from tether.protocol import (
    CompactedRange,
    ImageBlock,
    InvalidParams,
    MessageInput,
    Role,
    SessionBusy,
    SessionNotFound,
    TextBlock,
)
from tether.protocol.sessions import CreateSessionParams
from tether.rpc.handlers import _dump_slice, _OneSlice
from tether.sessions import MemoryStore, SessionService
from tether.sessions import in_memory as memory_module
from tether.sessions.ids import utcnow

from .conftest import STORES, WORKSPACE, answering, calling, open_store, user

SID = "s-1"


class SameIds:
    """Ids from a counter that both stores restart at the same point for each batch."""

    def __init__(self) -> None:
        self.next: Iterator[int] = itertools.count()

    def __call__(self) -> str:
        return f"m-{next(self.next):04d}"

    def restart(self, at: int) -> None:
        self.next = itertools.count(at)


@pytest.fixture
def ids(monkeypatch: pytest.MonkeyPatch) -> SameIds:
    same = SameIds()
    now = utcnow()
    monkeypatch.setattr(memory_module, "uuid7", same)
    monkeypatch.setattr(memory_module, "utcnow", lambda: now)
    return same


async def sliced(store: MemoryStore, messages: list[MessageInput]) -> bytes:
    """The path every store has: one slice through ``append_slices``, encoded as the handler
    encodes its answer."""
    stored = await store.append_slices(SID, _OneSlice(messages))
    return orjson.dumps({"messages": _dump_slice(stored, 0)}, option=orjson.OPT_UTC_Z)


async def both(ids: SameIds) -> tuple[MemoryStore, MemoryStore]:
    stores = MemoryStore(), MemoryStore()
    for store in stores:
        await store.create(CreateSessionParams(session_id=SID, title="t"), WORKSPACE)
    return stores


def batches() -> list[list[MessageInput]]:
    span = CompactedRange(first_id="m-0000", last_id="m-0001", count=2)
    return [
        [user("hello")],
        [user("a"), calling("c1", "c2"), answering("c1")],
        [answering("c2")],
        [
            MessageInput(
                role=Role.USER,
                content=[TextBlock(text="look"), ImageBlock(mime_type="image/png", data="iVBO")],
                metadata={"tags": ["x"], "n": 1},
            )
        ],
        [
            calling("c3"),
            MessageInput(
                role=Role.TOOL,
                tool_call_id="c3",
                content={"structured": [1, 2]},
                output={"rows": 2},
                is_error=False,
                name="read",
            ),
        ],
        [MessageInput(role=Role.USER, content="summary", kind="compaction", replaces=span)],
        [MessageInput(role=Role.ASSISTANT, content="", author="helper")],
    ]


async def test_append_json_stores_and_answers_what_the_sliced_path_does(ids: SameIds) -> None:
    fast, slow = await both(ids)
    position = 0
    for batch in batches():
        ids.restart(position)
        answer = fast.append_json(SID, batch)
        ids.restart(position)
        assert answer == await sliced(slow, batch)
        position += len(batch)
        assert fast.get_json(SID) == slow.get_json(SID)
    assert [m.model_dump() for m in await fast.history(SID)] == [
        m.model_dump() for m in await slow.history(SID)
    ]
    assert orjson.loads(answer)["messages"][0]["id"] == f"m-{position - 1:04d}"
    fast_record, slow_record = fast._records[SID], slow._records[SID]
    assert fast_record.messages == slow_record.messages
    assert fast_record.positions == slow_record.positions
    assert fast_record.tool_call_ids == slow_record.tool_call_ids
    assert fast_record.session == slow_record.session
    assert fast_record.session.model_fields_set == slow_record.session.model_fields_set
    page = await fast.messages(SID, cursor=None, limit=3, order="desc")
    assert page == await slow.messages(SID, cursor=None, limit=3, order="desc")


async def test_append_json_refuses_what_the_sliced_path_refuses_and_stores_nothing(
    ids: SameIds,
) -> None:
    fast, slow = await both(ids)
    for store in (fast, slow):
        await store.append_slices(SID, _OneSlice([calling("c1")]))
    before = fast.get_json(SID), slow.get_json(SID)

    unanswerable = [user("a"), answering("no-such-call")]
    with pytest.raises(InvalidParams) as on_fast:
        fast.append_json(SID, unanswerable)
    with pytest.raises(InvalidParams) as on_slow:
        await sliced(slow, unanswerable)
    assert on_fast.value.data == on_slow.value.data
    assert [f["field"] for f in on_fast.value.data["fields"]] == ["messages.1.toolCallId"]

    with pytest.raises(SessionNotFound):
        fast.append_json("no-such-session", [user("a")])

    for store in (fast, slow):
        await store.claim_run(SID, "run-1", timedelta(minutes=1))
    with pytest.raises(SessionBusy) as busy_fast:
        fast.append_json(SID, [user("a")])
    with pytest.raises(SessionBusy) as busy_slow:
        await sliced(slow, [user("a")])
    assert busy_fast.value.data == busy_slow.value.data
    for store in (fast, slow):
        await store.release_run(SID, "run-1")

    assert (fast.get_json(SID), slow.get_json(SID)) == before
    assert len(await fast.history(SID)) == 1


async def test_the_appended_input_is_the_callers_to_change_afterwards(ids: SameIds) -> None:
    store, _ = await both(ids)
    message = MessageInput(role=Role.USER, content=[TextBlock(text="a")], metadata={"k": [1]})
    store.append_json(SID, [message])
    message.metadata["k"].append(2)  # type: ignore[index]
    message.content[0].text = "changed"  # type: ignore[index, union-attr]
    (stored,) = await store.history(SID)
    assert stored.metadata == {"k": [1]}
    assert stored.content == [TextBlock(text="a")]


@pytest.mark.parametrize("kind", [k for k in STORES if k != "memory"])
async def test_a_store_that_cannot_answer_encoded_leaves_it_to_append_slices(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = await open_store(kind, tmp_path, request)
    try:
        session = await store.create(CreateSessionParams(), WORKSPACE)
        assert SessionService(store).append_json(session.session_id, [user("a")]) is None
        assert (await store.get(session.session_id)).message_count == 0
    finally:
        await store.aclose()


async def test_the_service_appends_through_a_memory_store_at_once(ids: SameIds) -> None:
    store, _ = await both(ids)
    answer = SessionService(store).append_json(SID, [user("hi")])
    assert answer is not None
    assert orjson.loads(answer)["messages"][0]["content"] == "hi"
    assert (await store.get(SID)).message_count == 1
