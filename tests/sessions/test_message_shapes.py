"""Every store keeps what the specification's messages hold: content of any JSON shape, a tool
result's name and structured output, an author; and creates sessions under a client's id."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.protocol import ErrorCode, InvalidParams, MessageInput, Role, SessionNotFound, ToolCall
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import SessionStore
from tether.sessions.store import DumpedMessages

from .conftest import STORES, WORKSPACE, open_store, user

ANY_CONTENT: list[Any] = [
    {"kind": "order", "items": [1, 2, {"sku": "a-1"}], "paid": True, "note": None},
    42,
    -3.5,
    True,
    [1, "two", {"three": 3}],
    [{"type": "text", "text": "a block"}],
    [{"not": "a block"}, {"type": "text", "text": "one is not enough to make blocks"}],
    "plain text",
    [],
]


def _wire_content(store_message: Any) -> Any:
    return store_message.to_wire().get("content")


@pytest.mark.parametrize("content", ANY_CONTENT, ids=repr)
async def test_content_of_any_json_shape_reads_back_as_it_was_appended(
    store: SessionStore, content: Any
) -> None:
    session = await store.create(CreateSessionParams(), WORKSPACE)
    appended = MessageInput.model_validate({"role": "user", "content": content})
    await store.append(session.session_id, [appended])
    [history] = await store.history(session.session_id)
    [paged] = (
        await store.messages(session.session_id, cursor=None, limit=10, order="asc")
    ).messages
    assert _wire_content(history) == content
    assert _wire_content(paged) == content
    assert history == paged


async def test_a_tool_result_keeps_its_name_output_and_author(store: SessionStore) -> None:
    session = await store.create(CreateSessionParams(agent_id="planner"), WORKSPACE)
    call = ToolCall(id="c1", name="weather", arguments='{"city": "Oslo"}')
    output = {"temperature": -4.5, "conditions": ["snow", "wind"], "station": None}
    await store.append(
        session.session_id,
        [
            user("weather?"),
            MessageInput(role=Role.ASSISTANT, tool_calls=[call], author="planner"),
            MessageInput(
                role=Role.TOOL,
                tool_call_id="c1",
                name="weather",
                content="-4.5 °C, snow",
                output=output,
                author="planner",
            ),
        ],
    )
    first, assistant, result = await store.history(session.session_id)
    assert (first.author, assistant.author, result.author) == (None, "planner", "planner")
    assert result.name == "weather"
    assert result.output == output
    assert result.to_wire()["output"] == output
    assert "output" not in assistant.to_wire()


async def test_mutating_a_returned_output_never_changes_the_store(store: SessionStore) -> None:
    session = await store.create(CreateSessionParams(), WORKSPACE)
    call = ToolCall(id="c1", name="t", arguments="{}")
    await store.append(
        session.session_id,
        [
            MessageInput(role=Role.ASSISTANT, tool_calls=[call]),
            MessageInput(role=Role.TOOL, tool_call_id="c1", content="x", output={"a": [1]}),
        ],
    )
    returned = (await store.history(session.session_id))[-1]
    assert isinstance(returned.output, dict)
    returned.output["a"].append(2)
    assert (await store.history(session.session_id))[-1].output == {"a": [1]}


async def test_a_session_is_created_under_the_id_the_client_chose(store: SessionStore) -> None:
    session = await store.create(CreateSessionParams(session_id="ticket-1234.review"), WORKSPACE)
    assert session.session_id == "ticket-1234.review"
    assert (await store.get("ticket-1234.review")).session_id == "ticket-1234.review"
    await store.append("ticket-1234.review", [user("hello")])
    assert [m.content for m in await store.history("ticket-1234.review")] == ["hello"]


async def test_creating_under_a_taken_id_is_refused_and_keeps_the_first_session(
    store: SessionStore,
) -> None:
    first = await store.create(CreateSessionParams(session_id="mine", title="one"), WORKSPACE)
    await store.append(first.session_id, [user("kept")])
    with pytest.raises(InvalidParams) as refused:
        await store.create(CreateSessionParams(session_id="mine", title="two"), WORKSPACE)
    assert refused.value.code == ErrorCode.INVALID_PARAMS
    assert refused.value.data["sessionId"] == "mine"
    assert "exists" in refused.value.message
    assert (await store.get("mine")).title == "one"
    assert [m.content for m in await store.history("mine")] == ["kept"]


async def test_a_chosen_id_equal_to_another_sessions_message_key_shares_nothing(
    store: SessionStore,
) -> None:
    """Stores that key messages by the session's first id must not hand them to a session
    created later under that id (after the first one was cleared or deleted)."""
    old = await store.create(CreateSessionParams(), WORKSPACE)
    await store.append(old.session_id, [user("old")])
    await store.delete(old.session_id)
    with pytest.raises(SessionNotFound):
        await store.get(old.session_id)
    reborn = await store.create(CreateSessionParams(session_id=old.session_id), WORKSPACE)
    assert reborn.message_count == 0
    assert await store.history(reborn.session_id) == []


@pytest.mark.parametrize("kind", [k for k in STORES if k != "memory"])
async def test_any_content_and_outputs_survive_reopening_the_database(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = await open_store(kind, tmp_path, request)
    session = await store.create(CreateSessionParams(session_id="kept-id"), WORKSPACE)
    call = ToolCall(id="c1", name="t", arguments="{}")
    await store.append(
        session.session_id,
        [
            MessageInput.model_validate({"role": "user", "content": {"a": [1, {"b": None}]}}),
            MessageInput(role=Role.ASSISTANT, tool_calls=[call], author="agent-7"),
            MessageInput(role=Role.TOOL, tool_call_id="c1", name="t", content="1", output=[1, 2]),
        ],
    )
    await store.aclose()
    reopened = await open_store(kind, tmp_path, request)
    try:
        first, assistant, result = await reopened.history("kept-id")
        assert first.content == {"a": [1, {"b": None}]}
        assert assistant.author == "agent-7"
        assert (result.name, result.output) == ("t", [1, 2])
    finally:
        await reopened.aclose()


async def test_the_memory_stores_fast_dump_gives_what_the_messages_dump_gives(
    store: SessionStore,
) -> None:
    session = await store.create(CreateSessionParams(), WORKSPACE)
    call = ToolCall(id="c1", name="t", arguments="{}")
    batch = [
        MessageInput.model_validate({"role": "user", "content": {"a": [1]}}),
        MessageInput(role=Role.ASSISTANT, tool_calls=[call], author="me"),
        MessageInput(role=Role.TOOL, tool_call_id="c1", name="t", content="1", output=[1]),
    ]

    async def slices() -> AsyncIterator[list[MessageInput]]:
        yield batch

    appended = await store.append_slices(session.session_id, slices())
    if not hasattr(appended, "dumped"):
        pytest.skip("this store returns plain messages")
    expected = [m.model_dump(by_alias=True, exclude_none=True) for m in appended]
    assert isinstance(appended, DumpedMessages)
    assert appended.dumped(0, len(appended)) == expected
    assert expected[2]["output"] == [1] and expected[0]["content"] == {"a": [1]}
