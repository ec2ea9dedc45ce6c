"""Nothing a command starts outlives it: on timeout, on cancel, and when it exits, whatever the
processes did to detach (``setsid``, ``nohup``, a double fork, closed output, a cleared
environment). Each test runs under every mechanism (:data:`conftest.MECHANISMS`): namespaces,
Landlock alone, and the sandbox off; tether's own death is in ``tests/e2e/test_sandbox.py``. The
same holds for an MCP server started unconfined (``tools.mcp_sandbox = "off"``)."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from tests.processes import (
    appear,
    detaching,
    gone,
    kill_all,
    new_tag,
    tagged,
    unique_seconds,
    with_argument,
)
from tether.protocol.tools import McpServerSpec
from tether.tools.confinement import SandboxPolicy
from tether.tools.mcp import McpManager

from .conftest import confined

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux")


async def test_processes_left_running_are_killed_when_the_command_exits_and_counted(
    workspace: Path, mechanism: str
) -> None:
    tag, hidden = new_tag(), unique_seconds()
    script = detaching(tag, unique_seconds(), hidden) + "echo started"
    result = await confined(workspace, mechanism)("run_command", {"command": script})
    try:
        assert not result.is_error, result.content
        assert result.content.startswith("exit code 0 (6 processes it left running were killed)")
        assert result.content.endswith("started\n")
        assert tagged(tag) == set() and with_argument(hidden) == set()
    finally:
        kill_all(tagged(tag) | with_argument(hidden))


async def test_a_command_that_leaves_nothing_running_says_nothing_of_it(
    workspace: Path, mechanism: str
) -> None:
    result = await confined(workspace, mechanism)("run_command", {"command": "sleep 0 & wait"})
    assert not result.is_error, result.content
    assert re.match(r"exit code 0 \(\d+\.\d s; sandbox: ", result.content), result.content


async def test_a_timeout_kills_the_whole_tree(workspace: Path, mechanism: str) -> None:
    tag, hidden = new_tag(), unique_seconds()
    script = detaching(tag, unique_seconds(), hidden) + "echo started; sleep 300"
    call = confined(workspace, mechanism)
    result = await call("run_command", {"command": script, "timeout": 2})
    try:
        assert result.is_error
        assert result.content.startswith(
            "timed out after 2 s: the command and its processes were killed ("
        )
        assert "started" in result.content
        assert await gone(tagged(tag) | with_argument(hidden))
    finally:
        kill_all(tagged(tag) | with_argument(hidden))


async def test_cancelling_kills_the_whole_tree_and_propagates(
    workspace: Path, mechanism: str
) -> None:
    tag, hidden = new_tag(), unique_seconds()
    script = detaching(tag, unique_seconds(), hidden) + "sleep 300"
    call = confined(workspace, mechanism)
    task = asyncio.ensure_future(call("run_command", {"command": script, "timeout": 600}))
    try:
        started = await appear(lambda: tagged(tag) | with_argument(hidden), 7)  # and the shell
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)
        assert await gone(started)
    finally:
        kill_all(tagged(tag) | with_argument(hidden))


async def test_processes_outside_the_command_are_left_alone(
    workspace: Path, mechanism: str
) -> None:
    seconds = unique_seconds()
    bystander = await asyncio.create_subprocess_exec("sleep", seconds)
    try:
        result = await confined(workspace, mechanism)(
            "run_command", {"command": "sleep 300 >/dev/null 2>&1 &"}
        )
        assert "1 process it left running was killed" in result.content
        assert bystander.returncode is None
        assert with_argument(seconds) == {bystander.pid}
    finally:
        bystander.kill()
        await bystander.wait()


@pytest.mark.parametrize(
    ("script", "first_line"),
    [
        ("echo out; exit 3", "exit code 3 ("),
        ("kill -TERM $$", "killed by signal SIGTERM ("),
        ("kill -KILL $$", "killed by signal SIGKILL ("),
    ],
)
async def test_the_commands_own_exit_status_is_reported(
    workspace: Path, mechanism: str, script: str, first_line: str
) -> None:
    result = await confined(workspace, mechanism)("run_command", {"command": script})
    assert result.is_error
    assert result.content.startswith(first_line), result.content


async def test_a_missing_program_is_reported_as_not_found(workspace: Path, mechanism: str) -> None:
    result = await confined(workspace, mechanism)(
        "run_command", {"command": ["no-such-program-anywhere"]}
    )
    assert result.is_error
    assert "command not found: no-such-program-anywhere" in result.content


FAKE_SERVER = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"


async def test_what_an_unconfined_mcp_server_leaves_running_ends_with_it(workspace: Path) -> None:
    seconds = unique_seconds()
    spec = McpServerSpec(
        name="fake",
        command=sys.executable,
        args=[str(FAKE_SERVER)],
        env={"TETHER_MCP_DETACH": seconds},  # a setsid child that ignores SIGTERM
    )
    manager = McpManager()
    detached: set[int] = set()
    try:
        tools = await manager.executor(
            [], servers=[spec], enabled=None, session_id="s", workspace=workspace,
            sandbox=SandboxPolicy(mode="off"),
        )  # fmt: skip
        assert "fake__echo" in [tool.name for tool in tools.list()]
        detached = await appear(lambda: with_argument(seconds), 1)
    finally:
        await manager.aclose()
    try:
        assert await gone(detached)
    finally:
        kill_all(detached | with_argument(seconds))
