"""Sessions through the real ``tether acp``: load (with its replay), list, resume, fork, delete,
close, and the errors of a session that does not exist."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from tests.acp.conftest import COMMANDS_UPDATE, Setup
from tests.fakes.sse import sse_server
from tests.tools.test_mcp import eventually
from tether.protocol import ErrorCode
from tether.testing import tool_call

RESOURCE_NOT_FOUND = -32002


@pytest.fixture
def durable(setup: Setup, tmp_path: Path) -> Setup:
    setup.env["TETHER_SESSIONS_STORE"] = "sqlite"
    setup.env["TETHER_SESSIONS_PATH"] = str(tmp_path / "sessions.db")
    return setup


async def test_load_in_a_second_process_replays_the_whole_history_before_answering(
    durable: Setup, project: Path
) -> None:
    durable.script(
        [
            {"text": "Reading.", "toolCalls": [tool_call("read_file", "c1", path="README.md")]},
            {"text": "A small project."},
        ]
    )
    async with durable.agent() as first:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
        await first.conn.prompt(session_id=session.session_id, prompt=[text_block("What is it?")])
    async with durable.agent() as second:
        await second.conn.load_session(cwd=str(project), session_id=session.session_id)
        log = second.wire.log
    [load_id] = [m["id"] for d, m in log if d == "out" and m.get("method") == "session/load"]
    answered = next(i for i, (d, m) in enumerate(log) if d == "in" and m.get("id") == load_id)
    replay = [
        m["params"]["update"]
        for d, m in log[:answered]
        if d == "in" and m.get("method") == "session/update"
    ]
    after = [
        m
        for d, m in log[answered:]
        if d == "in"
        and m.get("method") == "session/update"
        and m["params"]["update"]["sessionUpdate"] != COMMANDS_UPDATE
    ]
    assert after == []
    assert [_shown(update) for update in replay] == [
        ("user_message_chunk", "What is it?"),
        ("agent_message_chunk", "Reading."),
        ("tool_call", "Read README.md"),
        ("tool_call_update", "completed"),
        ("agent_message_chunk", "A small project."),
        ("session_info_update", "What is it?"),
    ]
    result = replay[3]
    assert result["status"] == "completed" and "A small project" in result["rawOutput"]
    assert result["content"][0]["content"]["text"] == result["rawOutput"]


def _shown(update: dict[str, Any]) -> tuple[str, str]:
    kind = update["sessionUpdate"]
    if kind.endswith("_chunk"):
        return kind, update["content"]["text"]
    return kind, update["status"] if kind == "tool_call_update" else update["title"]


async def test_list_filters_by_cwd_and_pages_with_a_cursor(
    setup: Setup, project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    setup.script([])
    async with setup.agent() as agent:
        mine = [
            (await agent.conn.new_session(cwd=str(project), mcp_servers=[])).session_id
            for _ in range(51)
        ]
        theirs = await agent.conn.new_session(cwd=str(other), mcp_servers=[])
        first = await agent.conn.list_sessions(cwd=str(project))
        assert first.next_cursor is not None
        second = await agent.conn.list_sessions(cwd=str(project), cursor=first.next_cursor)
        everything = await agent.conn.list_sessions()
    listed = [info.session_id for info in first.sessions + second.sessions]
    assert sorted(listed) == sorted(mine) and len(first.sessions) == 50
    assert second.next_cursor is None
    assert {info.cwd for info in first.sessions} == {str(project)}
    assert theirs.session_id in {info.session_id for info in everything.sessions}


async def test_resume_and_close_keep_the_session_and_its_history(
    setup: Setup, project: Path
) -> None:
    setup.script([{"text": "One."}, {"text": "Two."}])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("1")])
        await agent.conn.close_session(session_id=session.session_id)
        before = len(agent.wire.updates(session.session_id))
        await agent.conn.resume_session(session_id=session.session_id, cwd=str(project))
        assert len(agent.wire.updates(session.session_id)) == before  # resume replays nothing
        answer = await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("2")])
    assert answer.stop_reason == "end_turn"


async def test_fork_makes_a_new_session_with_the_history(setup: Setup, project: Path) -> None:
    setup.script([{"text": "Original."}])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("hi")])
        fork = await agent.request(
            "session/fork", {"sessionId": session.session_id, "cwd": str(project)}
        )
        await agent.conn.load_session(cwd=str(project), session_id=fork["sessionId"])
        replayed = agent.wire.updates(fork["sessionId"])
    assert fork["sessionId"] != session.session_id
    texts = [u["content"]["text"] for u in replayed if "content" in u]
    assert texts == ["hi", "Original."]


async def test_delete_removes_the_session_and_later_requests_name_it_unknown(
    setup: Setup, project: Path
) -> None:
    setup.script([])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        assert await agent.request("session/delete", {"sessionId": session.session_id}) == {}
        listed = await agent.conn.list_sessions()
        with pytest.raises(RequestError) as prompt:
            await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("x")])
        with pytest.raises(RequestError) as load:
            await agent.conn.load_session(cwd=str(project), session_id=session.session_id)
        with pytest.raises(RequestError) as mode:
            await agent.conn.set_session_mode(session_id=session.session_id, mode_id="ask")
    assert listed.sessions == []
    for error in (prompt, load, mode):
        assert error.value.code == RESOURCE_NOT_FOUND
        assert error.value.data == {"sessionId": session.session_id}


async def test_a_store_fault_is_answered_store_error_with_its_reason(
    durable: Setup, project: Path, tmp_path: Path
) -> None:
    """The session database deleted under the agent: its writes are refused (-32015, reason
    ``replaced``) and the agent goes on."""
    durable.script([{"text": "never"}])
    async with durable.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        (tmp_path / "sessions.db").unlink()
        with pytest.raises(RequestError) as prompt:
            await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("x")])
        with pytest.raises(RequestError) as new:
            await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        assert agent.process.returncode is None
    for error in (prompt, new):
        assert error.value.code == ErrorCode.STORE_ERROR
        assert error.value.data == {"reason": "replaced"}


async def test_invalid_params_are_answered_with_the_field(setup: Setup, project: Path) -> None:
    setup.script([])
    async with setup.agent() as agent:
        with pytest.raises(RequestError) as relative:
            await agent.conn.new_session(cwd="relative/dir", mcp_servers=[])
        with pytest.raises(RequestError) as missing:
            await agent.request("session/new", {"mcpServers": []})
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        with pytest.raises(RequestError) as mode:
            await agent.conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
    assert relative.value.code == missing.value.code == mode.value.code == -32602
    assert relative.value.data["fields"][0]["field"] == "cwd"
    assert missing.value.data["fields"][0]["field"] == "cwd"
    assert mode.value.data["fields"][0]["field"] == "modeId"


async def test_a_sessions_mcp_servers_are_given_to_its_runs(setup: Setup, project: Path) -> None:
    fake = Path(__file__).parents[1] / "fakes" / "mcp_server.py"
    setup.script(
        [
            {"toolCalls": [tool_call("my_fake__echo", "m1", text="hello")]},
            {"text": "Echoed."},
        ]
    )
    server = {
        "name": "my fake",
        "command": sys.executable,
        "args": [str(fake)],
        "env": [{"name": "TETHER_MCP_PIDS", "value": str(project.parent / "pids")}],
    }
    async with setup.agent() as agent:
        session = await agent.request("session/new", {"cwd": str(project), "mcpServers": [server]})
        await agent.conn.prompt(session_id=session["sessionId"], prompt=[text_block("echo")])
        updates = agent.wire.updates(session["sessionId"])
    [start] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert start["title"] == "my_fake: echo" and start["kind"] == "read"
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    assert last["status"] == "completed" and last["rawOutput"] == "hello"
    assert (project.parent / "pids").read_text().strip()


async def test_a_sessions_mcp_servers_start_before_its_first_prompt(
    setup: Setup, project: Path
) -> None:
    fake = Path(__file__).parents[1] / "fakes" / "mcp_server.py"
    pids = project.parent / "pids"
    setup.script(
        [{"toolCalls": [tool_call("my_fake__echo", "m1", text="early")]}, {"text": "Echoed."}]
    )
    server = {
        "name": "my fake",
        "command": sys.executable,
        "args": [str(fake)],
        "env": [{"name": "TETHER_MCP_PIDS", "value": str(pids)}],
    }
    async with setup.agent() as agent:
        session = await agent.request("session/new", {"cwd": str(project), "mcpServers": [server]})
        await eventually(lambda: pids.exists() and bool(pids.read_text().strip()), "it started")
        await agent.conn.prompt(session_id=session["sessionId"], prompt=[text_block("echo")])
        updates = agent.wire.updates(session["sessionId"])
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    assert last["status"] == "completed" and last["rawOutput"] == "early"
    assert len(pids.read_text().split()) == 1  # the prompt used the server started before it


async def test_servers_given_to_session_load_start_before_its_next_prompt(
    durable: Setup, project: Path
) -> None:
    fake = Path(__file__).parents[1] / "fakes" / "mcp_server.py"
    pids = project.parent / "pids"
    durable.script([{"text": "Hello."}])
    server = {
        "name": "fake",
        "command": sys.executable,
        "args": [str(fake)],
        "env": [{"name": "TETHER_MCP_PIDS", "value": str(pids)}],
    }
    async with durable.agent() as first:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
    async with durable.agent() as second:
        await second.request(
            "session/load",
            {"sessionId": session.session_id, "cwd": str(project), "mcpServers": [server]},
        )
        await eventually(lambda: pids.exists() and bool(pids.read_text().strip()), "it started")


async def test_an_sse_mcp_server_is_given_to_the_sessions_runs(
    setup: Setup, project: Path, tmp_path: Path
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("events__echo", "m1", text="over SSE")]},
            {"text": "Echoed."},
        ]
    )
    headers = tmp_path / "headers.txt"
    async with sse_server({"TETHER_MCP_HEADERS": str(headers)}) as url, setup.agent() as agent:
        server = {
            "type": "sse",
            "name": "events",
            "url": url,
            "headers": [{"name": "Authorization", "value": "Bearer acp"}],
        }
        session = await agent.request("session/new", {"cwd": str(project), "mcpServers": [server]})
        await agent.conn.prompt(session_id=session["sessionId"], prompt=[text_block("echo")])
        updates = agent.wire.updates(session["sessionId"])
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    assert last["status"] == "completed" and last["rawOutput"] == "over SSE"
    assert "Bearer acp" in headers.read_text().split("\n")


async def test_a_tool_call_whose_arguments_nest_too_deep_fails_and_loads_again_as_text(
    durable: Setup, project: Path
) -> None:
    """The arguments are shown as the text the model wrote (as JSON they could not always be
    encoded), the call fails, the turn goes on, and the session loads again with it."""
    arguments = '{"path": ' + "[" * 300 + "]" * 300 + "}"
    durable.script(
        [
            {"toolCalls": [{"id": "d1", "name": "read_file", "arguments": arguments}]},
            {"text": "Too deep."},
        ],
        approval="auto",
    )
    async with durable.agent() as first:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await first.conn.prompt(session_id=session.session_id, prompt=[text_block("r")])
        updates = first.wire.updates(session.session_id)
    assert answer.stop_reason == "end_turn"
    [start] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert start["rawInput"] == arguments
    progress = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
    assert progress[-1]["status"] == "failed"
    async with durable.agent() as second:
        await second.conn.load_session(cwd=str(project), session_id=session.session_id)
        replayed = second.wire.updates(session.session_id)
    [shown] = [u for u in replayed if u["sessionUpdate"] == "tool_call"]
    assert shown["rawInput"] == arguments
