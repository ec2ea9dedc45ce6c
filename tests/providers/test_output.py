"""Structured output in each wire format: the schema in the request the way the API takes it,
and the answer back as the completion's text (checked on a real loopback server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime

import httpx
import pytest

from tests.fakes import Call, ModelServer, Reply
from tether.protocol import Message, Role
from tether.protocol.tools import ToolSpec
from tether.providers import Completion, ModelRequest, RetryPolicy
from tether.providers.anthropic import AnthropicProvider
from tether.providers.base import OutputSpec
from tether.providers.client import make_client
from tether.providers.gemini import GeminiProvider
from tether.providers.http import HttpProvider
from tether.providers.openai import OpenAIProvider
from tether.providers.scripted import ScriptedProvider

OBJECT = OutputSpec(
    name="Point", schema={"type": "object", "properties": {"x": {"type": "integer"}}}
)
LIST = OutputSpec(name="output", schema={"type": "array", "items": {"type": "integer"}})
READ = ToolSpec(name="read_file", description="Read.", parameters={"type": "object"})


def request(output: OutputSpec) -> ModelRequest:
    prompt = Message(id="m1", role=Role.USER, content="go", created_at=datetime.now(UTC))
    return ModelRequest(model="m", messages=[prompt], tools=[READ], output=output)


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as client:
        yield client


async def completion(provider: HttpProvider, model_request: ModelRequest) -> Completion:
    """The turn's completion, as the kernel takes it (``structured_answer`` applied)."""
    async with asyncio.timeout(10), aclosing(provider.stream(model_request)) as stream:
        events = [event async for event in stream]
    last = events[-1]
    assert isinstance(last, Completion)
    if model_request.output is None:
        return last
    return provider.structured_answer(last, model_request.output)


def test_the_http_providers_declare_a_native_mechanism_and_the_scripted_one_does_not() -> None:
    assert OpenAIProvider.native_output and AnthropicProvider.native_output
    assert GeminiProvider.native_output
    assert not ScriptedProvider.native_output


async def test_openai_sends_response_format_json_schema(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    provider = OpenAIProvider(
        base_url=server.openai_url, client=client, retry=RetryPolicy(max_retries=0)
    )
    server.push(Reply(text='{"x": 1}'))
    answer = await completion(provider, request(OBJECT))
    assert answer.content == '{"x": 1}'
    [sent] = server.requests
    assert sent.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Point", "schema": OBJECT.schema},
    }
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["read_file"]


@pytest.mark.parametrize(
    ("spec", "arguments", "text", "input_schema"),
    [
        (OBJECT, {"x": 1}, '{"x": 1}', OBJECT.schema),
        (
            LIST,
            {"value": [1, 2]},
            "[1,2]",
            {"type": "object", "properties": {"value": LIST.schema}, "required": ["value"]},
        ),
    ],
)
async def test_anthropic_offers_a_final_tool_and_its_call_is_the_answer(
    server: ModelServer,
    client: httpx.AsyncClient,
    spec: OutputSpec,
    arguments: dict[str, object],
    text: str,
    input_schema: dict[str, object],
) -> None:
    provider = AnthropicProvider(
        base_url=server.anthropic_url, client=client, retry=RetryPolicy(max_retries=0)
    )
    server.push(Reply(tool_calls=[Call("final_answer", arguments, id="t1")]))
    answer = await completion(provider, request(spec))
    assert json.loads(answer.content or "") == json.loads(text)
    assert answer.tool_calls == [] and answer.finish_reason == "stop"
    [sent] = server.requests
    assert [t["name"] for t in sent.body["tools"]] == ["read_file", "final_answer"]
    assert sent.body["tools"][1]["input_schema"] == input_schema
    assert sent.body["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize(
    ("spec", "arguments", "text"),
    [(OBJECT, {"x": 1}, '{"x": 1}'), (LIST, {"value": [1, 2]}, "[1,2]")],
)
async def test_gemini_offers_a_final_function_and_its_call_is_the_answer(
    server: ModelServer,
    client: httpx.AsyncClient,
    spec: OutputSpec,
    arguments: dict[str, object],
    text: str,
) -> None:
    provider = GeminiProvider(
        base_url=server.gemini_url, client=client, retry=RetryPolicy(max_retries=0), api_key="k"
    )
    server.push(Reply(tool_calls=[Call("final_answer", arguments)]))
    answer = await completion(provider, request(spec))
    assert json.loads(answer.content or "") == json.loads(text)
    assert answer.tool_calls == [] and answer.finish_reason == "stop"
    [sent] = server.requests
    [tools] = sent.body["tools"]
    names = [f["name"] for f in tools["functionDeclarations"]]
    assert names == ["read_file", "final_answer"]
    assert sent.body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


async def test_anthropic_keeps_other_tool_calls_beside_the_final_one(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    provider = AnthropicProvider(
        base_url=server.anthropic_url, client=client, retry=RetryPolicy(max_retries=0)
    )
    server.push(Reply(tool_calls=[Call("read_file", {"path": "a"}, id="t1")]))
    answer = await completion(provider, request(OBJECT))
    assert [call.name for call in answer.tool_calls] == ["read_file"]
    assert answer.content is None


async def test_without_an_output_nothing_is_added(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    openai = OpenAIProvider(base_url=server.openai_url, client=client)
    anthropic = AnthropicProvider(base_url=server.anthropic_url, client=client)
    server.push(Reply(text="hi"), Reply(text="hi"))
    plain = ModelRequest(model="m", messages=request(OBJECT).messages, tools=[READ])
    await completion(openai, plain)
    await completion(anthropic, plain)
    first, second = server.requests
    assert "response_format" not in first.body
    assert "tool_choice" not in second.body and len(second.body["tools"]) == 1


def test_a_wrapped_schema_keeps_its_definitions_at_the_root() -> None:
    from tether.providers.output import tool_definition

    spec = OutputSpec(
        name="output",
        schema={
            "type": "array",
            "items": {"$ref": "#/$defs/Point"},
            "$defs": {"Point": {"type": "object"}},
        },
    )
    _, _, schema = tool_definition(spec)
    assert schema == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/Point"}}},
        "required": ["value"],
        "$defs": {"Point": {"type": "object"}},
    }
