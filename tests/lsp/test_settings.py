"""``workspace/didChangeConfiguration`` from a generic LSP client (pytest-lsp's), with the
settings grouped under ``tether`` as editors send them: the next ``tether.ask`` turn uses them, a
turn in flight keeps those it began with, and settings that cannot be used are a warning."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lsprotocol import types as lsp

from ..fakes.model_server import Call, ModelServer, Reply
from .conftest import Server
from .test_language_server import ask, ended, until


@pytest.fixture
async def endpoint() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


def layer(endpoint: ModelServer, model: str) -> dict[str, Any]:
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": model, "maxRetries": 0}
    return {"provider": provider, "sessions": {"store": "memory"}}


@pytest.fixture
def options(endpoint: ModelServer) -> dict[str, Any]:
    return layer(endpoint, "model-a")


def change(server: Server, settings: Any) -> None:
    server.client.workspace_did_change_configuration(
        lsp.DidChangeConfigurationParams(settings=settings)
    )


async def test_the_next_turn_asks_for_the_model_the_settings_changed_to(
    server: Server, endpoint: ModelServer
) -> None:
    endpoint.push(Reply(text="First."), Reply(text="Second."))
    await ask(server, "one")
    await until(lambda: ended(server))
    change(server, {"tether": layer(endpoint, "model-b")})
    await ask(server, "two")
    await until(lambda: ended(server, 2))

    first, second = endpoint.requests
    assert (first.body["model"], second.body["model"]) == ("model-a", "model-b")
    prompts = [m["content"] for m in second.body["messages"] if m["role"] == "user"]
    assert "one" in prompts[0] and "two" in prompts[-1]  # the same conversation
    assert server.client.messages == []


async def test_a_turn_in_flight_keeps_its_model_and_invalid_settings_warn(
    server: Server, endpoint: ModelServer
) -> None:
    pace: asyncio.Queue[None] = asyncio.Queue()
    endpoint.push(
        Reply(text="Reading.", tool_calls=[Call("list_files", {"path": "."})], pace=pace),
        Reply(text="Empty."),
        Reply(text="Later."),
    )
    (server.workspace / "a.txt").write_text("a\n")
    await ask(server, "what is here?")
    await endpoint.wait_for_requests(1)
    change(server, {"tether": layer(endpoint, "model-b")})
    bad = {**layer(endpoint, "model-c"), "kernel": {"maxIterations": 0}}
    change(server, {"tether": bad})
    await until(lambda: server.client.messages)  # taken, in order, before the turn goes on
    for _ in range(50):
        pace.put_nowait(None)
    await until(lambda: ended(server))
    await ask(server, "and now?")
    await until(lambda: ended(server, 2))

    models = [request.body["model"] for request in endpoint.requests]
    assert models == ["model-a", "model-a", "model-b"]
    [warning] = server.client.messages
    assert warning.type == lsp.MessageType.Warning
    assert "kernel.max_iterations" in warning.message
    assert "workspace/didChangeConfiguration" in warning.message
