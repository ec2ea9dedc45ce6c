"""Each wire format on its own: a canonical history as the endpoint receives it, and the quirks
of the servers that speak it (checked on what a real loopback server recorded or sent)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.fakes import Call, ModelServer, Raw, Reply
from tether.protocol import (
    ErrorCode,
    ImageBlock,
    Message,
    ProviderError,
    ResourceLinkBlock,
    Role,
    TextBlock,
    ToolCall,
)
from tether.protocol.tools import ToolSpec
from tether.providers import Completion, ModelRequest, RetryPolicy, TextDelta
from tether.providers.anthropic import AnthropicProvider
from tether.providers.client import make_client
from tether.providers.http import HttpProvider
from tether.providers.openai import OpenAIProvider

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode()
_ids = itertools.count(1)


def message(role: Role, content: Any = None, **fields: Any) -> Message:
    return Message(
        id=f"m{next(_ids)}", role=role, content=content, created_at=datetime.now(UTC), **fields
    )


READ = ToolSpec(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)

HISTORY = [
    message(
        Role.USER,
        [
            TextBlock(text="What do these show?"),
            ImageBlock(mime_type="image/png", data=PNG),
            ResourceLinkBlock(uri="file:///w/notes.md", name="notes.md"),
        ],
    ),
    message(
        Role.ASSISTANT,
        "Reading both.",
        tool_calls=[
            ToolCall(id="call_1", name="read_file", arguments='{"path": "a.py"}'),
            ToolCall(id="call_2", name="read_file", arguments='{"path": "b.py"}'),
        ],
    ),
    message(Role.TOOL, "print('a')", tool_call_id="call_1"),
    message(Role.TOOL, "no such file: b.py", tool_call_id="call_2", is_error=True),
    message(Role.ASSISTANT, "a.py prints a; b.py is missing."),
    message(Role.USER, "Thanks."),
]

REQUEST = ModelRequest(
    model="test-model",
    system="You are terse.",
    messages=HISTORY,
    tools=[READ],
    settings={"temperature": 0.2, "maxTokens": 300, "thinkingLevel": "low"},
)


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as client:
        yield client


@pytest.fixture
def openai(server: ModelServer, client: httpx.AsyncClient) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=server.openai_url, client=client, retry=RetryPolicy(max_retries=0)
    )


@pytest.fixture
def anthropic(server: ModelServer, client: httpx.AsyncClient) -> AnthropicProvider:
    return AnthropicProvider(
        base_url=server.anthropic_url, client=client, retry=RetryPolicy(max_retries=0)
    )


async def collect(provider: HttpProvider, request: ModelRequest = REQUEST) -> list[object]:
    events: list[object] = []
    async with asyncio.timeout(10), aclosing(provider.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    return events


def last(events: list[object]) -> Completion:
    assert isinstance(events[-1], Completion)
    return events[-1]


def sse(*events: Any) -> str:
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> Any:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "x", "choices": choices, **extra}


# --- OpenAI Chat Completions ------------------------------------------------------------------


async def test_openai_receives_the_whole_history_in_chat_completions_form(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok"))
    await collect(openai)
    body = server.requests[0].body
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do these show?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "text", "text": "[resource notes.md: file:///w/notes.md]"},
            ],
        },
        {
            "role": "assistant",
            "content": "Reading both.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "b.py"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print('a')"},
        {"role": "tool", "tool_call_id": "call_2", "content": "no such file: b.py"},
        {"role": "assistant", "content": "a.py prints a; b.py is missing."},
        {"role": "user", "content": "Thanks."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file of the workspace.",
                "parameters": READ.parameters,
            },
        }
    ]
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 300
    assert body["reasoning_effort"] == "low"  # settings.thinkingLevel
    assert "thinkingLevel" not in body and "thinking_level" not in body


async def test_openai_sends_null_content_for_an_assistant_turn_that_only_calls_tools(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    history = [
        message(Role.USER, "go"),
        message(Role.ASSISTANT, tool_calls=[ToolCall(id="c", name="t", arguments="{}")]),
        message(Role.TOOL, [TextBlock(text="line 1"), TextBlock(text="line 2")], tool_call_id="c"),
    ]
    server.push(Reply(text="ok"))
    await collect(openai, ModelRequest(model="m", messages=history))
    sent = server.requests[0].body["messages"]
    assert sent[1]["content"] is None
    assert sent[2]["content"] == "line 1\nline 2"
    assert "tools" not in server.requests[0].body


async def test_openai_makes_up_ids_for_tool_calls_that_come_without_one(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(
        Reply(tool_calls=[Call("a", {"x": 1}), Call("b", {"y": 2})], omit_tool_call_ids=True)
    )
    calls = last(await collect(openai)).tool_calls
    assert [c.name for c in calls] == ["a", "b"]
    assert all(c.id for c in calls)
    assert calls[0].id != calls[1].id


async def test_openai_takes_tool_calls_that_arrive_whole_in_one_delta(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(
        Reply(
            tool_calls=[Call("a", {"x": 1}, id="c1"), Call("b", "", id="c2")], whole_tool_calls=True
        )
    )
    calls = last(await collect(openai)).tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("c1", "a", '{"x": 1}'),
        ("c2", "b", "{}"),  # no arguments at all reads as an empty object
    ]


async def test_openai_tolerates_a_stream_without_usage(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(Reply(text="no usage here", usage=None))
    assert last(await collect(openai)).usage is None


async def test_openai_accepts_the_finish_reason_as_the_end_when_done_never_comes(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(Reply(text="no done marker", done_marker=False))
    assert last(await collect(openai)).content == "no done marker"


async def test_openai_reads_tool_calls_without_index_and_usage_in_a_last_empty_chunk(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    body = sse(
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "a", "arguments": '{"k"'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": ": 1}"}}]}),
        chunk({"tool_calls": [{"id": "c2", "function": {"name": "b", "arguments": {"z": 0}}}]}),
        chunk({}, "tool_calls"),
        chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 4}),
        "[DONE]",
    )
    server.push(Raw(body))
    done = last(await collect(openai))
    assert [(c.id, c.name, c.arguments) for c in done.tool_calls] == [
        ("c1", "a", '{"k": 1}'),
        ("c2", "b", '{"z":0}'),
    ]
    assert done.usage is not None and done.usage.output_tokens == 4


async def test_openai_reports_an_error_sent_inside_the_stream(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(Raw(sse(chunk({"content": "Hi"}), {"error": {"message": "model crashed"}})))
    with pytest.raises(ProviderError) as caught:
        await collect(openai)
    assert caught.value.code == ErrorCode.PROVIDER_ERROR
    assert "model crashed" in caught.value.data["body"]


async def test_openai_reports_invalid_json_in_the_stream(
    openai: OpenAIProvider, server: ModelServer
) -> None:
    server.push(Raw("data: {not json\n\n"))
    with pytest.raises(ProviderError) as caught:
        await collect(openai)
    assert caught.value.data["provider"] == "openai"


# --- Anthropic Messages -----------------------------------------------------------------------


async def test_anthropic_receives_the_whole_history_in_messages_form(
    anthropic: AnthropicProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok"))
    await collect(anthropic)
    body = server.requests[0].body
    assert body["system"] == "You are terse."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What do these show?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
                {"type": "text", "text": "[resource notes.md: file:///w/notes.md]"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading both."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read_file",
                    "input": {"path": "a.py"},
                },
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "read_file",
                    "input": {"path": "b.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "print('a')"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": "no such file: b.py",
                    "is_error": True,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a.py prints a; b.py is missing."}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
    ]
    assert body["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "input_schema": READ.parameters,
        }
    ]
    # thinkingLevel low: a 2048-token budget, max_tokens raised above it by what was asked for
    # the answer, and no temperature (the API refuses it with thinking)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 2048 + 300
    assert "temperature" not in body
    assert "thinkingLevel" not in body


async def test_anthropic_asks_for_4096_tokens_when_no_max_tokens_is_set(
    anthropic: AnthropicProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok"))
    await collect(anthropic, ModelRequest(model="m", messages=[message(Role.USER, "hi")]))
    body = server.requests[0].body
    assert body["max_tokens"] == 4096
    assert "system" not in body and "tools" not in body


async def test_anthropic_folds_system_messages_into_the_system_prompt_and_keeps_turns_alternating(
    anthropic: AnthropicProvider, server: ModelServer
) -> None:
    history = [
        message(Role.SYSTEM, "Project rules: be kind."),
        message(Role.USER, "one"),
        message(Role.USER, "two"),
        message(Role.ASSISTANT, tool_calls=[ToolCall(id="c", name="t", arguments='{"a": ')]),
        message(Role.TOOL, "bad arguments", tool_call_id="c", is_error=True),
        message(Role.USER, "try again"),
    ]
    server.push(Reply(text="ok"))
    await collect(anthropic, ModelRequest(model="m", system="Base.", messages=history))
    body = server.requests[0].body
    assert body["system"] == "Base.\n\nProject rules: be kind."
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
    ]
    # Broken arguments stay visible to the model next to the error it got for them.
    assert body["messages"][1]["content"][0]["input"] == {"invalid_json": '{"a": '}
    assert [block["type"] for block in body["messages"][2]["content"]] == ["tool_result", "text"]


async def test_anthropic_gives_finish_reasons_in_the_canonical_words(
    anthropic: AnthropicProvider, server: ModelServer
) -> None:
    server.push(Reply(text="cut", finish_reason="max_tokens"))
    assert last(await collect(anthropic)).finish_reason == "length"


async def test_anthropic_reports_an_error_event_after_text_without_retrying(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    provider = AnthropicProvider(base_url=server.anthropic_url, client=client)
    error_event = (
        "event: error\n"
        'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    start = (
        'event: message_start\ndata: {"type":"message_start","message":{"usage":'
        '{"input_tokens":1,"output_tokens":1}}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"Hel"}}\n\n'
    )
    server.push(Raw(start + error_event))
    received: list[str] = []
    with pytest.raises(ProviderError) as caught:
        async with asyncio.timeout(10), aclosing(provider.stream(REQUEST)) as stream:
            async for event in stream:
                assert isinstance(event, TextDelta)
                received.append(event.text)
    assert received == ["Hel"]
    assert "overloaded_error" in caught.value.message
    assert "Overloaded" in caught.value.data["body"]
    assert len(server.requests) == 1


async def test_anthropic_retries_an_overloaded_error_event_that_comes_before_any_text(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    provider = AnthropicProvider(
        base_url=server.anthropic_url, client=client, retry=RetryPolicy(sleep=sleep)
    )
    overloaded = (
        "event: error\n"
        'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    server.push(Raw(overloaded), Reply(text="there you go"))
    assert last(await collect(provider)).content == "there you go"
    assert len(delays) == 1


async def test_anthropic_adds_cached_input_tokens_to_the_input(
    anthropic: AnthropicProvider, server: ModelServer
) -> None:
    body = (
        'event: message_start\ndata: {"type":"message_start","message":{"usage":'
        '{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,'
        '"output_tokens":1}}}\n\n'
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        '"usage":{"output_tokens":9}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    server.push(Raw(body))
    usage = last(await collect(anthropic)).usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (125, 9)
