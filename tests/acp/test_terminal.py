"""``run_command`` in the editor's terminal (``acp.editor_terminal``, a client with
``terminal: true``): asked about first, run by the client, embedded in the tool call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from acp import text_block

from tests.acp.conftest import Agent, Setup, until
from tether.testing import tool_call

OPT_IN = "[acp]\neditor_terminal = true\n"


def _order(agent: Agent) -> list[str]:
    """The methods tether sent to the client, in order (updates left out)."""
    return [
        m["method"]
        for d, m in agent.wire.log
        if d == "in" and "method" in m and m["method"] != "session/update"
    ]


def _call_updates(agent: Agent, session_id: str) -> list[dict[str, Any]]:
    return [u for u in agent.wire.updates(session_id) if u["sessionUpdate"] == "tool_call_update"]


async def test_an_approved_command_runs_in_the_editors_terminal_and_the_call_shows_it(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("run_command", "r1", command="echo hi from $PWD; exit 3")]},
            {"text": "It failed."},
        ],
        more=OPT_IN,
    )
    async with setup.agent(terminal=True) as agent:
        agent.client.answers = ["allow_once"]
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        updates = _call_updates(agent, session.session_id)
        order = _order(agent)
        [create] = agent.wire.received("terminal/create")
        calls = agent.client.terminal_calls
    assert answer.stop_reason == "end_turn"
    assert order == [
        "session/request_permission",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    params = create["params"]
    assert (params["command"], params["args"]) == ("/bin/sh", ["-c", "echo hi from $PWD; exit 3"])
    assert params["cwd"] == str(project) and params["outputByteLimit"] > 0
    assert [name for name, _ in calls] == ["create", "wait_for_exit", "output", "release"]
    [terminal_id] = {terminal for _, terminal in calls}
    embedded = {"type": "terminal", "terminalId": terminal_id}
    shown = [u for u in updates if embedded in (u.get("content") or [])]
    assert [u["status"] for u in shown] == ["in_progress", "failed"]
    last = updates[-1]
    assert last["status"] == "failed" and last["content"][0] == embedded
    assert last["rawOutput"].startswith("exit code 3 (run in the editor's terminal")
    assert f"hi from {project}" in last["rawOutput"]


async def test_a_rejected_command_never_reaches_the_terminal(setup: Setup, project: Path) -> None:
    setup.script(
        [{"toolCalls": [tool_call("run_command", "r1", command="true")]}, {"text": "OK."}],
        more=OPT_IN,
    )
    async with setup.agent(terminal=True) as agent:
        agent.client.answers = ["reject_once"]
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        updates = _call_updates(agent, session.session_id)
    assert agent.client.terminal_calls == []
    assert updates[-1]["status"] == "failed"


async def test_without_the_opt_in_commands_run_in_tethers_sandbox(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [{"toolCalls": [tool_call("run_command", "r1", command="echo inside")]}, {"text": "OK."}],
        approval="auto",
    )
    async with setup.agent(terminal=True) as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        updates = _call_updates(agent, session.session_id)
    assert agent.client.terminal_calls == []
    assert updates[-1]["status"] == "completed" and "inside" in updates[-1]["rawOutput"]
    assert "editor's terminal" not in updates[-1]["rawOutput"]


async def test_a_command_past_its_timeout_is_killed_then_released(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("run_command", "r1", command=["sleep", "600"], timeout=0.2)]},
            {"text": "Too slow."},
        ],
        approval="auto",
        more=OPT_IN,
    )
    async with setup.agent(terminal=True) as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        updates = _call_updates(agent, session.session_id)
        calls = [name for name, _ in agent.client.terminal_calls]
    assert calls == ["create", "wait_for_exit", "kill", "output", "release"]
    assert updates[-1]["status"] == "failed"
    assert updates[-1]["rawOutput"].startswith("timed out after 0.2 s: the command was killed")


async def test_a_cancelled_turn_releases_the_terminal_of_its_running_command(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [{"toolCalls": [tool_call("run_command", "r1", command=["sleep", "600"])]}],
        approval="auto",
        more=OPT_IN,
    )
    async with setup.agent(terminal=True) as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        prompt = asyncio.ensure_future(
            agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        )
        await until(agent.client.terminal_created)
        await agent.conn.cancel(session_id=session.session_id)
        answer = await asyncio.wait_for(prompt, 20)
        await until(agent.client.terminal_released)
        calls = [name for name, _ in agent.client.terminal_calls]
    assert answer.stop_reason == "cancelled"
    assert calls[0] == "create" and calls[-1] == "release"
    assert agent.client.terminals == {}
