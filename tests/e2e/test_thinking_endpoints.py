"""The real ``tether serve`` against the loopback endpoint in the three wire formats: Gemini as a
provider, and ``settings.thinkingLevel`` from the session to the request body, the reasoning
back as ``thought_delta`` events, and what the provider needs kept in the session."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply, Status
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode

from .conftest import SERVER

KEY = "AIza-e2e-secret-key-0123456789"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode()
SIGNATURE = "c2lnbmF0dXJlLWZha2U="  # what the fake endpoint signs its reasoning with


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("the answer is 42\n")
    return tmp_path


async def connect(project: Path, provider: dict[str, Any], **options: Any) -> Connection:
    env = {"GEMINI_API_KEY": KEY, "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}
    connection = await Connection.spawn(SERVER, env={**env, "TETHER_LOG_LEVEL": "debug"})
    await connection.request(
        "initialize",
        {
            "workspaceFolders": [{"uri": project.as_uri()}],
            "initializationOptions": {
                "provider": provider,
                "tools": {"approval": "auto"},
                **options,
            },
        },
    )
    connection.notify("initialized", {})
    return connection


def base_url(kind: str, endpoint: ModelServer) -> str:
    return {
        "openai": endpoint.openai_url,
        "anthropic": endpoint.anthropic_url,
        "gemini": endpoint.gemini_url,
    }[kind]


@pytest.fixture(params=["openai", "anthropic", "gemini"])
async def connection(
    request: pytest.FixtureRequest, endpoint: ModelServer, project: Path
) -> AsyncIterator[Connection]:
    kind = request.param
    provider = {"type": kind, "baseUrl": base_url(kind, endpoint), "model": "test-model"}
    connection = await connect(project, provider | {"maxRetries": 1})
    connection.kind = kind  # type: ignore[attr-defined]
    yield connection
    await connection.close()


def progress_events(connection: Connection) -> list[dict[str, Any]]:
    """The ``kernel/progress`` events received so far (they all precede the run's answer)."""
    events = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "kernel/progress":
            events.append(params["event"])
    return events


def thinking_asked(kind: str, request: RecordedRequest) -> Any:
    body = request.body
    if kind == "openai":
        return body.get("reasoning_effort")
    if kind == "anthropic":
        return body.get("thinking")
    return body["generationConfig"].get("thinkingConfig")


ASKED_FOR_HIGH = {
    "openai": "high",
    "anthropic": {"type": "enabled", "budget_tokens": 24576},
    "gemini": {"thinkingBudget": 24576, "includeThoughts": True},
}


async def test_the_thinking_level_reaches_the_endpoint_and_reasoning_streams_as_thought_delta(
    connection: Connection, endpoint: ModelServer
) -> None:
    kind: str = connection.kind  # type: ignore[attr-defined]
    endpoint.push(
        Reply(
            thinking="The notes will say.",
            tool_calls=[Call("read_file", {"path": "notes.txt"}, id="t1")],
        ),
        Reply(thinking="It is 42.", text="The answer is 42.", reasoning_tokens=9),
    )
    session = await connection.request("session/create", {"settings": {"thinkingLevel": "high"}})
    sid = session["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "What is it?"})
    assert result["response"] == "The answer is 42."

    first, second = endpoint.requests[-2:]
    assert thinking_asked(kind, first) == ASKED_FOR_HIGH[kind]
    assert thinking_asked(kind, second) == ASKED_FOR_HIGH[kind]

    events = progress_events(connection)
    thoughts = [e for e in events if e["kind"] == "thought_delta"]
    assert "".join(e["text"] for e in thoughts) == "The notes will say.It is 42."
    answer_ids = {e["messageId"] for e in events if e["kind"] == "message_delta"}
    assert {thoughts[-1]["messageId"]} == answer_ids  # the thought leads to that answer
    order = [e["kind"] for e in events]
    assert order.index("thought_delta") < order.index("tool_call")

    if kind != "anthropic":  # Anthropic does not count reasoning tokens apart
        assert result["usage"]["reasoningTokens"] == 9
    assert result["usage"]["contextTokens"] > 0

    if kind == "anthropic":  # the thinking block and its signature went back with the call
        assistant = second.body["messages"][1]
        assert assistant["content"][0] == {
            "type": "thinking",
            "thinking": "The notes will say.",
            "signature": SIGNATURE,
        }
        assert assistant["content"][1]["type"] == "tool_use"
    else:  # the reasoning is not sent back, as text or as a reasoning field
        assert "The notes will say." not in json.dumps(second.body)


async def test_the_reasoning_is_kept_with_its_message_and_read_back_from_the_session(
    connection: Connection, endpoint: ModelServer
) -> None:
    """session/messages returns each assistant message's reasoning in ``metadata.reasoning``,
    as it streamed; a later turn does not send it as text."""
    endpoint.push(
        Reply(
            thinking="The notes will say.",
            tool_calls=[Call("read_file", {"path": "notes.txt"}, id="t1")],
        ),
        Reply(thinking="It is 42.", text="The answer is 42."),
        Reply(text="You are welcome."),
    )
    session = await connection.request("session/create", {"settings": {"thinkingLevel": "low"}})
    sid = session["sessionId"]
    await connection.request("kernel/run", {"sessionId": sid, "prompt": "What is it?"})
    await connection.request("kernel/run", {"sessionId": sid, "prompt": "Thanks."})

    messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    answers = [m for m in messages if m["role"] == "assistant"]
    kept = [(m.get("metadata") or {}).get("reasoning") for m in answers]
    assert kept == ["The notes will say.", "It is 42.", None]
    thoughts = [e for e in progress_events(connection) if e["kind"] == "thought_delta"]
    by_message = {
        m["id"]: "".join(e["text"] for e in thoughts if e["messageId"] == m["id"])
        for m in answers[:2]
    }
    assert list(by_message.values()) == kept[:2]

    third = endpoint.requests[-1].body
    assert "The answer is 42." in json.dumps(third)
    if connection.kind == "anthropic":  # type: ignore[attr-defined]
        # only inside its signed thinking block (metadata.thinking), never as a text block
        blocks = [
            b for m in third["messages"] if isinstance(m["content"], list) for b in m["content"]
        ]
        assert [b["type"] for b in blocks if "It is 42." in json.dumps(b)] == ["thinking"]
    else:
        assert "It is 42." not in json.dumps(third)


async def test_a_gemini_run_sends_images_calls_a_tool_and_answers_it_by_name(
    endpoint: ModelServer, project: Path
) -> None:
    provider = {"type": "gemini", "baseUrl": endpoint.gemini_url, "model": "gemini-2.5-flash"}
    connection = await connect(project, provider)
    try:
        endpoint.push(
            Reply(
                thinking="Read the notes.",
                text="Reading.",
                tool_calls=[Call("read_file", {"path": "notes.txt"})],  # no id, as Gemini
                usage=(120, 8),
                reasoning_tokens=5,
                cached_tokens=100,
            ),
            Reply(text="It says 42.", usage=(180, 4)),
        )
        sid = (await connection.request("session/create", {"settings": {"thinkingLevel": "low"}}))[
            "sessionId"
        ]
        prompt = [
            {"type": "text", "text": "What does the picture and the file say?"},
            {"type": "image", "mimeType": "image/png", "data": PNG},
        ]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn" and result["response"] == "It says 42."
    (record,) = result["toolCalls"]
    assert record["name"] == "read_file" and "the answer is 42" in record["result"]
    assert result["usage"] == {
        "inputTokens": 300,
        "outputTokens": 17,  # candidates and thoughts
        "reasoningTokens": 5,
        "cachedTokens": 100,
        "contextTokens": 180,  # the last call's context
    }

    first, second = endpoint.requests[-2:]
    for request in (first, second):
        assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        assert request.headers["x-goog-api-key"] == KEY
        assert KEY not in request.path
    assert first.body["contents"][0] == {
        "role": "user",
        "parts": [
            {"text": "What does the picture and the file say?"},
            {"inline_data": {"mime_type": "image/png", "data": PNG}},
        ],
    }
    assert "read_file" in json.dumps(first.body["tools"])
    model_turn, results = second.body["contents"][1:3]
    assert model_turn["role"] == "model"
    assert model_turn["parts"][1] == {
        "functionCall": {"name": "read_file", "args": {"path": "notes.txt"}},
        "thoughtSignature": SIGNATURE,
    }
    (response,) = results["parts"]
    assert response["functionResponse"]["name"] == "read_file"
    assert "the answer is 42" in response["functionResponse"]["response"]["output"]

    assistant = next(m for m in messages if m["role"] == "assistant" and m.get("toolCalls"))
    call_id = assistant["toolCalls"][0]["id"]
    assert assistant["metadata"]["thoughtSignatures"] == {call_id: SIGNATURE}
    assert assistant["metadata"]["toolKinds"] == {call_id: "read"}  # kept for replays, beside
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["toolCallId"] == call_id


async def test_a_gemini_endpoint_failing_after_retries_is_a_provider_error_without_the_key(
    endpoint: ModelServer, project: Path
) -> None:
    provider = {"type": "gemini", "baseUrl": endpoint.gemini_url, "model": "m", "maxRetries": 1}
    connection = await connect(project, provider)
    try:
        endpoint.push(Status(503), Status(429, body=f"quota for key {KEY}"))
        sid = (await connection.request("session/create", {}))["sessionId"]
        with pytest.raises(RpcError) as raised:
            await connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"})
    finally:
        await connection.close()
    assert raised.value.code == ErrorCode.PROVIDER_ERROR
    assert raised.value.data["status"] == 429 and raised.value.data["provider"] == "gemini"
    assert KEY not in json.dumps(raised.value.data) + raised.value.message
    assert len(endpoint.requests) == 2


@pytest.mark.parametrize("method", ["session/create", "session/configure"])
async def test_an_unknown_thinking_level_is_invalid_params(
    method: str, endpoint: ModelServer, project: Path
) -> None:
    provider = {"type": "gemini", "baseUrl": endpoint.gemini_url, "model": "m"}
    connection = await connect(project, provider)
    try:
        params: dict[str, Any] = {"settings": {"thinkingLevel": "extreme"}}
        if method == "session/configure":
            params["sessionId"] = (await connection.request("session/create", {}))["sessionId"]
        with pytest.raises(RpcError) as raised:
            await connection.request(method, params)
    finally:
        await connection.close()
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    assert "thinkingLevel" in raised.value.message or "thinkingLevel" in json.dumps(
        raised.value.data
    )


async def test_anthropic_thinking_blocks_outlive_the_server_in_a_durable_store(
    endpoint: ModelServer, project: Path, tmp_path: Path
) -> None:
    provider = {"type": "anthropic", "baseUrl": endpoint.anthropic_url, "model": "claude-test"}
    store = {"store": "sqlite", "path": str(tmp_path / "sessions.db")}
    endpoint.push(
        Reply(thinking="Check the notes.", tool_calls=[Call("read_file", {"path": "notes.txt"})]),
        Reply(text="42."),
        Reply(text="Still 42."),
    )
    first = await connect(project, provider, sessions=store)
    try:
        created = await first.request("session/create", {"settings": {"thinkingLevel": "low"}})
        sid = created["sessionId"]
        await first.request("kernel/run", {"sessionId": sid, "prompt": "What is it?"})
    finally:
        await first.close()
    second = await connect(project, provider, sessions=store)
    try:
        await second.request("kernel/run", {"sessionId": sid, "prompt": "Sure?"})
    finally:
        await second.close()
    later = endpoint.requests[-1].body["messages"]
    calling = next(m for m in later if any(b["type"] == "tool_use" for b in m["content"]))
    assert calling["content"][0] == {
        "type": "thinking",
        "thinking": "Check the notes.",
        "signature": SIGNATURE,
    }
