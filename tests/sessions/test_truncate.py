"""``truncate``: a session's history cut at a message, against every store; forks keep theirs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tether.protocol import ErrorCode, InvalidParams, RunLeaseLost, Session
from tether.protocol.sessions import ForkSessionParams
from tether.sessions import SessionStore

from .conftest import user

LEASE = timedelta(minutes=1)


async def texts(store: SessionStore, session_id: str) -> list[str]:
    return [str(m.content) for m in await store.history(session_id)]


async def test_truncating_removes_the_message_and_every_later_one_and_appends_go_on(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    messages = await store.append(sid, [user(c) for c in "abcd"])
    await store.claim_run(sid, "rewind", LEASE)
    assert await store.truncate(sid, messages[2].id, run_id="rewind") == 2
    await store.release_run(sid, "rewind")
    assert await texts(store, sid) == ["a", "b"]
    assert (await store.get(sid)).message_count == 2
    await store.append(sid, [user("e")])
    assert await texts(store, sid) == ["a", "b", "e"]
    page = await store.messages(sid, cursor=None, limit=10, order="desc")
    assert [m.content for m in page.messages] == ["e", "b", "a"] and page.total == 3


async def test_a_fork_keeps_what_its_parent_truncates_and_the_reverse(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    messages = await store.append(sid, [user(c) for c in "abc"])
    child = await store.fork(ForkSessionParams(session_id=sid))
    await store.append(child.session_id, [user("d")])

    await store.claim_run(sid, "rewind", LEASE)
    assert await store.truncate(sid, messages[0].id, run_id="rewind") == 3
    await store.release_run(sid, "rewind")
    assert await texts(store, sid) == []
    assert await texts(store, child.session_id) == ["a", "b", "c", "d"]

    await store.claim_run(child.session_id, "rewind", LEASE)
    assert await store.truncate(child.session_id, messages[1].id, run_id="rewind") == 3
    assert await texts(store, child.session_id) == ["a"]


async def test_truncating_needs_the_lease_and_a_message_of_the_session(
    store: SessionStore, session: Session
) -> None:
    sid = session.session_id
    [message] = await store.append(sid, [user("a")])
    with pytest.raises(RunLeaseLost):
        await store.truncate(sid, message.id, run_id="not-held")
    await store.claim_run(sid, "rewind", LEASE)
    with pytest.raises(InvalidParams) as unknown:
        await store.truncate(sid, "no-such-message", run_id="rewind")
    assert unknown.value.code == ErrorCode.INVALID_PARAMS
    assert await texts(store, sid) == ["a"]
