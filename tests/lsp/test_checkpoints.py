"""``tether.undo`` from a generic LSP client: the files of the last turn put back, against a
loopback model endpoint that makes the turn run a command that changes files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from ..fakes.model_server import Call, ModelServer, Reply
from .conftest import Server
from .test_language_server import answered, ended, execute, until


@pytest.fixture
async def endpoint() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
def options(endpoint: ModelServer) -> dict[str, Any]:
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m", "maxRetries": 0}
    return {"provider": provider, "tools": {"approval": "auto", "sandbox": "off"}}


async def test_undo_puts_back_the_files_the_last_turn_changed(
    server: Server, endpoint: ModelServer
) -> None:
    (server.workspace / "app.py").write_text("x = 1\n")
    command = "echo 'x = 2' > app.py && echo made > made.txt"
    endpoint.push(
        Reply(text="Changing.", tool_calls=[Call("run_command", {"command": command})]),
        Reply(text="Changed."),
    )
    await answered(server, "change it")
    await until(lambda: ended(server))
    assert (server.workspace / "made.txt").exists()

    undone = await execute(server, "tether.undo")
    assert undone == {"restored": ["app.py"], "removed": ["made.txt"], "messagesRemoved": 0}
    assert (server.workspace / "app.py").read_text() == "x = 1\n"
    assert not (server.workspace / "made.txt").exists()


async def test_undo_with_no_turn_that_changed_files_is_refused(server: Server) -> None:
    with pytest.raises(JsonRpcException) as refused:
        await execute(server, "tether.undo")
    assert refused.value.code == -32602
