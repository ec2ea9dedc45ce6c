"""A repository's workspace file through the real server: a broken one does not stop tether, and
every run reports it until it is fixed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError, TetherClient
from tether.client.tether_client import PermissionOutcome
from tether.memory.loader import MAX_MEMORY_ENTRIES
from tether.protocol import ErrorCode
from tether.protocol.kernel import PermissionParams
from tether.testing import tool_call
from tether.tools.protected import REASONS
from tether.tools.walk import WALK_BUDGET_SECONDS

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


# --- files a repository may point anywhere ------------------------------------------------------

DEEP = 50_000


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda path: path.symlink_to("/dev/zero"), "outside"),
        (lambda path: path.symlink_to("/dev/stdin"), "outside"),
        (lambda path: path.symlink_to("/proc/self/fd/0"), "outside"),
        (lambda path: os.mkfifo(path), "not_regular"),
        (lambda path: path.write_text("a = " + "[" * DEEP + "]" * DEEP + "\n"), "too_deep"),
        (lambda path: path.write_bytes(b"# " + b"x" * (1 << 24)), "too_large"),
    ],
    ids=["/dev/zero", "/dev/stdin", "/proc/self/fd/0", "fifo", "50,000 deep", "16 MiB"],
)
async def test_a_hostile_workspace_file_is_left_out_initialize_answers_and_each_run_warns(
    project: Path, make: Any, reason: str
) -> None:
    config = project / ".tether" / "config.toml"
    config.parent.mkdir()
    make(config)
    connection = await start_scripted(project, [{"text": "one"}, {"text": "two"}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        results = [
            await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
            for prompt in ("a", "b")
        ]
        shown = [params for method, params in events(connection) if method == "window/showMessage"]
    finally:
        await connection.close()
    for result in results:
        assert result["stopReason"] == "end_turn"
        [warning] = result["warnings"]
        assert warning["code"] == ErrorCode.CONFIG_ERROR
        assert warning["data"] == {"key": None, "source": str(config), "reason": reason}
    assert len(shown) == 1


async def test_a_refused_memory_file_is_a_warning_and_the_run_goes_on(
    project: Path, tmp_path: Path
) -> None:
    memory = project / ".tether" / "memory"
    memory.mkdir(parents=True)
    (memory / "style.md").write_text("Use tabs.\n")
    (memory / "key.md").symlink_to("/dev/zero")
    secret = tmp_path / "secret.txt"
    secret.write_text("a secret\n")
    os.link(secret, memory / "notes.md")  # its other name is outside the workspace
    connection = await start_scripted(project, [{"text": "done"}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
    finally:
        await connection.close()
    assert result["stopReason"] == "end_turn" and result["response"] == "done"
    reasons = {w["data"]["path"]: w["data"]["reason"] for w in result["warnings"]}
    assert reasons == {
        ".tether/memory/key.md": "outside",
        ".tether/memory/notes.md": "hard_links",
    }
    assert all(w["code"] == ErrorCode.CONFIG_ERROR for w in result["warnings"])


async def test_a_session_follows_the_file_of_its_own_directory_never_one_above_it(
    project: Path,
) -> None:
    """The folder's file narrows the tools to list_files; a session made in a subdirectory
    follows that subdirectory's file, or none, never the folder's."""
    (project / ".tether").mkdir()
    (project / ".tether" / "config.toml").write_text('[tools]\nenabled = ["list_files"]\n')
    web, docs = project / "web", project / "docs"
    (web / ".tether").mkdir(parents=True)
    (web / ".tether" / "config.toml").write_text('[tools]\nenabled = ["read_file"]\n')
    docs.mkdir()
    for directory in (project, web, docs):
        (directory / "a.txt").write_text(f"in {directory.name}\n")
    read = {"toolCalls": [tool_call("read_file", "r1", path="a.txt")]}
    connection = await start_scripted(project, [read, {"text": "1"}] * 3)
    try:
        results = {}
        for directory in (project, web, docs):
            created = await connection.request("session/create", {"workspace": str(directory)})
            run = await connection.request(
                "kernel/run", {"sessionId": created["sessionId"], "prompt": "read"}
            )
            [call] = run["toolCalls"]
            results[directory.name] = (bool(call.get("isError")), call["result"])
    finally:
        await connection.close()
    assert {name: error for name, (error, _) in results.items()} == {
        "project": True,
        "web": False,
        "docs": False,
    }
    assert "not available" in results["project"][1]
    assert "in web" in results["web"][1] and "in docs" in results["docs"][1]


@pytest.mark.parametrize(
    "target", ["/dev/stdin", "/proc/self/fd/0", "/proc/self/fd/1", "/dev/zero", "/dev/null"]
)
async def test_a_user_file_linking_to_the_servers_own_pipes_or_a_device_is_an_error(
    project: Path, tmp_path: Path, target: str
) -> None:
    """Its stdin and stdout are pipes no path names: refused as what they are, as a device is,
    never taken for a missing file (nor read, which would eat the protocol's bytes)."""
    user_file = tmp_path / "config" / "tether" / "config.toml"
    user_file.parent.mkdir(parents=True)
    user_file.symlink_to(target)
    connection = await Connection.spawn(env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    try:
        async with asyncio.timeout(20):
            with pytest.raises(RpcError) as refused:
                await connection.request(
                    "initialize", {"workspaceFolders": [{"uri": project.as_uri()}]}
                )
    finally:
        await connection.close()
    assert refused.value.code == ErrorCode.CONFIG_ERROR
    assert refused.value.data["reason"] == "not_regular"
    assert refused.value.data["source"] == str(user_file)


async def test_a_memory_directory_too_large_to_walk_is_a_warning_and_the_run_goes_on(
    project: Path,
) -> None:
    memory = project / ".tether" / "memory"
    (memory / "many").mkdir(parents=True)
    (memory / "a.md").write_text("Use tabs.\n")
    for n in range(MAX_MEMORY_ENTRIES):
        os.close(os.open(memory / "many" / f"{n}.txt", os.O_CREAT | os.O_WRONLY))
    connection = await start_scripted(project, [{"text": "done"}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
    finally:
        await connection.close()
    assert result["stopReason"] == "end_turn" and result["response"] == "done"
    [warning] = result["warnings"]
    assert warning["code"] == ErrorCode.CONFIG_ERROR
    assert warning["data"] == {
        "key": "memory.paths",
        "path": ".tether/memory",
        "reason": "truncated",
    }


async def test_a_walk_over_hostile_ignore_files_ends_within_its_budget_and_says_so(
    project: Path,
) -> None:
    """20,000 rules nothing can be filed under, over 4,000 files: minutes of matching, cut at
    the walk's budget; and an ignore file that is a FIFO, named and left out."""
    (project / ".gitignore").write_text("".join(f"*d{n}*\n" for n in range(20_000)))
    for n in range(4000):
        (project / "src" / f"m{n // 100}").mkdir(parents=True, exist_ok=True)
        (project / "src" / f"m{n // 100}" / f"f{n}.py").write_text("")
    os.mkfifo(project / ".ignore")
    turns = [{"toolCalls": [tool_call("list_files", "c1", path=".")]}, {"text": "listed"}]
    connection = await start_scripted(project, turns)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "list"})
    finally:
        await connection.close()
    [call] = result["toolCalls"]
    assert not call.get("isError")
    notes = [line for line in call["result"].splitlines() if line.startswith("[")]
    assert notes[0].startswith(f"[stopped after {WALK_BUDGET_SECONDS:g} s of walking")
    assert notes[1] == (
        "[ignore files left out (their rules do not apply): "
        ".ignore: it is a FIFO, not a regular file; refused]"
    )
