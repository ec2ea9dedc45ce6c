"""The HTTP providers against a real loopback endpoint: streaming, tool calls, usage, faults.

Every test runs once per wire format; the fake server renders each scripted reply in the format
of the request it answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Literal

import httpx
import pytest

from tests.fakes import Call, Hang, ModelServer, Raw, Reply, Reset, Status, Truncate
from tests.providers.streams import cancel_after_first_piece
from tether.protocol import ErrorCode, Message, ProviderError, Role
from tether.providers import Completion, ModelRequest, RetryPolicy, TextDelta
from tether.providers.anthropic import AnthropicProvider
from tether.providers.client import make_client
from tether.providers.gemini import GeminiProvider
from tether.providers.http import HttpProvider
from tether.providers.openai import OpenAIProvider

Kind = Literal["openai", "anthropic", "gemini"]
KEY = "sk-test-SECRET-0123456789abcdef"


class Sleeps:
    """The injected sleep: records the waits the retry loop asks for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture(params=["openai", "anthropic", "gemini"])
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client() as client:
        yield client


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def make(
    kind: Kind,
    server: ModelServer,
    client: httpx.AsyncClient,
    sleeps: Sleeps,
    *,
    max_retries: int = 3,
    timeout: float = 5.0,
) -> HttpProvider:
    retry = RetryPolicy(max_retries=max_retries, sleep=sleeps)
    if kind == "openai":
        return OpenAIProvider(
            base_url=server.openai_url, api_key=KEY, client=client, timeout=timeout, retry=retry
        )
    if kind == "gemini":
        return GeminiProvider(
            base_url=server.gemini_url, api_key=KEY, client=client, timeout=timeout, retry=retry
        )
    return AnthropicProvider(
        base_url=server.anthropic_url, api_key=KEY, client=client, timeout=timeout, retry=retry
    )


@pytest.fixture
def provider(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> HttpProvider:
    return make(kind, server, client, sleeps)


def ask(text: str = "hello") -> ModelRequest:
    message = Message(id="m1", role=Role.USER, content=text, created_at=datetime.now(UTC))
    return ModelRequest(model="test-model", messages=[message])


async def collect(provider: HttpProvider, request: ModelRequest | None = None) -> list[object]:
    events: list[object] = []
    async with asyncio.timeout(10), aclosing(provider.stream(request or ask())) as stream:
        async for event in stream:
            events.append(event)
    return events


def as_sent(kind: Kind, arguments: str) -> str:
    """Arguments as the provider passes them on: the model's text, except Gemini's, which come
    as an object and are encoded again (compactly)."""
    if kind != "gemini":
        return arguments
    return json.dumps(json.loads(arguments), separators=(",", ":"))


def texts(events: list[object]) -> list[str]:
    return [event.text for event in events if isinstance(event, TextDelta)]


def completion(events: list[object]) -> Completion:
    assert isinstance(events[-1], Completion)
    assert sum(isinstance(event, Completion) for event in events) == 1
    return events[-1]


async def failure(provider: HttpProvider, request: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await collect(provider, request)
    assert caught.value.code == ErrorCode.PROVIDER_ERROR
    return caught.value


# --- the turn ---------------------------------------------------------------------------------


async def test_text_streams_as_deltas_then_one_completion(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Reply(text="The answer is forty-two."))
    events = await collect(provider)
    # pieces that arrive in one read come as one delta: their concatenation is what streamed
    assert "".join(texts(events)) == "The answer is forty-two."
    assert all(isinstance(event, TextDelta) for event in events[:-1])
    done = completion(events)
    assert done.content == "The answer is forty-two."
    assert done.tool_calls == []
    assert done.finish_reason == "stop"


def openai_events(*pieces: str, end: bool = True) -> str:
    """An OpenAI stream whose answer is ``pieces``, one event each, as one body (without its
    finish and ``[DONE]`` when not ``end``)."""
    deltas = [{"role": "assistant", "content": ""}, *({"content": p} for p in pieces)]
    events = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas
    ]
    if end:
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
    return body + "data: [DONE]\n\n" if end else body


async def test_pieces_that_arrive_in_one_read_come_as_one_delta_with_the_same_text(
    server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    words = ["The ", "answer ", "is ", "forty", "-two."]
    server.push(Raw(openai_events(*words)))  # head and body in one write: one read
    events = await collect(make("openai", server, client, sleeps))
    assert texts(events) == ["The answer is forty-two."]
    assert completion(events).content == "The answer is forty-two."


async def test_a_stream_whose_lines_end_with_cr_alone_is_read_to_its_last_event(
    server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    last = {"choices": [{"index": 0, "delta": {"content": "end."}, "finish_reason": "stop"}]}
    body = openai_events("The ", end=False) + f"data: {json.dumps(last)}\n\n"
    server.push(Raw(body.replace("\n", "\r")))  # the body ends with the CR of a blank line
    events = await collect(make("openai", server, client, sleeps))
    assert "".join(texts(events)) == "The end."
    assert completion(events).finish_reason == "stop"


async def test_text_before_a_failing_event_of_the_same_read_is_passed_on_and_not_tried_again(
    server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    """The pieces before the failure count as streamed, as they would in reads of their own:
    the try is not repeated (the text would come twice)."""
    error = 'data: {"error": {"message": "overloaded"}}\n\n'
    server.push(Raw(openai_events("Half ", "an ", end=False) + error), Reply(text="again"))
    got: list[str] = []
    with pytest.raises(ProviderError, match="reported an error in the stream"):
        async with (
            asyncio.timeout(10),
            aclosing(make("openai", server, client, sleeps).stream(ask())) as stream,
        ):
            async for event in stream:
                assert isinstance(event, TextDelta)
                got.append(event.text)
    assert got == ["Half an "]
    assert len(server.requests) == 1 and sleeps.delays == []


async def test_pieces_that_arrive_one_read_at_a_time_are_each_passed_on_as_they_arrive(
    server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    """The server sends the next event only once the previous piece came out of the stream:
    a piece held back for more of the body (or for a timer) would stop the test."""
    words = ["The ", "answer ", "is ", "forty-two."]
    pace: asyncio.Queue[None] = asyncio.Queue()
    server.push(Reply(text="".join(words), pace=pace))  # role, 4 words, finish, usage, [DONE]
    provider = make("openai", server, client, sleeps)
    got: list[str] = []
    async with asyncio.timeout(10), aclosing(provider.stream(ask())) as stream:
        for word in words:
            pace.put_nowait(None)  # the go-ahead for this word's event
            event = await anext(stream)
            assert isinstance(event, TextDelta)
            got.append(event.text)
            assert got[-1] == word
        for _ in range(3):
            pace.put_nowait(None)
        rest = [event async for event in stream]
    assert got == words
    assert [type(event) for event in rest] == [Completion]
    assert isinstance(rest[0], Completion) and rest[0].content == "The answer is forty-two."


async def test_a_tool_call_whose_arguments_arrive_in_several_deltas_is_reassembled(
    kind: Kind, provider: HttpProvider, server: ModelServer
) -> None:
    arguments = '{"path": "src/main.py", "start": 10, "end": 20}'
    server.push(Reply(tool_calls=[Call("read_file", arguments, id="call_1")], argument_pieces=5))
    done = completion(await collect(provider))
    assert [(c.id, c.name, c.arguments) for c in done.tool_calls] == [
        ("call_1", "read_file", as_sent(kind, arguments))
    ]
    assert done.content is None
    assert done.finish_reason == "tool_calls"


async def test_two_parallel_tool_calls_come_back_in_order_with_their_own_arguments(
    kind: Kind, provider: HttpProvider, server: ModelServer
) -> None:
    server.push(
        Reply(
            text="Reading both.",
            tool_calls=[
                Call("read_file", {"path": "a.py"}, id="call_a"),
                Call("list_files", {"glob": "**/*.md"}, id="call_b"),
            ],
            interleave=True,
        )
    )
    done = completion(await collect(provider))
    assert done.content == "Reading both."
    assert [(c.id, c.name, c.arguments) for c in done.tool_calls] == [
        ("call_a", "read_file", as_sent(kind, '{"path": "a.py"}')),
        ("call_b", "list_files", as_sent(kind, '{"glob": "**/*.md"}')),
    ]


async def test_usage_reports_input_and_output_tokens(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok", usage=(321, 45)))
    usage = completion(await collect(provider)).usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (321, 45)


async def test_a_plain_json_answer_to_a_streaming_request_is_read_as_a_whole_turn(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Reply(text="whole", tool_calls=[Call("t", {"a": 1}, id="c1")], stream=False))
    events = await collect(provider)
    assert texts(events) == ["whole"]
    done = completion(events)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in done.tool_calls] == [
        ("c1", "t", {"a": 1})
    ]
    assert done.usage is not None


async def test_request_without_streaming_returns_the_completion(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Reply(text="just the end"))
    async with asyncio.timeout(10):
        done = await provider.request(ask())
    assert done.content == "just the end"


async def test_malformed_tool_call_json_is_passed_on_as_the_arguments_text(
    kind: Kind, provider: HttpProvider, server: ModelServer
) -> None:
    # The kernel validates arguments and reports the error to the model, which can then retry.
    if kind == "gemini":
        pytest.skip("Gemini sends arguments as a JSON object: they cannot be broken JSON")
    broken = '{"path": "a.py", "line": '
    server.push(Reply(tool_calls=[Call("read_file", broken, id="c1")]))
    done = completion(await collect(provider))
    assert done.tool_calls[0].arguments == broken


async def test_the_request_streams_and_carries_the_model_and_the_api_key(
    kind: Kind, provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Reply(text="ok"))
    await collect(provider)
    (request,) = server.requests
    assert request.method == "POST"
    if kind == "gemini":  # the model and the streaming are in the path; the key in a header
        assert request.path == "/v1beta/models/test-model:streamGenerateContent?alt=sse"
        assert request.headers["x-goog-api-key"] == KEY
        assert KEY not in request.path
        return
    assert request.body["model"] == "test-model"
    assert request.body["stream"] is True
    if kind == "openai":
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.body["stream_options"] == {"include_usage": True}
    else:
        assert request.path == "/v1/messages"
        assert request.headers["x-api-key"] == KEY
        assert request.headers["anthropic-version"] == "2023-06-01"


# --- retries ----------------------------------------------------------------------------------


async def test_429_is_retried_after_the_delay_retry_after_asks_for(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Status(429, retry_after="7"), Reply(text="finally"))
    done = completion(await collect(provider))
    assert done.content == "finally"
    assert sleeps.delays == [7.0]
    assert len(server.requests) == 2


async def test_a_retry_after_beyond_the_cap_waits_only_the_cap(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Status(429, retry_after="86400"), Reply(text="ok"))
    await collect(provider)
    assert sleeps.delays == [provider.retry.max_retry_after]


async def test_500_then_success_returns_the_successful_turn_after_a_jittered_backoff(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Status(500), Status(503), Reply(text="recovered"))
    done = completion(await collect(provider))
    assert done.content == "recovered"
    assert len(sleeps.delays) == 2
    assert 0 <= sleeps.delays[0] <= provider.retry.base_delay
    assert 0 <= sleeps.delays[1] <= provider.retry.base_delay * 2


async def test_exhausted_retries_raise_provider_error_with_status_provider_and_body(
    kind: Kind, provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(*[Status(502, body="upstream is down")] * 4)
    error = await failure(provider)
    assert error.data == {"status": 502, "provider": kind, "body": "upstream is down"}
    assert len(server.requests) == 4  # the first try and three retries
    assert len(sleeps.delays) == 3


async def test_an_error_body_is_cut_to_two_kilobytes(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Status(400, body="x" * 10_000))
    error = await failure(provider)
    assert error.data["body"] == "x" * 2048


async def test_400_is_not_retried(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Status(400), Reply(text="never sent"))
    error = await failure(provider)
    assert error.data["status"] == 400
    assert len(server.requests) == 1
    assert sleeps.delays == []
    assert server.pending == 1


async def test_the_api_key_appears_in_no_error_text_data_or_log_record(
    kind: Kind,
    server: ModelServer,
    client: httpx.AsyncClient,
    sleeps: Sleeps,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = make(kind, server, client, sleeps, max_retries=1)
    echo = f"Incorrect API key provided: {KEY}"
    server.push(Status(500, body=echo), Status(401, body=echo))
    error = await failure(provider)
    assert error.data["status"] == 401
    assert "[redacted]" in error.data["body"]
    everything = [
        str(error),
        repr(error),
        repr(error.data),
        "".join(traceback.format_exception(error)),
        caplog.text,
        *(repr(record.__dict__) for record in caplog.records),
    ]
    assert caplog.records, "the retry is logged"
    assert not [text for text in everything if KEY in text]


# --- broken connections and streams -----------------------------------------------------------


async def test_a_connection_reset_before_the_answer_is_retried(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Reset(), Reply(text="second try"))
    done = completion(await collect(provider))
    assert done.content == "second try"
    assert len(sleeps.delays) == 1


async def test_a_connection_reset_mid_stream_fails_without_a_retry_and_keeps_what_arrived(
    kind: Kind, provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Reset(after_text="half an answer"), Reply(text="never sent"))
    received: list[str] = []
    with pytest.raises(ProviderError) as caught:
        async with asyncio.timeout(10), aclosing(provider.stream(ask())) as stream:
            async for event in stream:
                assert isinstance(event, TextDelta)
                received.append(event.text)
    assert "".join(received) == "half an answer"
    assert caught.value.data == {"provider": kind}  # no HTTP status: the answer was a 200
    assert sleeps.delays == []


async def test_a_stream_truncated_mid_event_fails_once_text_has_been_passed_on(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Truncate(after_text="partial "), Reply(text="never sent"))
    error = await failure(provider)
    assert "ended before the turn was complete" in error.message
    assert sleeps.delays == []


async def test_a_stream_truncated_before_any_text_is_retried(
    provider: HttpProvider, server: ModelServer, sleeps: Sleeps
) -> None:
    server.push(Truncate(), Reply(text="whole"))
    done = completion(await collect(provider))
    assert done.content == "whole"
    assert len(sleeps.delays) == 1


async def test_a_server_that_never_answers_times_out_and_is_retried(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    provider = make(kind, server, client, sleeps, max_retries=1, timeout=0.2)
    server.push(Hang(), Hang())
    error = await failure(provider)
    assert "timed out" in error.message
    assert error.data == {"provider": kind}
    assert len(server.requests) == 2
    assert len(sleeps.delays) == 1


async def test_a_stream_that_stalls_after_some_text_times_out(
    kind: Kind, server: ModelServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    provider = make(kind, server, client, sleeps, timeout=0.2)
    server.push(Hang(after_text="thinking about it"))
    error = await failure(provider)
    assert "timed out" in error.message
    assert sleeps.delays == []


async def test_the_next_turn_works_after_a_fault_on_the_same_client(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Reset(after_text="cut"), Reply(text="fine again"))
    await failure(provider)
    assert completion(await collect(provider)).content == "fine again"


async def test_cancelling_a_stream_stops_the_request_at_once(
    provider: HttpProvider, server: ModelServer
) -> None:
    server.push(Hang(after_text="a long answer that stalls"))
    await cancel_after_first_piece(provider, ask())


async def test_a_provider_without_a_client_makes_and_closes_its_own(
    kind: Kind, server: ModelServer
) -> None:
    retry = RetryPolicy(max_retries=0)
    provider: HttpProvider
    if kind == "openai":
        provider = OpenAIProvider(base_url=server.openai_url, retry=retry)
    elif kind == "gemini":
        provider = GeminiProvider(base_url=server.gemini_url, retry=retry)
    else:
        provider = AnthropicProvider(base_url=server.anthropic_url, retry=retry)
    server.push(Reply(text="alone"))
    try:
        assert completion(await collect(provider)).content == "alone"
    finally:
        await provider.aclose()
    assert "authorization" not in server.requests[0].headers
    assert "x-api-key" not in server.requests[0].headers
    assert "x-goog-api-key" not in server.requests[0].headers
