"""MCP tool sources through the real server: a scripted model calls tools of a real MCP server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection

from ..tools.test_mcp import FAKE, alive, eventually
from .conftest import start_scripted
from .test_kernel import call, drain


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def fake_server(tmp_path: Path, name: str = "fake") -> dict[str, Any]:
    return {
        "name": name,
        "command": sys.executable,
        "args": [str(FAKE)],
        "env": {"TETHER_MCP_PIDS": str(tmp_path / "pids.txt")},
    }


def pids(tmp_path: Path) -> list[int]:
    path = tmp_path / "pids.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def start(project: Path, turns: list[dict[str, Any]], **tools: Any) -> Connection:
    tools.setdefault("approval", "auto")  # MCP tools that are not read-only need approval
    return await start_scripted(project, turns, tools=tools)


async def test_a_run_calls_a_tool_of_a_configured_mcp_server_and_exit_stops_it(
    project: Path, tmp_path: Path
):
    turns = [
        {"toolCalls": [call("c1", "fake__echo", text="over the wire"), call("c2", "fake__fail")]},
        {"text": "It echoed."},
    ]
    connection = await start(project, turns, mcpServers=[fake_server(tmp_path)])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "echo"})
        events = drain(connection)
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn"
    echo, fail = result["toolCalls"]
    assert (echo["name"], echo["result"], echo["isError"]) == (
        "fake__echo",
        "over the wire",
        False,
    )
    assert fail["isError"] and "reason" in fail["result"]  # invalid arguments, told by the server
    updates = [e["event"] for e in events if e["event"]["kind"] == "tool_call_update"]
    assert {"toolCallId": "c1", "status": "completed", "result": "over the wire"} in [
        {k: v for k, v in u.items() if k != "kind"} for u in updates
    ]
    [pid] = pids(tmp_path)
    await eventually(lambda: not alive(pid), "tether's exit stopped the MCP server")


async def test_a_sessions_own_mcp_server_serves_its_runs_and_stops_when_it_is_deleted(
    project: Path, tmp_path: Path
):
    turns = [{"toolCalls": [call("c1", "mine__echo", text="just mine")]}, {"text": "Done."}]
    connection = await start(project, turns)
    try:
        created = await connection.request(
            "session/create", {"mcpServers": [fake_server(tmp_path, "mine")]}
        )
        sid = created["sessionId"]
        assert "mcpServers" not in created  # kept in the server's memory, not in the session
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "echo"})
        [pid] = pids(tmp_path)
        assert alive(pid)
        await connection.request("session/delete", {"sessionId": sid})
        await eventually(lambda: not alive(pid), "deleting the session stopped its MCP server")
    finally:
        await connection.close()
    assert [(c["name"], c["result"]) for c in result["toolCalls"]] == [("mine__echo", "just mine")]


async def test_a_sessions_mcp_servers_start_when_it_is_created_and_its_first_run_uses_them(
    project: Path, tmp_path: Path
):
    configured, own = tmp_path / "configured", tmp_path / "own"
    configured.mkdir(), own.mkdir()
    turns = [
        {
            "toolCalls": [
                call("c1", "fake__echo", text="shared"),
                call("c2", "mine__echo", text="own"),
            ]
        },
        {"text": "Done."},
    ]
    connection = await start(project, turns, mcpServers=[fake_server(configured)])
    try:
        created = await connection.request(
            "session/create", {"mcpServers": [fake_server(own, "mine")]}
        )
        # No run yet: both servers start in the background once the session is made.
        await eventually(lambda: bool(pids(configured) and pids(own)), "both servers started")
        result = await connection.request(
            "kernel/run", {"sessionId": created["sessionId"], "prompt": "echo"}
        )
    finally:
        await connection.close()
    assert [(c["name"], c["result"]) for c in result["toolCalls"]] == [
        ("fake__echo", "shared"),
        ("mine__echo", "own"),
    ]
    assert len(pids(configured)) == len(pids(own)) == 1  # the run used them, none started again


async def test_a_server_that_fails_to_start_with_its_session_is_reported_by_the_first_run(
    project: Path, tmp_path: Path
):
    turns = [{"toolCalls": [call("c1", "broken__anything")]}, {"text": "Done."}]
    broken = {"name": "broken", "command": str(tmp_path / "no-such-program")}
    connection = await start(project, turns)
    try:
        created = await connection.request("session/create", {"mcpServers": [broken]})
        result = await connection.request(
            "kernel/run", {"sessionId": created["sessionId"], "prompt": "go"}
        )
    finally:
        await connection.close()
    [failed] = result["toolCalls"]
    assert failed["isError"]
    assert "MCP server 'broken' is not running (it failed to start" in failed["result"]


async def test_cancelling_a_run_cancels_its_mcp_call_at_the_server(project: Path, tmp_path: Path):
    marker = tmp_path / "marker.txt"
    server = fake_server(tmp_path)
    server["env"]["TETHER_MCP_MARKER"] = str(marker)
    connection = await start(
        project, [{"toolCalls": [call("c1", "fake__slow")]}], mcpServers=[server]
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = asyncio.ensure_future(
            connection.request("kernel/run", {"sessionId": sid, "prompt": "wait"})
        )
        await eventually(lambda: marker.exists(), "the slow tool started")
        assert await connection.request("kernel/cancel", {"sessionId": sid}) == {"cancelled": True}
        result = await asyncio.wait_for(run, 20)
        await eventually(lambda: marker.read_text() == "cancelled", "the server saw the cancel")
    finally:
        await connection.close()
    assert result["stopReason"] == "cancelled"
    assert [(c["name"], c["result"]) for c in result["toolCalls"]] == [("fake__slow", "cancelled")]
