"""The providers' shared HTTP client against the real loopback endpoint: connections are reused,
bounded, and let go of when a stream is given up.

The endpoint counts the connections it accepts and those that have ended, so these tests see
what the client does on the wire rather than what its pool says of itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime

import httpx
import pytest

from tests.fakes import Hang, ModelServer, Reply
from tether.protocol import Message, Role
from tether.providers import Completion, ModelRequest, RetryPolicy, TextDelta
from tether.providers.client import make_client
from tether.providers.openai import OpenAIProvider


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer(default=Reply(text="pong from the endpoint")) as server:
        yield server


def provider_over(client: httpx.AsyncClient, server: ModelServer) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=server.openai_url,
        api_key="sk-test",
        client=client,
        timeout=10.0,
        retry=RetryPolicy(max_retries=0),
    )


def ask() -> ModelRequest:
    message = Message(id="m1", role=Role.USER, content="ping", created_at=datetime.now(UTC))
    return ModelRequest(model="test-model", messages=[message])


async def answer(provider: OpenAIProvider) -> str:
    """The text of one whole streamed turn."""
    pieces: list[str] = []
    async with aclosing(provider.stream(ask())) as stream:
        async for event in stream:
            if isinstance(event, TextDelta):
                pieces.append(event.text)
            else:
                assert isinstance(event, Completion)
    return "".join(pieces)


async def test_two_hundred_sequential_model_calls_share_one_connection(
    server: ModelServer,
) -> None:
    async with make_client() as client:
        provider = provider_over(client, server)
        for _ in range(200):
            assert await answer(provider) == "pong from the endpoint"
    assert len(server.requests) == 200
    assert server.connections == 1


async def test_a_hundred_concurrent_streams_all_complete_and_their_connections_are_reused(
    server: ModelServer,
) -> None:
    async with make_client() as client:
        provider = provider_over(client, server)
        first = await asyncio.gather(*(answer(provider) for _ in range(100)))
        opened = server.connections
        second = await asyncio.gather(*(answer(provider) for _ in range(100)))
    assert first == second == ["pong from the endpoint"] * 100
    assert len(server.requests) == 200
    assert 1 <= opened <= 100
    assert server.connections == opened  # the second hundred opened nothing new


async def test_max_connections_bounds_the_connections_open_at_once(server: ModelServer) -> None:
    server.latency = 0.02  # so that the streams overlap
    async with make_client(max_connections=4) as client:
        provider = provider_over(client, server)
        answers = await asyncio.gather(*(answer(provider) for _ in range(40)))
    assert answers == ["pong from the endpoint"] * 40
    assert server.connections == 4


async def test_cancelling_a_run_mid_stream_closes_its_connection_and_the_next_call_works(
    server: ModelServer,
) -> None:
    server.push(Hang(after_text="a long answer that stalls"))
    async with make_client() as client:
        provider = provider_over(client, server)
        first = asyncio.Event()

        async def consume() -> None:
            async with aclosing(provider.stream(ask())) as stream:
                async for _ in stream:
                    first.set()

        task = asyncio.create_task(consume())
        async with asyncio.timeout(5):
            await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await server.wait_for_closed(1)  # the endpoint saw the stream end, not the client exit
        assert await answer(provider) == "pong from the endpoint"
    assert server.connections == 2  # a cut stream's connection is not put back in the pool


async def test_a_stream_given_up_early_closes_its_connection(server: ModelServer) -> None:
    server.push(Hang(after_text="more is coming"))
    async with make_client() as client:
        provider = provider_over(client, server)
        async with aclosing(provider.stream(ask())) as stream:
            async for event in stream:
                assert isinstance(event, TextDelta)
                break
        await server.wait_for_closed(1)
        assert server.closed == 1


async def test_closing_the_client_closes_its_idle_connections(server: ModelServer) -> None:
    client = make_client()
    provider = provider_over(client, server)
    await answer(provider)
    assert server.closed == 0  # kept alive for the next call
    await client.aclose()
    await server.wait_for_closed(1)
