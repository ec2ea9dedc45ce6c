"""The Gemini wire format against the loopback endpoint: what the API receives, how a streamed
turn with thoughts, function calls and usage is read back, and its faults."""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.fakes import Call, ModelServer, Raw, Reply, Status
from tether.config import ProviderConfig
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
from tether.providers import (
    Completion,
    ModelRequest,
    RetryPolicy,
    TextDelta,
    ThoughtDelta,
    make_provider,
)
from tether.providers.client import make_client
from tether.providers.gemini import GeminiProvider

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really").decode()
KEY = "AIza-test-SECRET-0123456789"
_ids = itertools.count(1)

READ = ToolSpec(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "additionalProperties": False,
    },
)


def message(role: Role, content: Any = None, **fields: Any) -> Message:
    return Message(
        id=f"m{next(_ids)}", role=role, content=content, created_at=datetime.now(UTC), **fields
    )


def ask(*messages: Message, **settings: Any) -> ModelRequest:
    return ModelRequest(
        model="gemini-test",
        system="You are terse.",
        messages=messages or [message(Role.USER, "hi")],
        tools=[READ],
        settings=settings,
    )


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
async def gemini(server: ModelServer) -> AsyncIterator[GeminiProvider]:
    async with make_client() as client:
        yield GeminiProvider(
            base_url=server.gemini_url,
            api_key=KEY,
            client=client,
            retry=RetryPolicy(max_retries=2, sleep=_no_wait),
        )


async def _no_wait(_: float) -> None:
    return None


async def collect(provider: GeminiProvider, request: ModelRequest) -> list[object]:
    events: list[object] = []
    async with asyncio.timeout(10), aclosing(provider.stream(request)) as stream:
        async for event in stream:
            events.append(event)
    return events


def last(events: list[object]) -> Completion:
    assert isinstance(events[-1], Completion)
    return events[-1]


def sse(*chunks: str) -> str:
    return "".join(f"data: {chunk}\n\n" for chunk in chunks)


# --- canonical → Gemini -----------------------------------------------------------------------


async def test_the_history_is_sent_as_user_and_model_contents_with_function_parts(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    history = [
        message(Role.SYSTEM, "Answer in English."),
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
                ToolCall(id="call_2", name="list_files", arguments="{}"),
            ],
        ),
        message(Role.TOOL, "print('a')", tool_call_id="call_1"),
        message(Role.TOOL, "no such dir", tool_call_id="call_2", is_error=True),
        message(Role.ASSISTANT, "a.py prints a."),
        message(Role.USER, "Thanks."),
    ]
    server.push(Reply(text="ok"))
    await collect(
        gemini, ask(*history, temperature=0.2, maxTokens=300, stop="END", thinkingLevel="medium")
    )
    (request,) = server.requests
    assert request.path == "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    body = request.body
    assert body["systemInstruction"] == {
        "parts": [{"text": "You are terse.\n\nAnswer in English."}]
    }
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "What do these show?"},
                {"inline_data": {"mime_type": "image/png", "data": PNG}},
                {"text": "[resource notes.md: file:///w/notes.md]"},
            ],
        },
        {
            "role": "model",
            "parts": [
                {"text": "Reading both."},
                {"functionCall": {"name": "read_file", "args": {"path": "a.py"}}},
                {"functionCall": {"name": "list_files", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [  # by name, in the order of the calls: Gemini's calls have no ids
                {"functionResponse": {"name": "read_file", "response": {"output": "print('a')"}}},
                {"functionResponse": {"name": "list_files", "response": {"error": "no such dir"}}},
            ],
        },
        {"role": "model", "parts": [{"text": "a.py prints a."}]},
        {"role": "user", "parts": [{"text": "Thanks."}]},
    ]
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "read_file",
                    "description": "Read a file of the workspace.",
                    "parametersJsonSchema": READ.parameters,
                }
            ]
        }
    ]
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "maxOutputTokens": 300,
        "stopSequences": ["END"],
        "thinkingConfig": {"thinkingBudget": 8192, "includeThoughts": True},
    }


async def test_consecutive_user_messages_are_merged_into_one_turn(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok"))
    await collect(gemini, ask(message(Role.USER, "one"), message(Role.USER, "two")))
    assert server.requests[0].body["contents"] == [
        {"role": "user", "parts": [{"text": "one"}, {"text": "two"}]}
    ]


# --- Gemini → canonical -----------------------------------------------------------------------


async def test_calls_without_ids_get_distinct_ids_and_their_results_go_back_by_name_and_order(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(
        Reply(
            text="Reading.",
            tool_calls=[Call("read_file", {"path": "a.py"}), Call("read_file", {"path": "b.py"})],
        ),
        Reply(text="done"),
    )
    prompt = message(Role.USER, "read them")
    done = last(await collect(gemini, ask(prompt)))
    assert done.finish_reason == "tool_calls"  # Gemini says STOP after calls too
    first, second = done.tool_calls
    assert first.id != second.id and first.id.startswith("gemini_")
    assert [(c.name, c.arguments) for c in done.tool_calls] == [
        ("read_file", '{"path":"a.py"}'),
        ("read_file", '{"path":"b.py"}'),
    ]
    assert done.metadata is None  # no ids of Gemini's own, no signatures to keep

    assistant = message(
        Role.ASSISTANT, done.content, tool_calls=done.tool_calls, metadata=done.metadata
    )
    results = [
        message(Role.TOOL, "B", tool_call_id=second.id),  # answered out of order ...
        message(Role.TOOL, "A", tool_call_id=first.id),
    ]
    await collect(gemini, ask(prompt, assistant, *results))
    sent = server.requests[1].body["contents"]
    assert sent[1]["parts"][1:] == [
        {"functionCall": {"name": "read_file", "args": {"path": "a.py"}}},
        {"functionCall": {"name": "read_file", "args": {"path": "b.py"}}},
    ]
    assert sent[2]["parts"] == [  # ... and sent back in the order of the calls
        {"functionResponse": {"name": "read_file", "response": {"output": "A"}}},
        {"functionResponse": {"name": "read_file", "response": {"output": "B"}}},
    ]


async def test_an_id_gemini_gives_a_call_is_kept_and_sent_back_on_the_call_and_its_result(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(
        Reply(tool_calls=[Call("read_file", {"path": "a.py"}, id="fc-7")]), Reply(text="ok")
    )
    done = last(await collect(gemini, ask()))
    assert done.tool_calls[0].id == "fc-7"
    assistant = message(Role.ASSISTANT, None, tool_calls=done.tool_calls, metadata=done.metadata)
    await collect(
        gemini,
        ask(message(Role.USER, "hi"), assistant, message(Role.TOOL, "A", tool_call_id="fc-7")),
    )
    contents = server.requests[1].body["contents"]
    assert contents[1]["parts"][0]["functionCall"]["id"] == "fc-7"
    assert contents[2]["parts"][0]["functionResponse"]["id"] == "fc-7"


async def test_thoughts_stream_apart_from_the_text_and_signatures_go_back_on_their_parts(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(
        Reply(
            thinking="Look at the file first.",
            text="Reading.",
            tool_calls=[Call("read_file", {"path": "a.py"})],
            reasoning_tokens=40,
            cached_tokens=5,
            usage=(100, 20),
        ),
        Reply(text="ok"),
    )
    events = await collect(gemini, ask(thinkingLevel="high"))
    thoughts = [e.text for e in events if isinstance(e, ThoughtDelta)]
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    # pieces that arrive in one read come as one delta: their concatenation is what streamed
    assert "".join(thoughts) == "Look at the file first."
    assert "".join(texts) == "Reading."
    assert all(isinstance(e, ThoughtDelta) for e in events[: len(thoughts)])
    done = last(events)
    assert done.content == "Reading." and done.reasoning == "Look at the file first."
    assert done.usage is not None
    assert done.usage.model_dump() == {
        "input_tokens": 100,
        "output_tokens": 60,  # candidates + thoughts
        "reasoning_tokens": 40,
        "cached_tokens": 5,
        "context_tokens": 100,
        "cost": None,  # a run prices its calls as it ends
    }
    (call,) = done.tool_calls
    assert done.metadata == {"thoughtSignatures": {call.id: "c2lnbmF0dXJlLWZha2U="}}
    assistant = message(
        Role.ASSISTANT, done.content, tool_calls=done.tool_calls, metadata=done.metadata
    )
    await collect(
        gemini,
        ask(message(Role.USER, "hi"), assistant, message(Role.TOOL, "A", tool_call_id=call.id)),
    )
    model_turn = server.requests[1].body["contents"][1]
    assert model_turn["parts"][1] == {
        "functionCall": {"name": "read_file", "args": {"path": "a.py"}},
        "thoughtSignature": "c2lnbmF0dXJlLWZha2U=",
    }


async def test_request_uses_generate_content_without_streaming(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(Reply(text="whole", thinking="hmm", tool_calls=[Call("read_file", {"path": "x"})]))
    async with asyncio.timeout(10):
        done = await gemini.request(ask())
    assert server.requests[0].path == "/v1beta/models/gemini-test:generateContent"
    assert done.content == "whole" and done.reasoning == "hmm"
    assert [c.name for c in done.tool_calls] == ["read_file"]


async def test_a_blocked_prompt_ends_the_turn_as_content_filter(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    blocked = (
        '{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9}}'
    )
    server.push(Raw(sse(blocked)))
    done = last(await collect(gemini, ask()))
    assert done.finish_reason == "content_filter" and done.content is None


async def test_max_tokens_is_length(gemini: GeminiProvider, server: ModelServer) -> None:
    server.push(Reply(text="cut", finish_reason="MAX_TOKENS"))
    assert last(await collect(gemini, ask())).finish_reason == "length"


# --- faults -----------------------------------------------------------------------------------


async def test_an_error_in_the_stream_before_any_text_is_retried_when_gemini_says_so(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    overloaded = '{"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}'
    server.push(Raw(sse(overloaded)), Reply(text="second try"))
    assert last(await collect(gemini, ask())).content == "second try"
    assert len(server.requests) == 2


async def test_an_invalid_argument_in_the_stream_is_final(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    invalid = '{"error": {"code": 400, "message": "bad schema", "status": "INVALID_ARGUMENT"}}'
    server.push(Raw(sse(invalid)), Reply(text="never sent"))
    with pytest.raises(ProviderError) as caught:
        await collect(gemini, ask())
    assert caught.value.code == ErrorCode.PROVIDER_ERROR
    assert caught.value.data["provider"] == "gemini" and "bad schema" in caught.value.data["body"]
    assert server.pending == 1


async def test_a_stream_without_a_finish_reason_is_incomplete_and_retried(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    no_end = '{"candidates": [{"content": {"role": "model", "parts": []}}]}'
    server.push(Raw(sse(no_end)), Reply(text="whole"))
    assert last(await collect(gemini, ask())).content == "whole"


async def test_the_status_and_error_body_of_a_refusal_reach_the_provider_error(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(Status(403))
    with pytest.raises(ProviderError) as caught:
        await collect(gemini, ask())
    assert caught.value.data["status"] == 403
    assert "PERMISSION_DENIED" in caught.value.data["body"]


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"GEMINI_API_KEY": "g1", "GOOGLE_API_KEY": "g2"}, "g1"),
        ({"GOOGLE_API_KEY": "g2"}, "g2"),
        ({}, None),
    ],
)
async def test_gemini_reads_gemini_api_key_then_google_api_key(
    environ: dict[str, str], key: str | None, server: ModelServer
) -> None:
    provider = make_provider(
        ProviderConfig(type="gemini", model="gemini-2.5-flash", max_retries=0),
        None,
        environ={"GOOGLE_GEMINI_BASE_URL": server.gemini_url, **environ},
    )
    assert isinstance(provider, GeminiProvider)
    server.push(Reply(text="ok"))
    try:
        await collect(
            provider, ModelRequest(model="gemini-2.5-flash", messages=[message(Role.USER, "hi")])
        )
    finally:
        await provider.aclose()
    (request,) = server.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert request.headers.get("x-goog-api-key") == key
    assert "key=" not in request.path


def test_a_base_url_with_its_api_version_is_used_as_it_is() -> None:
    provider = GeminiProvider(base_url="https://proxy.example/v1alpha/", model="m")
    assert provider.model_url("models/m", stream=False) == (
        "https://proxy.example/v1alpha/models/m:generateContent"
    )


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash:generateContent"),
        ("models/gemini-2.5-pro", "/v1beta/models/gemini-2.5-pro:generateContent"),
        ("tunedModels/my-model", "/v1beta/tunedModels/my-model:generateContent"),
        ("../files/x?key=1", "/v1beta/models/..%2Ffiles%2Fx%3Fkey%3D1:generateContent"),
    ],
)
def test_the_model_names_the_path_and_cannot_change_it(model: str, path: str) -> None:
    provider = GeminiProvider(base_url="https://g.example", model=model)
    assert provider.model_url(model, stream=False) == "https://g.example" + path


async def test_a_result_whose_call_is_not_in_the_history_goes_under_its_own_name(
    gemini: GeminiProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok"))
    orphan = message(Role.TOOL, "data", tool_call_id="elsewhere", name="fetch")
    await collect(gemini, ask(orphan, message(Role.USER, "and?")))
    assert server.requests[0].body["contents"] == [
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "fetch", "response": {"output": "data"}}},
                {"text": "and?"},
            ],
        }
    ]
