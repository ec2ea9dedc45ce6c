"""A repository's workspace file through the real server: a broken one does not stop tether, and
every run reports it until it is fixed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tether.client import TetherClient
from tether.client.tether_client import PermissionOutcome
from tether.protocol import ErrorCode
from tether.protocol.kernel import PermissionParams
from tether.testing import tool_call
from tether.tools.protected import REASONS

from .conftest import script_options, start_scripted


def events(connection: Any) -> list[tuple[str, dict[str, Any]]]:
    drained = []
    while not connection.notifications.empty():
        drained.append(connection.notifications.get_nowait())
    return drained


async def test_a_broken_workspace_file_no_longer_stops_the_server_and_each_run_reports_it(
    project: Path,
):
    config = project / ".tether" / "config.toml"
    config.parent.mkdir()
    config.write_text('[tools]\napproval = "auto"\n')  # what a model could have written there
    turns = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    connection = await start_scripted(project, turns, tools={"approval": "auto"})
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        first = await connection.request("kernel/run", {"sessionId": sid, "prompt": "a"})
        second = await connection.request("kernel/run", {"sessionId": sid, "prompt": "b"})
        before_fix = events(connection)
        config.unlink()
        fixed = await connection.request("kernel/run", {"sessionId": sid, "prompt": "c"})
        after_fix = events(connection)
    finally:
        await connection.close()

    for result in (first, second):
        assert result["stopReason"] == "end_turn"
        [warning] = result["warnings"]
        assert warning["code"] == ErrorCode.CONFIG_ERROR
        assert warning["data"] == {"key": "tools.approval", "source": str(config)}
    assert "warnings" not in fixed

    progress = [
        params["event"]["kind"] for method, params in before_fix if method == "kernel/progress"
    ]
    assert progress.count("warning") == 2
    assert progress[:2] == ["run_started", "warning"]
    shown = [params for method, params in before_fix if method == "window/showMessage"]
    assert len(shown) == 1 and "tools.approval" in shown[0]["message"]
    assert all(
        params["event"]["kind"] != "warning"
        for method, params in after_fix
        if method == "kernel/progress"
    )


def test_tether_run_in_a_workspace_whose_file_turns_approval_off_runs_and_warns(project: Path):
    config = project / ".tether" / "config.toml"
    config.parent.mkdir()
    config.write_text('[tools]\napproval = "auto"\n')
    script = project.parent / "script.json"
    script.write_text(json.dumps([{"text": "Still here."}]))
    argv = ["run", "hi", "--workspace", str(project), "--script", str(script), "--approval", "auto"]
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Still here." in done.stdout
    assert "tether: warning:" in done.stderr and "tools.approval" in done.stderr


def protected_turns() -> list[dict[str, Any]]:
    content = '[tools]\napproval = "auto"\n'
    call = tool_call("write_file", "w1", path=".tether/config.toml", content=content)
    return [{"toolCalls": [call]}, {"text": "done"}]


async def test_a_write_to_the_workspace_config_is_asked_about_even_under_auto(
    project: Path, tmp_path: Path
):
    asked: list[PermissionParams] = []

    def reject(params: PermissionParams) -> PermissionOutcome:
        asked.append(params)
        return "reject"

    options = script_options(project, protected_turns(), tools={"approval": "auto"})
    async with TetherClient.spawn(
        workspace=project, options=options, on_permission=reject
    ) as client:
        result = await client.run((await client.create_session()).session_id, "loosen it")

    [question] = asked
    assert question.reason == REASONS[".tether"]
    assert result.tool_calls[0].is_error
    assert not (project / ".tether" / "config.toml").exists()


async def test_a_write_to_the_workspace_config_is_refused_when_nobody_can_be_asked(
    project: Path,
):
    options = script_options(project, protected_turns(), tools={"approval": "auto"})
    async with TetherClient.spawn(workspace=project, options=options) as client:
        result = await client.run((await client.create_session()).session_id, "loosen it")

    [record] = result.tool_calls
    assert record.is_error and REASONS[".tether"] in record.result
    assert not (project / ".tether" / "config.toml").exists()
