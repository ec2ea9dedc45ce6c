"""Every store keeps an assistant message's reasoning (``metadata.reasoning``) beside what a
provider sends back (``metadata.thinking``): read back by page, whole, after reopening, and by a
fork that shares the message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.protocol import ForkSessionParams, MessageInput, Role
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import SessionStore

from .conftest import STORES, WORKSPACE, open_store, user

THOUGHT = "The user greets me.\nI should greet back, briefly."
KEPT = {
    "reasoning": THOUGHT,
    "thinking": [{"type": "thinking", "thinking": THOUGHT, "signature": "c2ln"}],
    "usage": {"inputTokens": 10, "outputTokens": 5},
}


def answer() -> MessageInput:
    return MessageInput(role=Role.ASSISTANT, content="Hello.", metadata=KEPT)


async def test_the_reasoning_reads_back_whole_by_page_and_in_a_fork(store: SessionStore) -> None:
    session = await store.create(CreateSessionParams(), WORKSPACE)
    sid = session.session_id
    await store.append(sid, [user("hi"), answer()])
    [_, whole] = await store.history(sid)
    [paged] = (await store.messages(sid, cursor=None, limit=1, order="desc")).messages
    assert whole.metadata == KEPT and paged.metadata == KEPT
    assert paged.to_wire()["metadata"]["reasoning"] == THOUGHT

    fork = await store.fork(ForkSessionParams(session_id=sid, at_message_id=whole.id))
    await store.append(fork.session_id, [user("again")])
    forked = await store.history(fork.session_id)
    assert [m.metadata for m in forked] == [None, KEPT, None]


@pytest.mark.parametrize("kind", [k for k in STORES if k != "memory"])
async def test_the_reasoning_survives_reopening_the_database(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = await open_store(kind, tmp_path, request)
    session = await store.create(CreateSessionParams(session_id="thought"), WORKSPACE)
    await store.append(session.session_id, [user("hi"), answer()])
    await store.aclose()
    reopened = await open_store(kind, tmp_path, request)
    try:
        _, kept = await reopened.history("thought")
        assert kept.metadata == KEPT
    finally:
        await reopened.aclose()
