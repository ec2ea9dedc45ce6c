"""The real server against a real loopback model endpoint, in both wire formats."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Call, Hang, ModelServer, Reply, Status
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode

from .conftest import SERVER

KEY = "sk-e2e-secret-key-0123456789"


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("the answer is 42\n")
    return tmp_path


async def connect(project: Path, provider: dict[str, Any], **init: Any) -> Connection:
    connection = await Connection.spawn(
        SERVER, env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "TETHER_LOG_LEVEL": "debug"}
    )
    await connection.request(
        "initialize",
        {
            "workspaceFolders": [{"uri": project.as_uri()}],
            "initializationOptions": {
                "provider": provider,
                "kernel": {"systemPrompt": "Be brief."},
            },
            **init,
        },
    )
    connection.notify("initialized", {})
    return connection


@pytest.fixture(params=["openai", "anthropic"])
async def connection(
    request: pytest.FixtureRequest, endpoint: ModelServer, project: Path
) -> AsyncIterator[Connection]:
    kind = request.param
    base_url = endpoint.openai_url if kind == "openai" else endpoint.anthropic_url
    provider = {"type": kind, "baseUrl": base_url, "model": "test-model", "maxRetries": 1}
    connection = await connect(project, provider)
    yield connection
    await connection.close()


async def test_a_run_streams_a_real_endpoint_and_sends_it_the_whole_exchange(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(
        Reply(text="Reading it.", tool_calls=[Call("read_file", {"path": "notes.txt"}, id="t1")]),
        Reply(text="The answer is 42."),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "What is it?"})
    assert result["stopReason"] == "end_turn" and result["response"] == "The answer is 42."
    assert "the answer is 42" in result["toolCalls"][0]["result"]
    assert result["usage"]["inputTokens"] > 0

    first, second = endpoint.requests[-2:]
    assert first.headers.get("authorization", first.headers.get("x-api-key", "")).endswith(KEY)
    assert first.body["stream"] is True and first.body["model"] == "test-model"
    assert "read_file" in json.dumps(first.body["tools"])
    sent = json.dumps(second.body)
    assert "Be brief." in sent and "What is it?" in sent and "the answer is 42" in sent
    assert "t1" in sent  # the tool result answers its call by id


async def test_an_answer_cut_at_the_token_limit_is_stored_with_its_stop_reason(
    connection: Connection, endpoint: ModelServer, request: pytest.FixtureRequest
):
    """A reopened session can tell a cut-off answer from a whole one (editors rebuild it)."""
    kind = request.node.callspec.params["connection"]
    finish = {"openai": "length", "anthropic": "max_tokens"}[kind]
    endpoint.push(Reply(text="The answer is"), Reply(text="The answer is", finish_reason=finish))
    sid = (await connection.request("session/create", {}))["sessionId"]
    whole = await connection.request("kernel/run", {"sessionId": sid, "prompt": "one"})
    cut = await connection.request("kernel/run", {"sessionId": sid, "prompt": "two"})
    assert (whole["stopReason"], cut["stopReason"]) == ("end_turn", "max_tokens")
    messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    answers = [m.get("metadata") or {} for m in messages if m["role"] == "assistant"]
    assert [a.get("stopReason") for a in answers] == [None, "max_tokens"]


async def test_the_endpoint_failing_after_retries_is_a_provider_error_with_its_status(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(Status(500), Status(500))
    sid = (await connection.request("session/create", {}))["sessionId"]
    with pytest.raises(RpcError) as raised:
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"})
    assert raised.value.code == ErrorCode.PROVIDER_ERROR
    assert raised.value.data["status"] == 500
    assert KEY not in json.dumps(raised.value.data) + raised.value.message


async def test_cancel_stops_a_stream_that_stalled(connection: Connection, endpoint: ModelServer):
    endpoint.push(Hang(after_text="Thinking about it"))
    sid = (await connection.request("session/create", {}))["sessionId"]
    run = asyncio.ensure_future(
        connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"})
    )
    async with asyncio.timeout(20):
        while True:
            method, params = await connection.notifications.get()
            if method == "kernel/progress" and params["event"]["kind"] == "message_delta":
                break
    await connection.request("kernel/cancel", {"sessionId": sid})
    result = await asyncio.wait_for(run, 20)
    assert result["stopReason"] == "cancelled"
    messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "Thinking about it"  # what streamed before the stall
    assert messages[1]["metadata"] == {"cancelled": True}


async def test_runs_one_after_another_reuse_one_connection_to_the_endpoint(
    connection: Connection, endpoint: ModelServer
):
    sid = (await connection.request("session/create", {}))["sessionId"]
    for turn in range(5):
        endpoint.push(Reply(text=f"answer {turn}"))
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "again"})
        assert result["response"] == f"answer {turn}"
    assert endpoint.connections == 1


async def test_provider_max_connections_bounds_the_connections_concurrent_runs_open(
    endpoint: ModelServer, project: Path
):
    endpoint.latency = 0.05  # so that the runs overlap
    endpoint.default = Reply(text="done")
    provider = {
        "type": "openai",
        "baseUrl": endpoint.openai_url,
        "model": "test-model",
        "maxConnections": 2,
    }
    connection = await connect(project, provider)
    try:
        sids = [(await connection.request("session/create", {}))["sessionId"] for _ in range(8)]
        results = await asyncio.gather(
            *(connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"}) for sid in sids)
        )
    finally:
        code = await connection.close()
    assert [result["response"] for result in results] == ["done"] * 8
    assert endpoint.connections == 2
    assert code == 0


async def test_a_work_done_token_gets_lsp_progress_begin_reports_and_end(
    endpoint: ModelServer, project: Path
):
    endpoint.push(Reply(tool_calls=[Call("list_files", {}, id="t1")]), Reply(text="ok"))
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m"}
    connection = await connect(project, provider)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "hi", "workDoneToken": "tok-1"}
        )
        progress = []
        while not connection.notifications.empty():
            method, params = connection.notifications.get_nowait()
            if method == "$/progress":
                progress.append(params)
    finally:
        await connection.close()
    assert {p["token"] for p in progress} == {"tok-1"}
    kinds = [p["value"]["kind"] for p in progress]
    assert kinds[0] == "begin" and kinds[-1] == "end" and "report" in kinds
    messages = [p["value"].get("message") for p in progress]
    assert messages == ["thinking", "iteration 1", "tool List .", "iteration 2", "ok", "end_turn"]


async def test_an_mcp_server_that_fails_to_start_is_named_with_its_reason_to_model_and_client(
    endpoint: ModelServer, project: Path
):
    """The model asks for a tool of a server that could not start: the result it reads names
    the server and why; the client gets a ``notice`` event saying the same."""
    missing = str(project / "no-such-mcp-server")
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m", "maxRetries": 0}
    connection = await connect(project, provider)
    try:
        endpoint.push(
            Reply(tool_calls=[Call("github__create_issue", {"title": "x"}, id="t1")]),
            Reply(text="The GitHub server is down."),
        )
        sid = (
            await connection.request(
                "session/create", {"mcpServers": [{"name": "github", "command": missing}]}
            )
        )["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "File it."})
        events = []
        while not connection.notifications.empty():
            method, params = connection.notifications.get_nowait()
            if method == "kernel/progress":
                events.append(params["event"])
    finally:
        await connection.close()

    [notice] = [event for event in events if event["kind"] == "notice"]
    assert [e["kind"] for e in events[:2]] == ["run_started", "notice"]
    assert notice["level"] == "warning"
    assert notice["data"]["source"] == "MCP server 'github'"
    assert "failed to start" in notice["data"]["reason"]
    assert "no-such-mcp-server" in notice["message"]

    [record] = result["toolCalls"]
    assert record["isError"] is True
    assert "MCP server 'github' is not running (it failed to start" in record["result"]
    assert "no-such-mcp-server" in record["result"]
    sent = json.dumps(endpoint.requests[-1].body)
    assert "MCP server 'github' is not running (it failed to start" in sent
    assert "no-such-mcp-server" in sent


async def test_a_model_configured_without_tools_or_system_gets_neither_and_results_as_text(
    endpoint: ModelServer, project: Path
):
    provider = {
        "type": "openai",
        "baseUrl": endpoint.openai_url,
        "model": "m",
        "supportsTools": False,
        "supportsSystem": False,
    }
    connection = await connect(project, provider)
    try:
        endpoint.push(Reply(text="The answer is 42."), Reply(text="Still 42."))
        sid = (await connection.request("session/create", {}))["sessionId"]
        call = {"id": "c1", "name": "read_file", "arguments": '{"path": "notes.txt"}'}
        await connection.request(
            "session/append",
            {
                "sessionId": sid,
                "messages": [
                    {"role": "user", "content": "Read notes."},
                    {"role": "assistant", "toolCalls": [call]},
                    {"role": "tool", "toolCallId": "c1", "name": "read_file", "content": "42"},
                ],
            },
        )
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "What is it?"})
    finally:
        await connection.close()

    body = endpoint.requests[-1].body
    assert "tools" not in body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == "Be brief.\n\nRead notes."
    assert body["messages"][1]["content"] == ('[called tool read_file with {"path": "notes.txt"}]')
    assert body["messages"][2]["content"] == "[tool read_file returned:]\n42\n\nWhat is it?"


async def openai_runs(
    endpoint: ModelServer, project: Path, runs: list[dict[str, Any]], between: list[Any]
) -> list[dict[str, Any]]:
    """The bodies the endpoint got for ``runs`` (extra ``kernel/run`` params each) in one
    session, ``between[i]()`` called after run ``i``."""
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m"}
    connection = await connect(project, provider)
    try:
        endpoint.push(*(Reply(text=f"answer {i}") for i in range(len(runs))))
        sid = (await connection.request("session/create", {}))["sessionId"]
        for i, extra in enumerate(runs):
            params = {"sessionId": sid, "prompt": f"run {i}", **extra}
            await connection.request("kernel/run", params)
            if i < len(between):
                between[i]()
    finally:
        await connection.close()
    return [request.body for request in endpoint.requests[-len(runs) :]]


def system_prompt(body: dict[str, Any]) -> str:
    [system] = [m["content"] for m in body["messages"] if m["role"] == "system"]
    assert isinstance(system, str)
    return system


async def test_memory_added_edited_and_removed_between_runs_is_what_the_next_run_sends(
    endpoint: ModelServer, project: Path
):
    memory = project / ".tether" / "memory" / "style.md"

    def add() -> None:
        memory.parent.mkdir(parents=True)
        memory.write_text("Use tabs.\n")

    def remove_all() -> None:
        memory.unlink()
        memory.parent.rmdir()
        memory.parent.parent.rmdir()

    steps = [add, lambda: memory.write_text("Use spaces.\n"), remove_all]
    bodies = await openai_runs(endpoint, project, [{}] * 4, steps)

    prompts = [system_prompt(body) for body in bodies]
    assert prompts[0] == prompts[3] == "Be brief."
    assert prompts[1] == "Be brief.\n\n# Memory\n\n## .tether/memory/style.md\n\nUse tabs."
    assert prompts[2] == "Be brief.\n\n# Memory\n\n## .tether/memory/style.md\n\nUse spaces."


async def test_a_run_offered_fewer_tools_leaves_the_next_run_all_of_them(
    endpoint: ModelServer, project: Path
):
    runs = [{}, {"tools": ["read_file"]}, {}, {"tools": ["list_files", "read_file"]}]
    bodies = await openai_runs(endpoint, project, runs, [])

    offered = [[tool["function"]["name"] for tool in body.get("tools", [])] for body in bodies]
    assert offered[0] == offered[2]
    assert {"read_file", "list_files", "run_command"} <= set(offered[0])
    assert offered[1] == ["read_file"]
    assert offered[3] == ["read_file", "list_files"]  # in the order of the built-in tools


async def test_a_session_in_each_workspace_folder_is_offered_only_its_folders_tools(
    endpoint: ModelServer, tmp_path: Path
):
    folders = {"first": ["read_file", "list_files"], "second": ["search_text"]}
    for name, enabled in folders.items():
        config = tmp_path / name / ".tether" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(f"[tools]\nenabled = {json.dumps(enabled)}\n")
    first, second = tmp_path / "first", tmp_path / "second"
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m"}
    connection = await connect(
        first,
        provider,
        workspaceFolders=[{"uri": first.as_uri()}, {"uri": second.as_uri()}],
    )
    try:
        endpoint.push(Reply(text="in the first"), Reply(text="in the second"))
        in_first = (await connection.request("session/create", {}))["sessionId"]
        created = await connection.request("session/create", {"workspace": second.as_uri()})
        for sid in (in_first, created["sessionId"]):
            result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"})
            assert "warnings" not in result
    finally:
        await connection.close()
    bodies = [request.body for request in endpoint.requests[-2:]]
    offered = [[tool["function"]["name"] for tool in body.get("tools", [])] for body in bodies]
    assert offered == [folders["first"], folders["second"]]


async def test_a_local_endpoint_has_no_price_so_the_run_and_session_cost_stay_unknown(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(Reply(text="Hi.", usage=(1200, 30)))
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "Hello"})
    assert result["usage"]["inputTokens"] == 1200 and "cost" not in result["usage"]
    assert result["model"] == "test-model"
    session = await connection.request("session/get", {"sessionId": sid})
    assert session["usage"] == {"inputTokens": 1200, "outputTokens": 30}
