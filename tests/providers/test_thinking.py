"""``settings.thinkingLevel`` in the three wire formats, against the loopback endpoint: what each
request body asks for, reasoning streamed as thought pieces, what is kept to be sent back, and
the reasoning and cached tokens of the usage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
import pytest

from tests.fakes import Call, ModelServer, Reply
from tether.protocol import Message, Role
from tether.providers import Completion, ModelRequest, RetryPolicy, TextDelta, ThoughtDelta
from tether.providers.anthropic import AnthropicProvider
from tether.providers.client import make_client
from tether.providers.gemini import GeminiProvider
from tether.providers.http import HttpProvider
from tether.providers.openai import OpenAIProvider

Kind = Literal["openai", "anthropic", "gemini"]
SIGNATURE = "c2lnbmF0dXJlLWZha2U="  # what the fake endpoint signs its reasoning with


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as client:
        yield client


def make(kind: Kind, server: ModelServer, client: httpx.AsyncClient) -> HttpProvider:
    retry = RetryPolicy(max_retries=0)
    if kind == "openai":
        return OpenAIProvider(base_url=server.openai_url, client=client, retry=retry)
    if kind == "anthropic":
        return AnthropicProvider(base_url=server.anthropic_url, client=client, retry=retry)
    return GeminiProvider(base_url=server.gemini_url, client=client, retry=retry)


def message(role: Role, content: Any = None, **fields: Any) -> Message:
    return Message(
        id=f"m-{role}", role=role, content=content, created_at=datetime.now(UTC), **fields
    )


def ask(*messages: Message, **settings: Any) -> ModelRequest:
    return ModelRequest(
        model="m", messages=messages or [message(Role.USER, "hi")], settings=settings
    )


async def collect(provider: HttpProvider, request: ModelRequest) -> list[object]:
    events: list[object] = []
    async with asyncio.timeout(10), aclosing(provider.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    return events


def thinking_of(kind: Kind, body: dict[str, Any]) -> Any:
    """What a request body says about thinking, in its format's own words."""
    if kind == "openai":
        return body.get("reasoning_effort")
    if kind == "anthropic":
        return body.get("thinking"), body["max_tokens"]
    return body.get("generationConfig", {}).get("thinkingConfig")


EXPECTED: dict[Kind, dict[str | None, Any]] = {
    "openai": {None: None, "off": None, "low": "low", "medium": "medium", "high": "high"},
    "anthropic": {
        None: (None, 4096),
        "off": (None, 4096),
        "low": ({"type": "enabled", "budget_tokens": 2048}, 4096),
        "medium": ({"type": "enabled", "budget_tokens": 8192}, 8192 + 4096),
        "high": ({"type": "enabled", "budget_tokens": 24576}, 24576 + 4096),
    },
    "gemini": {
        None: None,
        "off": {"thinkingBudget": 0},
        "low": {"thinkingBudget": 2048, "includeThoughts": True},
        "medium": {"thinkingBudget": 8192, "includeThoughts": True},
        "high": {"thinkingBudget": 24576, "includeThoughts": True},
    },
}


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("level", [None, "off", "low", "medium", "high"])
async def test_the_thinking_level_is_asked_for_in_each_formats_own_words(
    kind: Kind, level: str | None, server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(text="ok"))
    settings = {} if level is None else {"thinkingLevel": level}
    await collect(make(kind, server, client), ask(**settings))
    body = server.requests[0].body
    assert thinking_of(kind, body) == EXPECTED[kind][level]
    assert "thinkingLevel" not in str(body)


async def test_an_explicit_reasoning_effort_setting_wins_over_the_thinking_level(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(text="ok"))
    await collect(make("openai", server, client), ask(thinkingLevel="high", reasoningEffort="low"))
    assert server.requests[0].body["reasoning_effort"] == "low"


async def test_anthropic_keeps_a_max_tokens_already_above_the_budget_and_drops_temperature(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(text="ok"))
    await collect(
        make("anthropic", server, client),
        ask(thinkingLevel="low", maxTokens=32000, temperature=0.3, topK=5, topP=0.97),
    )
    body = server.requests[0].body
    assert body["max_tokens"] == 32000
    assert "temperature" not in body and "top_k" not in body and body["top_p"] == 0.97


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_reasoning_streams_as_thought_pieces_before_the_answer(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(thinking="First, the file.", text="Done."))
    events = await collect(make(kind, server, client), ask(thinkingLevel="medium"))
    kinds = [type(e).__name__ for e in events]
    # pieces that arrive in one read come as one delta: the order of the kinds and the
    # concatenation of each kind's pieces are what streamed
    assert [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k] == [
        "ThoughtDelta",
        "TextDelta",
        "Completion",
    ]
    assert "".join(e.text for e in events if isinstance(e, ThoughtDelta)) == "First, the file."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Done."
    done = events[-1]
    assert isinstance(done, Completion)
    assert done.content == "Done." and done.reasoning == "First, the file."


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_a_whole_json_answer_passes_its_reasoning_on_too(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(thinking="hmm", text="Done.", stream=False))
    events = await collect(make(kind, server, client), ask(thinkingLevel="low"))
    assert [e.text for e in events if isinstance(e, ThoughtDelta)] == ["hmm"]


async def test_anthropic_thinking_blocks_are_kept_with_their_signature_and_sent_back_first(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    anthropic = make("anthropic", server, client)
    server.push(
        Reply(thinking="Need the file.", tool_calls=[Call("read_file", {"path": "a"}, id="t1")]),
        Reply(text="ok"),
    )
    done = (await collect(anthropic, ask(thinkingLevel="low")))[-1]
    assert isinstance(done, Completion)
    block = {"type": "thinking", "thinking": "Need the file.", "signature": SIGNATURE}
    assert done.metadata == {"thinking": [block]}
    assistant = message(Role.ASSISTANT, None, tool_calls=done.tool_calls, metadata=done.metadata)
    result = message(Role.TOOL, "A", tool_call_id="t1")
    await collect(anthropic, ask(message(Role.USER, "hi"), assistant, result, thinkingLevel="low"))
    sent = server.requests[1].body["messages"][1]
    assert sent == {
        "role": "assistant",
        "content": [
            block,
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
        ],
    }


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_the_reasoning_kept_for_replay_is_never_sent_back_to_the_model(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient
) -> None:
    """``metadata.reasoning`` is for the faces: no format sends it, as answer text or as its
    own reasoning field (what a format needs echoed lives under its own key, as above)."""
    server.push(Reply(text="ok"))
    thought = "SECRET-PLAN weighing the options"
    kept = {"reasoning": thought, "usage": {"inputTokens": 1, "outputTokens": 1}}
    history = (
        message(Role.USER, "hi"),
        message(Role.ASSISTANT, "Hello.", metadata=kept),
        message(Role.USER, "again"),
    )
    await collect(make(kind, server, client), ask(*history, thinkingLevel="low"))
    body = server.requests[0].body
    assert "SECRET-PLAN" not in str(body)
    assert "reasoning_content" not in str(body)
    assert "Hello." in str(body)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_usage_reports_reasoning_and_cached_tokens_when_the_endpoint_does(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(text="ok", usage=(500, 80), reasoning_tokens=30, cached_tokens=200))
    done = (await collect(make(kind, server, client), ask()))[-1]
    assert isinstance(done, Completion) and done.usage is not None
    usage = done.usage
    assert usage.cached_tokens == 200 and usage.context_tokens == usage.input_tokens
    if kind == "anthropic":  # Anthropic counts thinking in output_tokens and says no more
        assert usage.reasoning_tokens is None
    else:
        assert usage.reasoning_tokens == 30
    if kind == "anthropic":  # its input_tokens leave the cache out; tether adds it back
        assert usage.input_tokens == 700
    else:
        assert usage.input_tokens == 500


async def test_usage_leaves_out_what_the_endpoint_does_not_report(
    server: ModelServer, client: httpx.AsyncClient
) -> None:
    server.push(Reply(text="ok", usage=(10, 2)))
    done = (await collect(make("openai", server, client), ask()))[-1]
    assert isinstance(done, Completion) and done.usage is not None
    assert done.usage.to_wire() == {"inputTokens": 10, "outputTokens": 2, "contextTokens": 10}
