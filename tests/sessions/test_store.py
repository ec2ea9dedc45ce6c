"""Every session store (memory, SQLite; PostgreSQL when configured) against its contract."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from tether.protocol import (
    CompactedRange,
    ConfigureSessionParams,
    ErrorCode,
    InvalidParams,
    Message,
    MessageInput,
    MessagesResult,
    Role,
    Session,
    SessionNotFound,
    TextBlock,
    ToolCall,
)
from tether.protocol.sessions import CreateSessionParams, ForkSessionParams
from tether.sessions import MemoryStore, SessionStore
from tether.sessions.store import DumpedMessages, Order

from .conftest import WORKSPACE, answering, calling, user

OTHER_WORKSPACE = "file:///work/other"


async def fill(store: SessionStore, session_id: str, count: int) -> list[Message]:
    """Append ``count`` user messages whose contents are "0", "1", ... in order."""
    return await store.append(session_id, [user(str(i)) for i in range(count)]) if count else []


async def all_messages(store: SessionStore, session_id: str) -> list[Message]:
    return (await store.messages(session_id, cursor=None, limit=1000, order="asc")).messages


async def walk(
    store: SessionStore, session_id: str, *, limit: int, order: Order
) -> list[MessagesResult]:
    """Every page of a session's messages, following nextCursor until it is absent."""
    pages = [await store.messages(session_id, cursor=None, limit=limit, order=order)]
    while pages[-1].next_cursor is not None:
        assert len(pages) < 1000, "the walk does not end"
        cursor = pages[-1].next_cursor
        pages.append(await store.messages(session_id, cursor=cursor, limit=limit, order=order))
    return pages


async def yield_to_other_tasks() -> None:
    """Suspend once so the event loop runs the other ready tasks; no time passes."""
    loop = asyncio.get_running_loop()
    resumed = loop.create_future()
    loop.call_soon(resumed.set_result, None)
    await resumed


# --- create and get ---------------------------------------------------------------------------


async def test_create_returns_a_new_session_with_the_given_fields_and_no_messages(
    store: SessionStore,
) -> None:
    params = CreateSessionParams(
        title="t", agent_id="a", model="m", settings={"k": 1}, metadata={"x": "y"}, tools=["read"]
    )
    session = await store.create(params, WORKSPACE)
    assert uuid.UUID(session.session_id).version == 7
    assert session.workspace == WORKSPACE
    assert (session.title, session.agent_id, session.model) == ("t", "a", "m")
    assert (session.settings, session.metadata, session.tools) == ({"k": 1}, {"x": "y"}, ["read"])
    assert session.message_count == 0
    assert session.running is False
    assert session.created_at == session.updated_at
    assert session.created_at.tzinfo is not None
    assert session.created_at.utcoffset() == timedelta(0)


async def test_create_without_settings_or_metadata_gives_empty_objects(store: SessionStore) -> None:
    session = await store.create(CreateSessionParams(), WORKSPACE)
    assert (session.settings, session.metadata, session.tools) == ({}, {}, None)
    assert session.to_wire()["settings"] == {}


async def test_get_returns_the_session_as_created(store: SessionStore, session: Session) -> None:
    assert await store.get(session.session_id) == session


async def test_each_created_session_gets_its_own_id(store: SessionStore) -> None:
    sessions = [await store.create(CreateSessionParams(), WORKSPACE) for _ in range(20)]
    assert len({s.session_id for s in sessions}) == 20


# --- unknown sessions -------------------------------------------------------------------------

MissingCall = Callable[[SessionStore, str], Awaitable[Any]]
BY_ID_METHODS: dict[str, MissingCall] = {
    "get": lambda store, sid: store.get(sid),
    "messages": lambda store, sid: store.messages(sid, cursor=None, limit=10, order="asc"),
    "append": lambda store, sid: store.append(sid, [user("hi")]),
    "configure": lambda store, sid: store.configure(
        sid, ConfigureSessionParams(session_id=sid, title="t")
    ),
    "clear": lambda store, sid: store.clear(sid),
    "delete": lambda store, sid: store.delete(sid),
}


@pytest.mark.parametrize("method", BY_ID_METHODS.values(), ids=BY_ID_METHODS.keys())
async def test_every_method_raises_session_not_found_for_an_unknown_id(
    store: SessionStore, session: Session, method: MissingCall
) -> None:
    with pytest.raises(SessionNotFound) as caught:
        await method(store, "no-such-session")
    assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
    assert caught.value.data == {"sessionId": "no-such-session"}


@pytest.mark.parametrize("method", BY_ID_METHODS.values(), ids=BY_ID_METHODS.keys())
async def test_every_method_raises_session_not_found_for_a_deleted_session(
    store: SessionStore, session: Session, method: MissingCall
) -> None:
    await store.delete(session.session_id)
    with pytest.raises(SessionNotFound) as caught:
        await method(store, session.session_id)
    assert caught.value.data == {"sessionId": session.session_id}


# --- reads return copies ----------------------------------------------------------------------


def mutate_session(session: Session) -> None:
    session.title = "changed"
    session.settings["thinkingLevel"] = "changed"
    session.settings["nested"]["depth"] = 99
    session.metadata["tags"].append("changed")
    session.metadata["new"] = True
    assert session.tools is not None
    session.tools.append("write")
    session.message_count = 1234


async def test_mutating_any_returned_session_never_changes_what_the_store_returns_next(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    expected = await store.get(sid)
    assert expected == session
    returned = [
        session,
        await store.get(sid),
        (await store.list_sessions(workspace=None, cursor=None, limit=10)).sessions[0],
        await store.configure(sid, ConfigureSessionParams(session_id=sid, model=session.model)),
        await store.clear(sid),
    ]
    expected = await store.get(sid)
    for copy in returned:
        mutate_session(copy)
    assert await store.get(sid) == expected
    assert (await store.list_sessions(workspace=None, cursor=None, limit=10)).sessions == [expected]


async def test_mutating_the_create_and_configure_params_afterwards_never_changes_the_session(
    store: SessionStore,
) -> None:
    params = CreateSessionParams(settings={"a": {"b": 1}}, metadata={"m": [1]}, tools=["read"])
    session = await store.create(params, WORKSPACE)
    changes = ConfigureSessionParams(session_id=session.session_id, settings={"c": [1]})
    configured = await store.configure(session.session_id, changes)
    assert params.settings is not None and params.metadata is not None and params.tools
    params.settings["a"]["b"] = 2
    params.metadata["m"].append(2)
    params.tools.append("write")
    assert changes.settings is not None
    changes.settings["c"].append(2)
    assert await store.get(session.session_id) == configured
    assert configured.settings == {"c": [1]}
    assert configured.metadata == {"m": [1]}


def rich_message() -> MessageInput:
    return MessageInput(
        role=Role.ASSISTANT,
        content=[TextBlock(text="calling")],
        tool_calls=[ToolCall(id="c1", name="read", arguments="{}")],
        metadata={"trace": {"step": 1}},
    )


def mutate_message(message: Message) -> None:
    assert isinstance(message.content, list) and message.tool_calls and message.metadata
    block = message.content[0]
    assert isinstance(block, TextBlock)
    block.text = "changed"
    message.content.append(TextBlock(text="extra"))
    message.tool_calls[0].name = "changed"
    message.tool_calls.append(ToolCall(id="c2", name="write", arguments="{}"))
    message.metadata["trace"]["step"] = 99
    message.metadata["new"] = True


async def test_mutating_returned_messages_never_changes_what_the_store_returns_next(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    [appended] = await store.append(sid, [rich_message()])
    expected = await all_messages(store, sid)
    assert expected == [appended]
    mutate_message(appended)
    mutate_message((await store.messages(sid, cursor=None, limit=10, order="asc")).messages[0])
    mutate_message((await store.messages(sid, cursor=None, limit=10, order="desc")).messages[0])
    assert await all_messages(store, sid) == expected


async def test_mutating_a_plain_text_message_copy_never_changes_the_store(
    store: SessionStore, session: Session
) -> None:
    [appended] = await store.append(session.session_id, [user("hello")])
    appended.content = "changed"
    appended.name = "changed"
    [read] = await all_messages(store, session.session_id)
    read.content = "changed too"
    [again] = await all_messages(store, session.session_id)
    assert (again.content, again.name) == ("hello", None)


async def test_mutating_an_appended_input_afterwards_never_changes_the_stored_message(
    store: SessionStore, session: Session
) -> None:
    source = rich_message()
    [appended] = await store.append(session.session_id, [source])
    assert isinstance(source.content, list) and source.tool_calls and source.metadata
    source.content.append(TextBlock(text="extra"))
    source.tool_calls[0].name = "changed"
    source.metadata["trace"]["step"] = 99
    assert await all_messages(store, session.session_id) == [appended]


async def test_an_empty_tool_calls_list_is_stored_as_no_tool_calls(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    [appended] = await store.append(
        sid, [MessageInput(role="assistant", content="x", tool_calls=[])]
    )
    assert appended.tool_calls is None
    [stored] = await all_messages(store, sid)
    assert stored.tool_calls is None and "toolCalls" not in stored.to_wire()


# --- append -----------------------------------------------------------------------------------


async def test_append_fills_in_ids_and_timestamps_and_keeps_the_given_fields(
    store: SessionStore, session: Session
) -> None:
    batch = [user("question"), calling("c1"), answering("c1")]
    await store.claim_run(session.session_id, "run-1", timedelta(minutes=5))
    appended = await store.append(session.session_id, batch, run_id="run-1")
    assert [m.role for m in appended] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert [uuid.UUID(m.id).version for m in appended] == [7, 7, 7]
    assert [m.id for m in appended] == sorted(m.id for m in appended)
    assert {m.run_id for m in appended} == {"run-1"}
    assert all(m.created_at.utcoffset() == timedelta(0) for m in appended)
    assert appended[1].tool_calls == [ToolCall(id="c1", name="read", arguments="{}")]
    assert appended[2].tool_call_id == "c1"
    assert await all_messages(store, session.session_id) == appended


async def test_append_counts_the_messages_and_bumps_updated_at(
    store: SessionStore, session: Session
) -> None:
    appended = await fill(store, session.session_id, 3)
    after = await store.get(session.session_id)
    assert after.message_count == 3
    assert after.updated_at == appended[-1].created_at
    assert after.updated_at >= session.updated_at


class BackwardsClock:
    """The stores' clock, set by the test: it can go back (NTP; another process's clock)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = datetime.now(UTC)
        for module in ("in_memory", "sql.store"):
            monkeypatch.setattr(f"tether.sessions.{module}.utcnow", lambda: self.now)

    def back(self, by: timedelta) -> None:
        self.now -= by


def assert_in_time_order(messages: list[Message]) -> None:
    times = [m.created_at for m in messages]
    assert times == sorted(times)


async def test_message_times_never_run_back_along_positions_when_the_clock_goes_back(
    store: SessionStore, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = BackwardsClock(monkeypatch)
    sid = session.session_id
    appended = await store.append(sid, [user("0"), user("1")])
    clock.back(timedelta(hours=1))
    appended += await store.append(sid, [user("2")])
    clock.back(timedelta(hours=1))
    await store.configure(sid, ConfigureSessionParams(session_id=sid, title="t"))
    appended += await store.append(sid, [user("3")])
    child = await store.fork(ForkSessionParams(session_id=sid))
    clock.back(timedelta(hours=1))
    forked = await store.append(child.session_id, [user("4")])

    assert await all_messages(store, sid) == appended  # the times returned are the stored ones
    assert_in_time_order(appended)
    assert await all_messages(store, child.session_id) == appended + forked
    assert_in_time_order(appended + forked)
    assert (await store.get(sid)).updated_at == appended[-1].created_at


async def test_an_appended_message_without_tool_fields_goes_on_the_wire_without_them(
    store: SessionStore, session: Session
) -> None:
    [message] = await store.append(session.session_id, [user("hi")])
    assert set(message.to_wire()) == {"id", "role", "content", "createdAt"}
    assert message.to_wire()["createdAt"].endswith("Z")


async def test_a_compaction_message_keeps_its_kind_and_range_in_reads_forks_and_dumps(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    old = await store.append(sid, [user("a"), calling("c1"), answering("c1")])
    span = CompactedRange(first_id=old[0].id, last_id=old[-1].id, count=3)
    summary = MessageInput(role=Role.USER, content="a summary", kind="compaction", replaces=span)
    [stored] = await store.append(sid, [summary])
    assert (stored.kind, stored.replaces) == ("compaction", span)
    assert (await store.history(sid))[-1] == stored
    assert (await all_messages(store, sid))[-1] == stored
    child = await store.fork(ForkSessionParams(session_id=sid))
    assert (await store.history(child.session_id))[-1] == stored
    wire = stored.to_wire()
    assert wire["kind"] == "compaction"
    assert wire["replaces"] == {"firstId": old[0].id, "lastId": old[-1].id, "count": 3}
    page = await store.messages(sid, cursor=None, limit=10, order="asc")
    if isinstance(page.messages, DumpedMessages):  # a store that dumps without building
        assert page.messages.dumped(3, 4) == [stored.model_dump(by_alias=True, exclude_none=True)]
    assert "kind" not in old[0].to_wire() and "replaces" not in old[0].to_wire()


async def test_200_concurrent_tasks_appending_50_messages_each_lose_nothing(
    store: SessionStore, session: Session
) -> None:
    # a SQL store writes each append to disk: fewer of them keep the test quick
    tasks, per_task = (200, 50) if isinstance(store, MemoryStore) else (40, 10)
    sid = session.session_id

    async def append_in_turn(task: int) -> None:
        for i in range(per_task):
            await store.append(sid, [user(f"{task}:{i}")])
            await yield_to_other_tasks()

    await asyncio.gather(*(append_in_turn(task) for task in range(tasks)))

    result = await store.messages(sid, cursor=None, limit=1000, order="asc")
    assert result.total == tasks * per_task == (await store.get(sid)).message_count
    history = [m for page in await walk(store, sid, limit=1000, order="asc") for m in page.messages]
    senders = [str(m.content).split(":") for m in history]
    for task in range(tasks):
        assert [int(i) for t, i in senders if int(t) == task] == list(range(per_task))
    first_senders = [t for t, _ in senders[:tasks]]
    assert len(set(first_senders)) > 1, "the tasks did not interleave"
    assert len({m.id for m in history}) == tasks * per_task


async def test_append_is_all_or_nothing_when_a_tool_result_answers_an_unknown_call(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, 2)
    before = await store.get(sid)
    batch = [user("a"), calling("c1"), answering("no-such-call"), user("b")]
    with pytest.raises(InvalidParams) as caught:
        await store.append(sid, batch)
    assert caught.value.code == ErrorCode.INVALID_PARAMS
    assert [f["field"] for f in caught.value.data["fields"]] == ["messages.2.toolCallId"]
    assert await store.get(sid) == before
    assert [m.content for m in await all_messages(store, sid)] == ["0", "1"]
    # c1 was in the rejected batch only, so it cannot be answered later.
    with pytest.raises(InvalidParams):
        await store.append(sid, [answering("c1")])


async def _slices(*slices: list[MessageInput]) -> AsyncIterator[list[MessageInput]]:
    for batch in slices:
        await asyncio.sleep(0)
        yield batch


async def _failing_after(*slices: list[MessageInput]) -> AsyncIterator[list[MessageInput]]:
    async for batch in _slices(*slices):
        yield batch
    raise InvalidParams.field("messages.9.role", "a bad message in a later slice")


async def test_append_slices_answers_what_is_stored_and_answers_calls_of_earlier_slices(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, 1)
    answer = await store.append_slices(
        sid, _slices([user("a"), calling("c1")], [answering("c1"), user("b")])
    )
    stored = await all_messages(store, sid)
    assert list(answer) == stored[1:]
    assert len(answer) == 4 and answer[1:3] == stored[2:4]
    assert (await store.get(sid)).message_count == 5


async def test_append_slices_stores_nothing_when_a_slice_fails(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, 2)
    before = await store.get(sid)
    with pytest.raises(InvalidParams):
        await store.append_slices(sid, _failing_after([user("a"), calling("c1")], [user("b")]))
    with pytest.raises(InvalidParams) as caught:
        await store.append_slices(
            sid, _slices([user("a"), user("b")], [user("c"), answering("no-such-call")])
        )
    assert [f["field"] for f in caught.value.data["fields"]] == ["messages.3.toolCallId"]
    assert await store.get(sid) == before
    assert [m.content for m in await all_messages(store, sid)] == ["0", "1"]
    with pytest.raises(InvalidParams):  # c1 was in a batch that failed
        await store.append(sid, [answering("c1")])


async def test_a_sliced_append_whose_answered_call_is_cleared_meanwhile_stores_nothing(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.append(sid, [calling("c1")])

    async def slices() -> AsyncIterator[list[MessageInput]]:
        yield [user("a"), answering("c1")]
        await store.clear(sid)  # another request, between two slices
        yield [user("b")]

    with pytest.raises(InvalidParams):
        await store.append_slices(sid, slices())
    assert (await store.get(sid)).message_count == 0


async def test_a_sliced_append_takes_no_time_before_a_write_made_meanwhile(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id

    async def slices() -> AsyncIterator[list[MessageInput]]:
        yield [user("a")]
        await store.append(sid, [user("between")])  # another request, between two slices
        yield [user("b")]

    await store.append_slices(sid, slices())
    stored = await all_messages(store, sid)
    assert [m.content for m in stored] == ["between", "a", "b"]
    times = [m.created_at for m in stored]
    assert times == sorted(times)


async def test_a_tool_result_answering_a_call_from_an_earlier_append_is_accepted(
    store: SessionStore, session: Session
) -> None:
    await store.append(session.session_id, [calling("c1", "c2")])
    appended = await store.append(session.session_id, [answering("c2"), answering("c1")])
    assert [m.tool_call_id for m in appended] == ["c2", "c1"]


async def test_a_tool_result_answering_a_call_from_the_same_batch_is_accepted(
    store: SessionStore, session: Session
) -> None:
    appended = await store.append(session.session_id, [calling("c1"), answering("c1")])
    assert len(appended) == 2


async def test_a_tool_result_placed_before_its_call_in_a_batch_is_rejected(
    store: SessionStore, session: Session
) -> None:
    with pytest.raises(InvalidParams):
        await store.append(session.session_id, [answering("c1"), calling("c1")])
    assert await all_messages(store, session.session_id) == []


async def test_a_tool_result_answering_a_call_of_another_session_is_rejected(
    store: SessionStore, session: Session
) -> None:
    other = await store.create(CreateSessionParams(), WORKSPACE)
    await store.append(other.session_id, [calling("c1")])
    with pytest.raises(InvalidParams):
        await store.append(session.session_id, [answering("c1")])


# --- append cost ------------------------------------------------------------------------------


class WatchedList(list[Any]):
    """A list that counts the operations that read or copy the whole of it."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(items)
        self.whole_reads = 0

    def __iter__(self) -> Iterator[Any]:
        self.whole_reads += 1
        return super().__iter__()

    def __reversed__(self) -> Iterator[Any]:
        self.whole_reads += 1
        return super().__reversed__()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            self.whole_reads += 1
        return super().__getitem__(index)

    def __contains__(self, item: object) -> bool:
        self.whole_reads += 1
        return super().__contains__(item)

    def copy(self) -> list[Any]:
        self.whole_reads += 1
        return super().copy()

    def index(self, *args: Any) -> int:
        self.whole_reads += 1
        return super().index(*args)

    def count(self, item: Any) -> int:
        self.whole_reads += 1
        return super().count(item)


class WatchedDict(dict[str, Any]):
    """A dict that counts the operations that read or copy the whole of it."""

    def __init__(self, items: dict[str, Any]) -> None:
        super().__init__(items)
        self.whole_reads = 0

    def __iter__(self) -> Iterator[str]:
        self.whole_reads += 1
        return super().__iter__()

    def keys(self) -> Any:
        self.whole_reads += 1
        return super().keys()

    def values(self) -> Any:
        self.whole_reads += 1
        return super().values()

    def items(self) -> Any:
        self.whole_reads += 1
        return super().items()

    def copy(self) -> dict[str, Any]:
        self.whole_reads += 1
        return super().copy()


class WatchedIds:
    """Stands in for a session's tool call ids (id -> position); counts walks over all of them.

    Not a ``dict`` subclass: copying a real dict subclass happens in C without calling
    ``__iter__``.
    """

    def __init__(self, ids: dict[str, int]) -> None:
        self._ids = dict(ids)
        self.whole_reads = 0

    def __setitem__(self, key: str, value: int) -> None:
        self._ids[key] = value

    def get(self, key: str) -> int | None:
        return self._ids.get(key)

    def __iter__(self) -> Iterator[str]:
        self.whole_reads += 1
        return iter(self._ids)

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def __len__(self) -> int:
        return len(self._ids)


async def test_appending_to_a_100k_message_history_neither_copies_nor_walks_it(
    store: SessionStore, session: Session
) -> None:
    if not isinstance(store, MemoryStore):
        pytest.skip("looks inside the memory store")
    sid = session.session_id
    same_input = [user("x")] * 10_000
    for _ in range(10):
        await store.append(sid, same_input)
    record = store._records[sid]
    history, positions = WatchedList(record.messages), WatchedDict(record.positions)
    record.messages, record.positions = history, positions
    oldest, newest = history[0], history[-1]

    await store.append(sid, [user("one more")])

    assert record.messages is history and record.positions is positions
    assert (history.whole_reads, positions.whole_reads) == (0, 0)
    assert len(history) == len(positions) == 100_001
    assert history[0] is oldest and history[-2] is newest
    page = await store.messages(sid, cursor=None, limit=1, order="desc")
    assert page.total == 100_001
    assert page.messages[0].content == "one more"


async def test_appending_to_a_history_of_many_tool_calls_does_not_walk_their_ids(
    store: SessionStore, session: Session
) -> None:
    if not isinstance(store, MemoryStore):
        pytest.skip("looks inside the memory store")
    sid = session.session_id
    calls = 5_000
    await store.append(
        sid, [m for i in range(calls) for m in (calling(f"c{i}"), answering(f"c{i}"))]
    )
    record = store._records[sid]
    known = WatchedIds(record.tool_call_ids)
    record.tool_call_ids = known  # type: ignore[assignment]

    await store.append(sid, [calling("new"), answering("new"), answering("c7")])

    assert len(known) == calls + 1
    assert known.whole_reads == 0


# --- messages pagination ----------------------------------------------------------------------


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_the_messages_of_an_empty_session_are_one_empty_last_page(
    store: SessionStore, session: Session, order: Order
) -> None:
    page = await store.messages(session.session_id, cursor=None, limit=10, order=order)
    assert (page.messages, page.total, page.next_cursor) == ([], 0, None)


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize(
    ("count", "limit"),
    [(1, 1), (5, 1), (5, 5), (5, 7), (6, 3), (6, 2), (7, 3), (10, 4), (250, 100)],
    ids=lambda value: str(value),
)
async def test_a_paged_walk_visits_every_message_once_in_order(
    store: SessionStore, session: Session, count: int, limit: int, order: Order
) -> None:
    await fill(store, session.session_id, count)
    pages = await walk(store, session.session_id, limit=limit, order=order)

    expected = [str(i) for i in range(count)]
    if order == "desc":
        expected.reverse()
    assert [m.content for page in pages for m in page.messages] == expected
    assert len(pages) == -(-count // limit)
    assert all(len(page.messages) == limit for page in pages[:-1])
    assert 1 <= len(pages[-1].messages) <= limit
    assert {page.total for page in pages} == {count}
    assert pages[-1].next_cursor is None
    assert all(page.next_cursor is not None for page in pages[:-1])


@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_a_limit_equal_to_the_total_gives_one_page_without_a_next_cursor(
    store: SessionStore, session: Session, order: Order
) -> None:
    await fill(store, session.session_id, 4)
    page = await store.messages(session.session_id, cursor=None, limit=4, order=order)
    assert len(page.messages) == 4
    assert page.next_cursor is None


async def test_the_first_descending_page_holds_the_newest_messages_newest_first(
    store: SessionStore, session: Session
) -> None:
    await fill(store, session.session_id, 10)
    page = await store.messages(session.session_id, cursor=None, limit=3, order="desc")
    assert [m.content for m in page.messages] == ["9", "8", "7"]


async def test_messages_appended_during_an_ascending_walk_are_reached_by_it(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, 4)
    first = await store.messages(sid, cursor=None, limit=3, order="asc")
    await store.append(sid, [user("late")])
    rest = await store.messages(sid, cursor=first.next_cursor, limit=3, order="asc")
    assert [m.content for m in rest.messages] == ["3", "late"]
    assert rest.total == 5
    assert rest.next_cursor is None


async def test_a_session_list_cursor_is_rejected_by_messages(
    store: SessionStore, session: Session
) -> None:
    await store.create(CreateSessionParams(), WORKSPACE)
    await fill(store, session.session_id, 3)
    listing = await store.list_sessions(workspace=None, cursor=None, limit=1)
    assert listing.next_cursor is not None
    with pytest.raises(InvalidParams) as caught:
        await store.messages(session.session_id, cursor=listing.next_cursor, limit=1, order="asc")
    assert caught.value.code == ErrorCode.INVALID_PARAMS


GARBAGE_CURSORS = ["", "garbage", "!!!", "é", "W10", "WyJtZXNzYWdlcyJd", "bnVsbA", "e30"]


@pytest.mark.parametrize("cursor", GARBAGE_CURSORS)
@pytest.mark.parametrize("order", ["asc", "desc"])
async def test_a_garbage_cursor_is_rejected_by_messages(
    store: SessionStore, session: Session, cursor: str, order: Order
) -> None:
    await fill(store, session.session_id, 3)
    with pytest.raises(InvalidParams):
        await store.messages(session.session_id, cursor=cursor, limit=1, order=order)


async def test_a_messages_cursor_invalidated_by_clear_is_rejected(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await fill(store, sid, 3)
    page = await store.messages(sid, cursor=None, limit=1, order="asc")
    await store.clear(sid)
    await fill(store, sid, 3)
    with pytest.raises(InvalidParams):
        await store.messages(sid, cursor=page.next_cursor, limit=1, order="asc")


async def test_a_messages_cursor_of_another_session_is_rejected(
    store: SessionStore, session: Session
) -> None:
    other = await store.create(CreateSessionParams(), WORKSPACE)
    await fill(store, other.session_id, 3)
    await fill(store, session.session_id, 3)
    page = await store.messages(other.session_id, cursor=None, limit=1, order="asc")
    with pytest.raises(InvalidParams):
        await store.messages(session.session_id, cursor=page.next_cursor, limit=1, order="asc")


# --- list_sessions ----------------------------------------------------------------------------


async def list_all(store: SessionStore, workspace: str | None = None) -> list[str]:
    result = await store.list_sessions(workspace=workspace, cursor=None, limit=1000)
    return [s.session_id for s in result.sessions]


async def test_an_empty_store_lists_no_sessions_and_no_cursor(store: SessionStore) -> None:
    result = await store.list_sessions(workspace=None, cursor=None, limit=10)
    assert (result.sessions, result.next_cursor) == ([], None)


async def test_sessions_are_listed_newest_updated_at_first(store: SessionStore) -> None:
    a, b, c = [await store.create(CreateSessionParams(title=t), WORKSPACE) for t in "abc"]
    assert await list_all(store) == [c.session_id, b.session_id, a.session_id]
    await fill(store, a.session_id, 1)
    assert await list_all(store) == [a.session_id, c.session_id, b.session_id]
    await store.configure(b.session_id, ConfigureSessionParams(session_id=b.session_id, title="B"))
    assert await list_all(store) == [b.session_id, a.session_id, c.session_id]
    await store.clear(c.session_id)
    listed = (await store.list_sessions(workspace=None, cursor=None, limit=10)).sessions
    assert [s.session_id for s in listed] == [c.session_id, b.session_id, a.session_id]
    assert [s.updated_at for s in listed] == sorted((s.updated_at for s in listed), reverse=True)


async def test_sessions_are_filtered_by_workspace(store: SessionStore) -> None:
    here = [await store.create(CreateSessionParams(), WORKSPACE) for _ in range(3)]
    there = [await store.create(CreateSessionParams(), OTHER_WORKSPACE) for _ in range(2)]
    assert set(await list_all(store, WORKSPACE)) == {s.session_id for s in here}
    assert set(await list_all(store, OTHER_WORKSPACE)) == {s.session_id for s in there}
    assert len(await list_all(store)) == 5
    assert await list_all(store, "file:///nowhere") == []


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 8])
async def test_paging_through_sessions_visits_each_once_newest_first(
    store: SessionStore, limit: int
) -> None:
    created = [await store.create(CreateSessionParams(), WORKSPACE) for _ in range(7)]
    await store.create(CreateSessionParams(), OTHER_WORKSPACE)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        result = await store.list_sessions(workspace=WORKSPACE, cursor=cursor, limit=limit)
        pages += 1
        assert 1 <= len(result.sessions) <= limit
        seen += [s.session_id for s in result.sessions]
        if result.next_cursor is None:
            break
        assert len(result.sessions) == limit
        cursor = result.next_cursor
    assert seen == [s.session_id for s in reversed(created)]
    assert pages == -(-7 // limit)


@pytest.mark.parametrize("cursor", GARBAGE_CURSORS)
async def test_a_garbage_cursor_is_rejected_by_list_sessions(
    store: SessionStore, session: Session, cursor: str
) -> None:
    with pytest.raises(InvalidParams):
        await store.list_sessions(workspace=None, cursor=cursor, limit=1)


async def test_a_messages_cursor_is_rejected_by_list_sessions(
    store: SessionStore, session: Session
) -> None:
    await fill(store, session.session_id, 3)
    page = await store.messages(session.session_id, cursor=None, limit=1, order="asc")
    with pytest.raises(InvalidParams):
        await store.list_sessions(workspace=None, cursor=page.next_cursor, limit=1)


async def test_deleted_sessions_are_not_listed(store: SessionStore, session: Session) -> None:
    other = await store.create(CreateSessionParams(), WORKSPACE)
    await store.delete(session.session_id)
    assert await list_all(store) == [other.session_id]


# --- configure --------------------------------------------------------------------------------


async def test_configure_replaces_only_the_fields_it_is_given(
    store: SessionStore, session: Session
) -> None:
    changes = ConfigureSessionParams.model_validate(
        {"sessionId": session.session_id, "model": "m2", "tools": ["write"]}
    )
    configured = await store.configure(session.session_id, changes)
    assert (configured.model, configured.tools) == ("m2", ["write"])
    unchanged = {"model", "tools", "updated_at"}
    assert configured.model_dump(exclude=unchanged) == session.model_dump(exclude=unchanged)
    assert await store.get(session.session_id) == configured


async def test_configure_with_an_explicit_null_title_clears_it(
    store: SessionStore, session: Session
) -> None:
    changes = ConfigureSessionParams.model_validate(
        {"sessionId": session.session_id, "title": None}
    )
    configured = await store.configure(session.session_id, changes)
    assert configured.title is None
    assert "title" not in configured.to_wire()
    assert configured.model == session.model


async def test_configure_replaces_settings_and_metadata_whole(
    store: SessionStore, session: Session
) -> None:
    changes = ConfigureSessionParams.model_validate(
        {"sessionId": session.session_id, "settings": {"temperature": 0}, "metadata": {}}
    )
    configured = await store.configure(session.session_id, changes)
    assert (configured.settings, configured.metadata) == ({"temperature": 0}, {})


async def test_configure_with_null_settings_and_metadata_empties_them(
    store: SessionStore, session: Session
) -> None:
    changes = ConfigureSessionParams.model_validate(
        {"sessionId": session.session_id, "settings": None, "metadata": None}
    )
    configured = await store.configure(session.session_id, changes)
    assert (configured.settings, configured.metadata) == ({}, {})
    assert configured.to_wire()["settings"] == {}


async def test_configure_with_no_fields_changes_nothing_but_updated_at(
    store: SessionStore, session: Session
) -> None:
    changes = ConfigureSessionParams(session_id=session.session_id)
    configured = await store.configure(session.session_id, changes)
    assert configured.model_dump(exclude={"updated_at"}) == session.model_dump(
        exclude={"updated_at"}
    )
    assert configured.updated_at >= session.updated_at


async def test_a_mode_and_remembered_answers_are_kept_and_a_fork_inherits_them(
    store: SessionStore, session: Session
) -> None:
    assert (session.mode, session.permissions.to_wire()) == (
        "ask",
        {"allowAlways": [], "rejectAlways": []},
    )
    changes = ConfigureSessionParams.model_validate(
        {
            "sessionId": session.session_id,
            "mode": "accept_edits",
            "permissions": {"allowAlways": ["write_file"], "rejectAlways": ["run_command"]},
        }
    )
    configured = await store.configure(session.session_id, changes)
    read = await store.get(session.session_id)
    fork = await store.fork(ForkSessionParams(session_id=session.session_id))
    for seen in (configured, read, fork):
        assert seen.mode == "accept_edits"
        assert seen.permissions.allow_always == ["write_file"]
        assert seen.permissions.reject_always == ["run_command"]
    read.permissions.allow_always.append("mutated")  # the caller's own copy
    assert (await store.get(session.session_id)).permissions.allow_always == ["write_file"]


async def test_a_null_mode_is_ask_and_null_permissions_forget_every_answer(
    store: SessionStore, session: Session
) -> None:
    remembered = {
        "sessionId": session.session_id,
        "mode": "read_only",
        "permissions": {"rejectAlways": ["run_command"]},
    }
    await store.configure(session.session_id, ConfigureSessionParams.model_validate(remembered))
    forgotten = {"sessionId": session.session_id, "mode": None, "permissions": None}
    configured = await store.configure(
        session.session_id, ConfigureSessionParams.model_validate(forgotten)
    )
    assert configured.mode == "ask"
    assert configured.permissions.reject_always == []


async def test_the_plan_is_replaced_whole_kept_by_a_fork_and_cleared_with_null(
    store: SessionStore, session: Session
) -> None:
    first = {"content": "Read", "status": "completed", "priority": "high"}
    second = {"content": "Write", "status": "pending"}
    planned = await store.configure(
        session.session_id,
        ConfigureSessionParams.model_validate(
            {"sessionId": session.session_id, "plan": [first, second]}
        ),
    )
    replaced = await store.configure(
        session.session_id,
        ConfigureSessionParams.model_validate({"sessionId": session.session_id, "plan": [second]}),
    )
    fork = await store.fork(ForkSessionParams(session_id=session.session_id))
    cleared = await store.configure(
        session.session_id,
        ConfigureSessionParams.model_validate({"sessionId": session.session_id, "plan": None}),
    )
    got_fork = await store.get(fork.session_id)
    assert session.plan is None
    assert [e.to_wire() for e in planned.plan or []] == [first, second]
    assert [e.to_wire() for e in replaced.plan or []] == [second]
    assert cleared.plan is None
    assert [e.to_wire() for e in got_fork.plan or []] == [second]  # the fork keeps its own


def test_a_plan_of_unknown_statuses_or_too_many_entries_is_refused() -> None:
    with pytest.raises(ValidationError):
        ConfigureSessionParams.model_validate(
            {"sessionId": "s", "plan": [{"content": "x", "status": "done"}]}
        )
    with pytest.raises(ValidationError):
        ConfigureSessionParams.model_validate(
            {"sessionId": "s", "plan": [{"content": "x", "status": "pending"}] * 101}
        )


def test_an_unknown_mode_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as refused:
        ConfigureSessionParams.model_validate({"sessionId": "s", "mode": "yolo"})
    [error] = refused.value.errors()
    assert error["loc"] == ("mode",) and "'yolo'" in error["msg"]


# --- clear and delete -------------------------------------------------------------------------


async def test_clear_empties_the_history_and_keeps_the_configuration(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.append(sid, [user("q"), calling("c1"), answering("c1")])
    cleared = await store.clear(sid)
    assert cleared.message_count == 0
    keep = {"message_count", "updated_at"}
    assert cleared.model_dump(exclude=keep) == session.model_dump(exclude=keep)
    assert await store.get(sid) == cleared
    page = await store.messages(sid, cursor=None, limit=10, order="asc")
    assert (page.messages, page.total, page.next_cursor) == ([], 0, None)


async def test_after_clear_appends_start_a_fresh_history(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    await store.append(sid, [calling("c1")])
    await store.clear(sid)
    with pytest.raises(InvalidParams):
        await store.append(sid, [answering("c1")])
    await fill(store, sid, 2)
    assert [m.content for m in await all_messages(store, sid)] == ["0", "1"]
    assert (await store.get(sid)).message_count == 2


async def test_delete_then_get_raises_session_not_found(
    store: SessionStore, session: Session
) -> None:
    await store.delete(session.session_id)
    with pytest.raises(SessionNotFound) as caught:
        await store.get(session.session_id)
    assert caught.value.data == {"sessionId": session.session_id}


async def test_deleting_one_session_leaves_the_others_untouched(
    store: SessionStore, session: Session
) -> None:
    other = await store.create(CreateSessionParams(), WORKSPACE)
    await fill(store, other.session_id, 2)
    before = await store.get(other.session_id)
    await store.delete(session.session_id)
    assert await store.get(other.session_id) == before
    assert len(await all_messages(store, other.session_id)) == 2
