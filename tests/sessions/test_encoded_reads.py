"""``session/get`` answered encoded (``SessionService.get_json``), against every store.

The memory store keeps each session's encoding until the session changes: every write must show
in the next read, byte for byte what encoding a fresh copy gives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import orjson
import pytest

from tether.protocol import (
    CompactedRange,
    ConfigureSessionParams,
    GetSessionParams,
    MessageInput,
    Role,
    Session,
    SessionNotFound,
)
from tether.protocol.kernel import Usage
from tether.protocol.sessions import CreateSessionParams, ForkSessionParams
from tether.rpc.wire import _encode
from tether.sessions import MemoryStore, SessionService, SessionStore
from tether.sessions.store import session_json

from .conftest import Clock, answering, calling, user

Write = Callable[[SessionStore, str], Awaitable[object]]


@pytest.fixture
async def service(store: SessionStore) -> AsyncIterator[SessionService]:
    yield SessionService(store)


async def encoded(service: SessionService, session_id: str) -> bytes:
    return await service.get_json(GetSessionParams(session_id=session_id))


async def fresh(store: SessionStore, session_id: str) -> bytes:
    """What the wire made of ``session/get`` before: the model read, then encoded."""
    return _encode(await store.get(session_id), None)


async def append(store: SessionStore, session_id: str) -> object:
    return await store.append(session_id, [user("hello"), calling("c1")])


async def append_slices(store: SessionStore, session_id: str) -> object:
    async def slices() -> AsyncIterator[list[MessageInput]]:
        yield [user("a"), calling("c2")]
        yield [answering("c2")]

    return await store.append_slices(session_id, slices())


async def compact(store: SessionStore, session_id: str) -> object:
    """A compaction summary, as session/compact appends it."""
    first = await store.append(session_id, [user("one"), user("two")])
    span = CompactedRange(first_id=first[0].id, last_id=first[-1].id, count=2)
    summary = MessageInput(role=Role.USER, content="summary", kind="compaction", replaces=span)
    return await store.append(session_id, [summary])


async def configure(store: SessionStore, session_id: str) -> object:
    changes = ConfigureSessionParams(
        session_id=session_id, title="renamed", settings={"k": [1, 2]}, state={"step": 2}
    )
    return await store.configure(session_id, changes)


async def add_usage(store: SessionStore, session_id: str) -> object:
    return await store.add_usage(session_id, Usage(input_tokens=7, output_tokens=3))


async def clear(store: SessionStore, session_id: str) -> object:
    return await store.clear(session_id)


WRITES: dict[str, Write] = {
    "append": append,
    "append_slices": append_slices,
    "compact": compact,
    "configure": configure,
    "add_usage": add_usage,
    "clear": clear,
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
async def test_every_write_shows_in_the_next_encoded_read(
    store: SessionStore, service: SessionService, session: Session, write: Write
) -> None:
    sid = session.session_id
    await store.append(sid, [user("before the write")])  # something for clear to clear
    before = await encoded(service, sid)
    assert before == await fresh(store, sid)
    assert await encoded(service, sid) == before  # read again, unchanged
    await write(store, sid)
    after = await encoded(service, sid)
    assert after == await fresh(store, sid)
    assert after != before
    assert orjson.loads(after) == (await store.get(sid)).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


async def test_a_fork_and_its_parent_each_read_as_they_are(
    store: SessionStore, service: SessionService, session: Session
) -> None:
    sid = session.session_id
    await store.append(sid, [user("one"), user("two")])
    parent_before = await encoded(service, sid)
    fork = await store.fork(ForkSessionParams(session_id=sid, title="fork"))
    assert await encoded(service, fork.session_id) == await fresh(store, fork.session_id)
    assert orjson.loads(await encoded(service, fork.session_id))["title"] == "fork"
    await store.append(fork.session_id, [user("only in the fork")])
    assert orjson.loads(await encoded(service, fork.session_id))["messageCount"] == 3
    assert await encoded(service, sid) == parent_before == await fresh(store, sid)


async def test_a_deleted_session_is_not_found(
    store: SessionStore, service: SessionService, session: Session
) -> None:
    sid = session.session_id
    await encoded(service, sid)
    await store.delete(sid)
    with pytest.raises(SessionNotFound):
        await encoded(service, sid)


async def test_an_expired_session_is_not_found(
    store: SessionStore, service: SessionService, session: Session
) -> None:
    sid = session.session_id
    await encoded(service, sid)
    assert await store.expire(session.updated_at + timedelta(seconds=1), keep=lambda _: False)
    with pytest.raises(SessionNotFound):
        await encoded(service, sid)


async def test_running_follows_the_lease_as_it_is_claimed_lapses_and_is_released() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    service = SessionService(store)
    session = await store.create(CreateSessionParams(), "/w")
    sid = session.session_id

    async def running() -> bool:
        got = await encoded(service, sid)
        assert got == await fresh(store, sid)
        return bool(orjson.loads(got)["running"])

    assert not await running()
    await store.claim_run(sid, "run-1", timedelta(seconds=30))
    assert await running()
    clock.advance(60)  # the lease lapses: no write, yet the read changes
    assert not await running()
    await store.renew_run(sid, "run-1", timedelta(seconds=30))
    await store.claim_run(sid, "run-2", timedelta(seconds=30))
    assert await running()
    await store.release_run(sid, "run-2")
    assert not await running()


async def test_the_memory_store_encodes_an_unchanged_session_once() -> None:
    store = MemoryStore()
    session = await store.create(CreateSessionParams(), "/w")
    first = store.get_json(session.session_id)
    assert store.get_json(session.session_id) is first  # kept, not encoded again
    assert first == session_json(await store.get(session.session_id))
    await store.append(session.session_id, [user("x")])
    assert store.get_json(session.session_id) is not first


async def test_what_a_read_returns_cannot_change_the_store() -> None:
    store = MemoryStore()
    session = await store.create(CreateSessionParams(), "/w")
    copy = await store.get(session.session_id)
    copy.settings["changed"] = True
    copy.usage.input_tokens = 99
    assert store.get_json(session.session_id) == session_json(await store.get(session.session_id))
    assert b"changed" not in store.get_json(session.session_id)
