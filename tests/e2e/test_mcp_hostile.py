"""A hostile MCP server against the real server: the run goes on, tether's memory stays bounded."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from ..tools.test_mcp_hostile import HOSTILE
from .conftest import start_scripted
from .test_kernel import call, drain

MiB = 1024 * 1024


def reset_peak(pid: int) -> bool:
    """Reset the peak resident size (VmHWM) of ``pid``, where Linux allows it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


async def test_a_flooding_then_wedged_server_neither_stalls_the_run_nor_grows_tether(
    tmp_path: Path,
):
    project = tmp_path / "project"
    project.mkdir()
    turns: list[dict[str, Any]] = [
        {"toolCalls": [call("c1", "h__echo", text="warm")]},
        {"toolCalls": [call("c2", "f__flood", count=100_000)]},
        {"toolCalls": [call("c3", "h__wedge"), call("c4", "h__huge", bytes=1 << 20)]},
        {"toolCalls": [call("c5", "h__echo", text="after")]},
        {"text": "Done."},
    ]
    flooding = {"name": "f", "command": sys.executable, "args": [str(HOSTILE)], "timeout": 60}
    wedging = {"name": "h", "command": sys.executable, "args": [str(HOSTILE)], "timeout": 2}
    connection = await start_scripted(
        project, turns, tools={"approval": "auto", "mcpServers": [flooding, wedging]}
    )
    pid = connection.process.pid
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        first = await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "warm up", "maxIterations": 1}
        )
        if not reset_peak(pid):
            pytest.skip("the peak resident size cannot be reset here")
        before = status(pid, "VmRSS")
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
        grown = status(pid, "VmHWM") - before
    finally:
        await connection.close()

    assert first["toolCalls"][0]["result"] == "warm"
    assert result["stopReason"] == "end_turn"
    records = {record["id"]: record for record in result["toolCalls"]}
    assert records["c2"]["result"] == "flood 100000"
    assert records["c3"]["isError"]
    assert "so it was stopped" in records["c3"]["result"]
    assert records["c5"]["isError"]
    assert "is not running" in records["c5"]["result"]
    assert grown < 48 * MiB, f"tether's peak resident size grew by {grown / MiB:.0f} MiB"


async def test_a_server_that_never_initializes_is_reported_and_the_run_goes_on_without_it(
    tmp_path: Path,
):
    project = tmp_path / "project"
    project.mkdir()
    turns: list[dict[str, Any]] = [
        {"toolCalls": [call("c1", "h__echo", text="here"), call("c2", "mute__echo", text="?")]},
        {"text": "Done."},
        {"text": "Again."},
    ]
    working = {"name": "h", "command": sys.executable, "args": [str(HOSTILE)]}
    mute = {"name": "mute", "command": sys.executable, "args": [str(HOSTILE), "--never-initialize"]}
    connection = await start_scripted(
        project,
        turns,
        tools={"approval": "auto", "mcpServers": [working, mute]},
        mcp={"startTimeout": 1},
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        async with asyncio.timeout(60):  # a bound on the test, not a measure
            result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
            events = [event["event"] for event in drain(connection)]
            again = await connection.request("kernel/run", {"sessionId": sid, "prompt": "more"})
        messages = await connection.request("session/messages", {"sessionId": sid})
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn"
    kinds = [event["kind"] for event in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    [notice] = [event for event in events if event["kind"] == "notice"]
    assert notice["level"] == "warning"
    assert notice["data"]["source"] == "MCP server 'mute'"
    assert "did not initialize within 1 s (mcp.start_timeout)" in notice["data"]["reason"]
    records = {record["id"]: record for record in result["toolCalls"]}
    assert records["c1"] == {**records["c1"], "result": "here", "isError": False}
    assert records["c2"]["isError"]
    assert "MCP server 'mute' is not running" in records["c2"]["result"]
    assert again["stopReason"] == "end_turn"  # the next run tries it again, and goes on as well
    assert messages["total"] == 7  # prompt, call, two results, answer; prompt, answer
