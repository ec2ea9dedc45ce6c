"""The workspace tools through the real server: a command cancelled with its run leaves nothing."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.processes import TAG_VARIABLE, appear, gone, new_tag, tagged
from tests.requires import need_landlock
from tether.client import Connection

from .conftest import start_scripted

pytestmark = pytest.mark.skipif(os.name != "posix", reason="commands run on POSIX systems")


async def tool_update(connection: Connection, status: str) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while True:
            method, params = await connection.notifications.get()
            event = params.get("event", {}) if method == "kernel/progress" else {}
            if event.get("kind") == "tool_call_update" and event.get("status") == status:
                return event


async def test_cancelling_a_run_mid_command_kills_the_command_and_records_cancelled(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    tag = new_tag()
    command = f"export {TAG_VARIABLE}={tag}; sleep 300 & sleep 300 & wait"
    turns = [
        {
            "toolCalls": [
                {
                    "id": "c1",
                    "name": "run_command",
                    "arguments": {"command": command, "timeout": 600},
                }
            ]
        }
    ]
    connection = await start_scripted(project, turns, tools={"approval": "auto"})
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = asyncio.ensure_future(
            connection.request("kernel/run", {"sessionId": sid, "prompt": "sleep a while"})
        )
        await tool_update(connection, "in_progress")
        pids = await appear(lambda: tagged(tag), 2)
        assert await connection.request("kernel/cancel", {"sessionId": sid}) == {"cancelled": True}
        result = await asyncio.wait_for(run, 20)
        cancelled = await tool_update(connection, "cancelled")
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    assert result["stopReason"] == "cancelled"
    assert [(c["id"], c["result"], c["isError"]) for c in result["toolCalls"]] == [
        ("c1", "cancelled", True)
    ]
    assert cancelled["toolCallId"] == "c1"
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[2]["content"] == "cancelled"
    assert await gone(pids)


async def test_a_command_cannot_read_the_api_key_from_the_servers_environment(
    tmp_path: Path,
) -> None:
    need_landlock()
    key = "sk-e2e-" + os.urandom(12).hex()
    project = tmp_path / "project"
    project.mkdir()
    command = "cat /proc/$PPID/environ | tr '\\0' '\\n'; grep -a -r OPENAI /proc/$PPID/ 2>&1"
    turns: list[dict[str, Any]] = [
        {"toolCalls": [{"id": "c1", "name": "run_command", "arguments": {"command": command}}]},
        {"text": "done"},
    ]
    connection = await start_scripted(
        project, turns, env={"OPENAI_API_KEY": key}, tools={"approval": "auto"}
    )
    events: list[dict[str, Any]] = []
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "look"})
        history = await connection.request("session/messages", {"sessionId": sid})
        while not connection.notifications.empty():
            events.append(connection.notifications.get_nowait()[1])
    finally:
        await connection.close()
    (call,) = result["toolCalls"]
    assert call["isError"]
    assert "sandbox: workspace-write, no network" in call["result"].splitlines()[0]
    assert "Permission denied" in call["result"]
    assert any(e["event"].get("progress", "").startswith("sandbox:") for e in events)
    assert key not in json.dumps([result, history, events])
