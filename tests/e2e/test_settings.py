"""Settings changed on a running server (``workspace/didChangeConfiguration``) through the real
``tether serve``, against a loopback OpenAI-compatible endpoint: the next run uses them, a run in
flight keeps those it began with, settings that cannot be used change nothing and say so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Call, ModelServer, Reply
from tether.client import Connection
from tether.protocol import ErrorCode

from .conftest import SERVER

KEY = "sk-settings-secret-0123456789"
SETTINGS = "workspace/didChangeConfiguration"


@pytest.fixture
async def endpoint() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


def layer(endpoint: ModelServer, model: str, **sections: Any) -> dict[str, Any]:
    """The client's layer, as an editor sends it at the handshake and on every change."""
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": model, "maxRetries": 0}
    return {"provider": provider, "sessions": {"store": "memory"}, **sections}


@pytest.fixture
async def connection(endpoint: ModelServer, project: Path) -> AsyncIterator[Connection]:
    connection = await Connection.spawn(SERVER, env={"OPENAI_API_KEY": KEY})
    await connection.request(
        "initialize",
        {
            "workspaceFolders": [{"uri": project.as_uri()}],
            "capabilities": {"window": {"showMessage": {}}},
            "initializationOptions": layer(endpoint, "model-a"),
        },
    )
    connection.notify("initialized", {})
    yield connection
    await connection.close()


async def run(connection: Connection, sid: str, prompt: str) -> dict[str, Any]:
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
    assert result["stopReason"] == "end_turn", result
    return result


def shown(connection: Connection) -> list[dict[str, Any]]:
    """The ``window/showMessage`` notifications received so far (the others are dropped)."""
    found = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "window/showMessage":
            found.append(params)
    return found


async def test_the_next_run_asks_for_the_model_the_settings_changed_to_in_the_same_session(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(Reply(text="First."), Reply(text="Second."))
    sid = (await connection.request("session/create", {}))["sessionId"]
    await run(connection, sid, "one")
    connection.notify(SETTINGS, {"settings": layer(endpoint, "model-b")})
    second = await run(connection, sid, "two")

    first_request, second_request = endpoint.requests
    assert first_request.body["model"] == "model-a"
    assert second_request.body["model"] == "model-b"
    sent = [m.get("content") for m in second_request.body["messages"] if m["role"] != "system"]
    assert sent == ["one", "First.", "two"]  # the conversation goes on
    assert second["response"] == "Second."
    assert shown(connection) == []


async def test_the_http_client_is_made_again_only_when_max_connections_changes(
    connection: Connection, endpoint: ModelServer
):
    """Each provider is made for its settings, over the one client the server keeps: a new model
    goes on over the same connection, a new connection limit over a new client."""
    endpoint.push(*(Reply(text=f"answer {n}") for n in range(3)))
    sid = (await connection.request("session/create", {}))["sessionId"]
    await run(connection, sid, "one")
    connection.notify(SETTINGS, {"settings": layer(endpoint, "model-b")})
    await run(connection, sid, "two")
    assert endpoint.connections == 1
    limited = layer(endpoint, "model-b")
    limited["provider"]["maxConnections"] = 4
    connection.notify(SETTINGS, {"settings": limited})
    await run(connection, sid, "three")
    assert endpoint.connections == 2
    assert [r.body["model"] for r in endpoint.requests] == ["model-a", "model-b", "model-b"]


async def test_the_approval_policy_changed_in_the_settings_holds_from_the_next_run(
    connection: Connection, endpoint: ModelServer, project: Path
):
    """The client declared no permissions: under ``ask`` a write is refused, under ``auto`` made."""
    write = [Call("write_file", {"path": "out.txt", "content": "written\n"})]
    endpoint.push(Reply(tool_calls=write), Reply(text="Refused."))
    endpoint.push(Reply(tool_calls=write), Reply(text="Done."))
    sid = (await connection.request("session/create", {}))["sessionId"]
    refused = await run(connection, sid, "write it")
    assert refused["toolCalls"][0]["isError"] and not (project / "out.txt").exists()
    auto = layer(endpoint, "model-a", tools={"approval": "auto"})
    connection.notify(SETTINGS, {"settings": auto})
    made = await run(connection, sid, "write it now")
    assert not made["toolCalls"][0]["isError"]
    assert (project / "out.txt").read_text() == "written\n"


async def test_invalid_settings_warn_and_the_previous_configuration_stays(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(Reply(text="Still model-a."))
    sid = (await connection.request("session/create", {}))["sessionId"]
    bad = layer(endpoint, "model-b", tools={"approval": "sometimes"})
    connection.notify(SETTINGS, {"settings": bad})
    connection.notify(SETTINGS, {"settings": ["not", "an", "object"]})
    await run(connection, sid, "hello")

    assert endpoint.requests[0].body["model"] == "model-a"
    first, second = shown(connection)
    assert first["type"] == 2 and "tools.approval" in first["message"]
    assert "workspace/didChangeConfiguration" in first["message"]
    assert second["type"] == 2 and "settings must be an object" in second["message"]


async def test_empty_settings_keep_the_layer_the_handshake_set(
    connection: Connection, endpoint: ModelServer
):
    """eglot sends ``{}`` right after the handshake; Neovim ``null`` without settings."""
    endpoint.push(Reply(text="ok"))
    sid = (await connection.request("session/create", {}))["sessionId"]
    connection.notify(SETTINGS, {"settings": {}})
    connection.notify(SETTINGS, {"settings": None})
    await run(connection, sid, "hello")
    assert endpoint.requests[0].body["model"] == "model-a"
    assert shown(connection) == []


async def test_a_run_in_flight_keeps_the_settings_it_began_with(
    connection: Connection, endpoint: ModelServer, project: Path
):
    pace: asyncio.Queue[None] = asyncio.Queue()
    endpoint.push(
        Reply(text="Reading.", tool_calls=[Call("read_file", {"path": "README.md"})], pace=pace),
        Reply(text="It is a demo."),
        Reply(text="Now on model-b."),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    _, running = connection.start_request("kernel/run", {"sessionId": sid, "prompt": "what?"})
    await endpoint.wait_for_requests(1)
    connection.notify(SETTINGS, {"settings": layer(endpoint, "model-b")})
    await connection.request("session/list", {})  # answered after the settings were taken
    for _ in range(50):
        pace.put_nowait(None)
    async with asyncio.timeout(10):
        result = await running
    assert result["response"] == "It is a demo."
    await run(connection, sid, "and now?")

    models = [request.body["model"] for request in endpoint.requests]
    assert models == ["model-a", "model-a", "model-b"]


async def test_a_setting_the_server_keeps_until_a_restart_is_said_and_the_rest_applies(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(Reply(text="First."), Reply(text="Second."))
    sid = (await connection.request("session/create", {}))["sessionId"]
    await run(connection, sid, "one")
    changed = layer(endpoint, "model-b")
    changed["sessions"] = {"store": "sqlite"}
    connection.notify(SETTINGS, {"settings": changed})
    await run(connection, sid, "two")  # the session is still in the memory store

    assert endpoint.requests[1].body["model"] == "model-b"
    [warning] = shown(connection)
    assert warning["type"] == 2 and "sessions.store" in warning["message"]
    assert "restart" in warning["message"]
    info = await connection.request("session/get", {"sessionId": sid})
    assert info["sessionId"] == sid


async def test_settings_before_initialize_are_ignored_and_a_request_still_needs_it(
    endpoint: ModelServer,
):
    connection = await Connection.spawn(SERVER)
    try:
        connection.notify(SETTINGS, {"settings": layer(endpoint, "model-b")})
        with pytest.raises(Exception) as caught:
            await connection.request("session/list", {})
        assert getattr(caught.value, "code", None) == ErrorCode.SERVER_NOT_INITIALIZED
    finally:
        await connection.close()
