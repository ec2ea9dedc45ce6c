"""Compaction and structured output through the real server, against a loopback model endpoint
in both wire formats."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply
from tether.client import Connection, RpcError
from tether.kernel.compaction import SUMMARY_HEADER, SUMMARY_SYSTEM
from tether.protocol import ErrorCode

from .conftest import SERVER

KEY = "sk-e2e-secret-key-0123456789"
ANSWER_SCHEMA = {
    "title": "Answer",
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


@pytest.fixture(params=["openai", "anthropic"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def connect(tmp_path: Path, endpoint: ModelServer, kind: str, **options: Any) -> Connection:
    base_url = endpoint.openai_url if kind == "openai" else endpoint.anthropic_url
    connection = await Connection.spawn(
        SERVER,
        env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY},
    )
    await connection.request(
        "initialize",
        {
            "workspaceFolders": [{"uri": tmp_path.as_uri()}],
            "initializationOptions": {
                "provider": {"type": kind, "baseUrl": base_url, "model": "m", "maxRetries": 0},
                "sessions": {"store": "sqlite", "path": str(tmp_path / "sessions.db")},
                **options,
            },
        },
    )
    connection.notify("initialized", {})
    return connection


@pytest.fixture
async def connection(tmp_path: Path, endpoint: ModelServer, kind: str) -> AsyncIterator[Connection]:
    connection = await connect(tmp_path, endpoint, kind, context={"maxTokens": 3072})
    yield connection
    await connection.close()


def turns(count: int) -> list[dict[str, str]]:
    out = []
    for index in range(count):
        out.append({"role": "user", "content": f"question {index}?"})
        out.append({"role": "assistant", "content": f"answer {index}."})
    return out


def sent_text(request: RecordedRequest) -> str:
    return json.dumps(request.body["messages"])


def message_texts(request: RecordedRequest) -> list[str]:
    """The text of each message sent, whatever the format (a string, or text blocks)."""
    texts = []
    for message in request.body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            content = "".join(block.get("text", "") for block in content)
        texts.append(content)
    return texts


def system_of(request: RecordedRequest) -> str:
    body = request.body
    if "system" in body:
        return str(body["system"])
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


def progress_kinds(connection: Connection) -> list[str]:
    kinds = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "kernel/progress":
            kinds.append(params["event"]["kind"])
    return kinds


async def all_messages(connection: Connection, sid: str) -> list[dict[str, Any]]:
    page = await connection.request("session/messages", {"sessionId": sid, "limit": 1000})
    return list(page["messages"])


async def test_a_200_turn_session_is_compacted_and_later_requests_carry_the_summary(
    connection: Connection, endpoint: ModelServer
) -> None:
    endpoint.push(
        Reply(text="The user asked 200 numbered questions."), Reply(text="Here."), Reply(text="Ok.")
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    old = (await connection.request("session/append", {"sessionId": sid, "messages": turns(200)}))[
        "messages"
    ]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "one more?"})
    assert result["stopReason"] == "end_turn" and result["response"] == "Here."

    summarize, answer = endpoint.requests[-2:]
    assert system_of(summarize) == SUMMARY_SYSTEM and "tools" not in summarize.body
    assert "question 0?" in sent_text(summarize) and "one more?" not in sent_text(summarize)
    assert "The user asked 200 numbered questions." in sent_text(answer)
    assert "question 0?" not in sent_text(answer) and "one more?" in sent_text(answer)
    kinds = progress_kinds(connection)
    assert kinds.index("compaction_started") < kinds.index("compaction_finished")

    messages = await all_messages(connection, sid)
    assert messages[:400] == old  # the whole history is still there, unchanged
    [summary] = [m for m in messages if m.get("kind") == "compaction"]
    assert summary["content"].startswith(SUMMARY_HEADER)
    assert summary["replaces"]["firstId"] == old[0]["id"]
    replaced = summary["replaces"]["count"]
    assert summary["replaces"]["lastId"] == old[replaced - 1]["id"]
    kept = [m["content"] for m in old[replaced:]]
    sent = message_texts(answer)[-len(kept) - 1 : -1]
    # Anthropic takes alternating turns: the summary (a user turn) and the first kept user turn
    # are merged into one message there
    assert sent[1:] == kept[1:] and sent[0].endswith(kept[0])

    await connection.request("kernel/run", {"sessionId": sid, "prompt": "and now?"})
    later = endpoint.requests[-1]
    assert "The user asked 200 numbered questions." in sent_text(later)
    assert "question 0?" not in sent_text(later)
    assert len(endpoint.requests) == 3  # no second summary: it fits
    assert len(await all_messages(connection, sid)) == 400 + 3 + 2


async def test_session_compact_summarizes_on_request_and_a_fork_keeps_the_summary(
    tmp_path: Path, endpoint: ModelServer
) -> None:
    connection = await connect(tmp_path, endpoint, "openai")
    try:
        endpoint.push(Reply(text="Ten questions."), Reply(text="Sure."))
        sid = (await connection.request("session/create", {}))["sessionId"]
        await connection.request("session/append", {"sessionId": sid, "messages": turns(10)})
        compacted = await connection.request(
            "session/compact", {"sessionId": sid, "workDoneToken": "tok"}
        )
        assert compacted["compacted"] is True
        assert compacted["message"]["kind"] == "compaction"
        notifications = []
        while not connection.notifications.empty():
            notifications.append(connection.notifications.get_nowait())
        progress = [p["event"]["kind"] for m, p in notifications if m == "kernel/progress"]
        assert progress == ["compaction_started", "compaction_finished"]
        work_done = [p["value"]["kind"] for m, p in notifications if m == "$/progress"]
        assert work_done == ["begin", "report", "end"]
        fork = await connection.request("session/fork", {"sessionId": sid})
        await connection.request("kernel/run", {"sessionId": fork["sessionId"], "prompt": "go"})
        sent = sent_text(endpoint.requests[-1])
        assert "Ten questions." in sent and "question 0?" not in sent and "question 9?" in sent
    finally:
        await connection.close()


# --- structured output ------------------------------------------------------------------------


def answer(kind: str, value: Any) -> Reply:
    """The model's final answer as each API gives it: JSON text, or a call of the final tool."""
    if kind == "anthropic":
        return Reply(tool_calls=[Call("final_answer", value)])
    return Reply(text=json.dumps(value))


def assert_native_mechanism(kind: str, request: RecordedRequest) -> None:
    body = request.body
    if kind == "openai":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Answer", "schema": ANSWER_SCHEMA},
        }
    else:
        [tool] = [t for t in body["tools"] if t["name"] == "final_answer"]
        assert tool["input_schema"] == ANSWER_SCHEMA
        assert body["tool_choice"] == {"type": "any"}
    assert "JSON Schema" not in system_of(request)  # no prompt fallback beside it


async def run_for_output(connection: Connection, **params: Any) -> dict[str, Any]:
    sid = (await connection.request("session/create", {}))["sessionId"]
    result: dict[str, Any] = await connection.request(
        "kernel/run",
        {"sessionId": sid, "prompt": "Biggest city?", "outputSchema": ANSWER_SCHEMA, **params},
    )
    return result


async def test_a_valid_first_answer_is_the_runs_output(
    connection: Connection, endpoint: ModelServer, kind: str
) -> None:
    endpoint.push(answer(kind, {"city": "Tokyo", "population": 37}))
    result = await run_for_output(connection)
    assert result["stopReason"] == "end_turn"
    assert result["output"] == {"city": "Tokyo", "population": 37}
    assert "outputErrors" not in result
    [request] = endpoint.requests
    assert_native_mechanism(kind, request)


async def test_an_invalid_answer_is_asked_again_with_its_errors(
    connection: Connection, endpoint: ModelServer, kind: str
) -> None:
    endpoint.push(
        answer(kind, {"city": "Tokyo", "population": "many"}),
        answer(kind, {"city": "Tokyo", "population": 37}),
    )
    result = await run_for_output(connection)
    assert result["stopReason"] == "end_turn" and result["iterations"] == 2
    assert result["output"] == {"city": "Tokyo", "population": 37}
    first, second = endpoint.requests
    assert_native_mechanism(kind, first)
    assert_native_mechanism(kind, second)
    assert "/population: 'many' is not of type 'integer'" in sent_text(second)


async def test_a_run_whose_answers_stay_invalid_ends_output_invalid_after_the_retries(
    connection: Connection, endpoint: ModelServer, kind: str
) -> None:
    endpoint.push(*[answer(kind, {"city": "Tokyo"}) for _ in range(2)])
    result = await run_for_output(connection, outputRetries=1)
    assert result["stopReason"] == "output_invalid"
    assert result["outputErrors"] == ["the answer: 'population' is a required property"]
    assert "output" not in result
    assert len(endpoint.requests) == 2


async def test_an_invalid_output_schema_is_refused_before_anything_is_recorded(
    connection: Connection, endpoint: ModelServer
) -> None:
    sid = (await connection.request("session/create", {}))["sessionId"]
    with pytest.raises(RpcError) as raised:
        await connection.request(
            "kernel/run",
            {"sessionId": sid, "prompt": "hi", "outputSchema": {"type": "no-such-type"}},
        )
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    assert raised.value.data["fields"][0]["field"] == "outputSchema"
    assert await all_messages(connection, sid) == []
    assert endpoint.requests == []


async def test_session_compact_of_an_unknown_session_is_session_not_found(
    tmp_path: Path, endpoint: ModelServer
) -> None:
    connection = await connect(tmp_path, endpoint, "openai")
    try:
        with pytest.raises(RpcError) as raised:
            await connection.request("session/compact", {"sessionId": "no-such-session"})
        assert raised.value.code == ErrorCode.SESSION_NOT_FOUND
        with pytest.raises(RpcError) as raised:
            await connection.request("session/compact", {})
        assert raised.value.code == ErrorCode.INVALID_PARAMS
    finally:
        await connection.close()
