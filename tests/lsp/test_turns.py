"""How a ``tether.ask`` turn shows itself to a generic LSP client, against a loopback model
endpoint the test paces: the command is answered while the model is still answering, the
progress keeps each model call's text apart, and a client without ``window/showDocument`` is
told when a turn was cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lsprotocol import types as lsp

from ..fakes.model_server import Call, Hang, ModelServer, Reply
from .conftest import CAPABILITIES, Server
from .test_language_server import answered, ask, ended, execute, reports, until

NO_SHOW_DOCUMENT = lsp.ClientCapabilities(
    window=lsp.WindowClientCapabilities(
        work_done_progress=True, show_message=lsp.ShowMessageRequestClientCapabilities()
    ),
    workspace=CAPABILITIES.workspace,
)


@pytest.fixture
async def endpoint() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


@pytest.fixture
def options(endpoint: ModelServer) -> dict[str, Any]:
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m", "maxRetries": 0}
    return {"provider": provider}


async def test_ask_answers_as_the_turn_starts_while_the_model_is_still_answering(
    server: Server, endpoint: ModelServer
) -> None:
    pace: asyncio.Queue[None] = asyncio.Queue()
    endpoint.push(Reply(text="It is a small module.", pace=pace))
    answer = await ask(server, "what is this?")
    assert set(answer) == {"sessionId", "runId"}
    await endpoint.wait_for_requests(1)
    # The endpoint holds its answer until the test lets it go: the turn cannot have ended.
    assert not server.client.shown_documents and not ended(server)
    for _ in range(20):  # every event of the answer
        pace.put_nowait(None)
    await until(lambda: server.client.shown_documents)
    (shown,) = server.client.shown_documents
    assert shown.uri.endswith(f"/transcript-{answer['runId']}.md")
    await until(lambda: ended(server))
    assert reports(server)[-2:] == ["It is a small module.", "end_turn"]


async def test_progress_keeps_the_text_of_each_model_call_apart(
    server: Server, endpoint: ModelServer
) -> None:
    (server.workspace / "app.py").write_text("x = 1\n")
    endpoint.push(
        Reply(text="Reading the file.", tool_calls=[Call("read_file", {"path": "app.py"})]),
        Reply(text="It sets x."),
    )
    _, text = await answered(server, "what does app.py do?")
    await until(lambda: ended(server))
    messages = reports(server)
    assert "Reading the file." in messages and "It sets x." in messages
    assert not any("file.It" in message for message in messages)
    assert "Reading the file.\n\n- Read app.py\n\nIt sets x.\n" in text


@pytest.mark.parametrize("capabilities", [NO_SHOW_DOCUMENT])
async def test_a_client_without_show_document_is_told_the_turn_was_cancelled(
    server: Server, endpoint: ModelServer
) -> None:
    endpoint.push(Hang(after_text="Half an"))
    await ask(server, "take your time")
    await until(lambda: "Half an" in reports(server))
    assert await execute(server, "tether.cancel") == {"cancelled": True}
    await until(lambda: server.client.messages)
    (message,) = server.client.messages
    assert message.message == "Half an\n\n(tether: the turn was cancelled)"
    assert message.type == lsp.MessageType.Warning


async def test_the_second_answer_is_shown_in_a_new_document_with_both_turns(
    server: Server, endpoint: ModelServer
) -> None:
    endpoint.push(Reply(text="First answer."), Reply(text="Second answer."))
    first, _ = await answered(server, "one")
    second, text = await answered(server, "two")
    assert first["sessionId"] == second["sessionId"]
    first_uri, second_uri = (doc.uri for doc in server.client.shown_documents)
    assert first_uri != second_uri
    assert text.index("First answer.") < text.index("Second answer.")


@pytest.mark.parametrize("capabilities", [NO_SHOW_DOCUMENT])
async def test_a_client_without_show_document_gets_the_text_of_every_model_call(
    server: Server, endpoint: ModelServer
) -> None:
    (server.workspace / "app.py").write_text("x = 1\n")
    endpoint.push(
        Reply(text="Reading the file.", tool_calls=[Call("read_file", {"path": "app.py"})]),
        Reply(text="It sets x."),
    )
    await ask(server, "what does app.py do?")
    await until(lambda: server.client.messages)
    (message,) = server.client.messages
    assert message.message == "Reading the file.\n\nIt sets x."
    assert message.type == lsp.MessageType.Info


async def test_a_turn_about_a_document_reads_the_agents_md_of_its_folder(
    server: Server, endpoint: ModelServer
) -> None:
    (server.workspace / "AGENTS.md").write_text("Root rules.\n")
    (server.workspace / "pkg").mkdir()
    (server.workspace / "pkg" / "AGENTS.md").write_text("Package rules.\n")
    (server.workspace / "pkg" / "mod.py").write_text("x = 1\n")
    endpoint.push(Reply(text="It sets x."), Reply(text="Hello."))
    document = (server.workspace / "pkg" / "mod.py").as_uri()
    await answered(server, {"prompt": "what is this?", "uri": document})
    await answered(server, "hello")
    about_document, plain = (request.body for request in endpoint.requests[-2:])
    [system] = [m["content"] for m in about_document["messages"] if m["role"] == "system"]
    assert system.endswith("## AGENTS.md\n\nRoot rules.\n\n## pkg/AGENTS.md\n\nPackage rules.")
    [system] = [m["content"] for m in plain["messages"] if m["role"] == "system"]
    assert system.endswith("## AGENTS.md\n\nRoot rules.")
