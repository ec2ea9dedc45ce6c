"""run_command: argv or shell, a cwd inside, and the whole tree killed on timeout or cancel."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolContext, ToolRegistry
from tether.tools.processes import descendants, is_alive
from tether.tools.run_command import RunCommand, child_environment

from .conftest import Call

pytestmark = pytest.mark.skipif(os.name != "posix", reason="commands run on POSIX systems")


async def gone(pids: list[int], within: float = 10.0) -> bool:
    """Whether every pid stops running within ``within`` seconds (a bounded poll)."""
    deadline = time.monotonic() + within
    while any(is_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def appears(path: Path, lines: int, within: float = 10.0) -> list[int]:
    """The pids written to ``path``, once it has ``lines`` of them (a bounded poll)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pids = read_pids(path)
        if len(pids) >= lines:
            return pids
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} did not get {lines} pids")


def pids_in(text: str) -> list[int]:
    return [int(word) for word in text.split() if word.isdigit()]


async def test_an_argv_list_runs_without_a_shell(call: Call) -> None:
    result = await call("run_command", {"command": ["echo", "$HOME;", "ls", "|", "x"]})
    assert not result.is_error
    assert result.content.startswith("exit code 0")
    assert result.content.endswith("$HOME; ls | x\n")


async def test_a_string_runs_with_sh(call: Call) -> None:
    result = await call("run_command", {"command": "printf 'a\\nb\\n' | wc -l && echo ok"})
    assert not result.is_error
    assert result.content.split("\n", 2)[2].split() == ["2", "ok"]


async def test_stderr_is_captured_with_stdout(call: Call) -> None:
    result = await call("run_command", {"command": "echo out; echo err >&2"})
    assert result.content.endswith("out\nerr\n")


async def test_a_non_zero_exit_code_is_an_error_result_with_the_code(call: Call) -> None:
    result = await call("run_command", {"command": "echo failing; exit 3"})
    assert result.is_error
    assert result.content.startswith("exit code 3")
    assert "failing" in result.content


async def test_a_command_killed_by_a_signal_says_so(call: Call) -> None:
    result = await call("run_command", {"command": "kill -TERM $$"})
    assert result.is_error
    assert result.content.startswith("killed by signal SIGTERM")


async def test_no_output_is_said(call: Call) -> None:
    result = await call("run_command", {"command": ["true"]})
    assert not result.is_error
    assert result.content.endswith("(no output)")


async def test_stdin_is_empty(call: Call) -> None:
    result = await call("run_command", {"command": ["cat"], "timeout": 5})
    assert not result.is_error
    assert result.content.endswith("(no output)")


async def test_the_cwd_is_a_directory_of_the_workspace(call: Call, workspace: Path) -> None:
    (workspace / "sub" / "dir").mkdir(parents=True)
    result = await call("run_command", {"command": ["pwd"], "cwd": "sub/dir"})
    assert result.content.splitlines()[-1] == str(workspace / "sub" / "dir")
    default = await call("run_command", {"command": ["pwd"]})
    assert default.content.splitlines()[-1] == str(workspace)


@pytest.mark.parametrize("cwd", ["..", "../outside", "/", "/tmp", "missing", "file.txt", "out"])
async def test_a_cwd_outside_or_not_a_directory_is_refused(
    call: Call, workspace: Path, outside: Path, cwd: str
) -> None:
    write(workspace, "file.txt", "x")
    (workspace / "out").symlink_to(outside)
    result = await call("run_command", {"command": ["touch", "ran"], "cwd": cwd})
    assert result.is_error
    assert not (outside / "ran").exists() and not (workspace / "ran").exists()


async def test_an_unknown_program_is_an_error(call: Call) -> None:
    result = await call("run_command", {"command": ["no-such-program-anywhere"]})
    assert result.is_error
    assert "command not found" in result.content


@pytest.mark.parametrize("command", [[], [""], "   ", ["a\x00b"]])
async def test_an_empty_or_invalid_command_is_an_error(call: Call, command: object) -> None:
    result = await call("run_command", {"command": command})
    assert result.is_error


@pytest.mark.parametrize("seconds", [0, -1, 601])
async def test_a_timeout_out_of_range_fails_validation(call: Call, seconds: float) -> None:
    result = await call("run_command", {"command": ["true"], "timeout": seconds})
    assert result.is_error
    assert "timeout" in result.content


async def test_output_over_the_cap_keeps_the_head_and_the_tail(workspace: Path) -> None:
    context = ToolContext(workspace=workspace, session_id="s", run_id="r")
    call = Call(ToolRegistry([RunCommand(max_output_bytes=1000)]), context)
    script = (
        "echo FIRST-LINE; i=0; while [ $i -lt 2000 ]; do echo filler; i=$((i+1)); done; echo LAST"
    )
    result = await call("run_command", {"command": script})
    assert not result.is_error
    assert "FIRST-LINE" in result.content and result.content.endswith("LAST\n")
    total = len("FIRST-LINE\n") + 2000 * len("filler\n") + len("LAST\n")
    assert f"{total - 1000} B cut" in result.content or "KiB cut" in result.content
    assert "output cut here" in result.content
    assert len(result.content) < 1500


async def test_the_environment_leaves_out_secret_looking_variables(
    call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "OPENAI_API_KEY": "sk-one",
        "ANTHROPIC_API_KEY": "sk-two",
        "GITHUB_TOKEN": "ghp-three",
        "db_password": "hunter2",
        "MY_SECRET": "s3cret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PLAIN_SETTING", "visible")
    result = await call("run_command", {"command": ["env"]})
    assert "PLAIN_SETTING=visible" in result.content
    for name, value in secrets.items():
        assert name not in result.content and value not in result.content
    assert child_environment({"PATH": "/bin", "Api_Key": "x"}) == {"PATH": "/bin"}


async def test_a_timeout_kills_the_whole_process_tree(call: Call) -> None:
    started = time.monotonic()
    result = await call(
        "run_command",
        {"command": "sleep 300 & echo $!; sleep 300 & echo $!; echo $$; wait", "timeout": 1},
    )
    assert time.monotonic() - started < 30
    assert result.is_error
    assert result.content.startswith("timed out after 1 s")
    pids = pids_in(result.content.split("\n", 2)[2])
    assert len(pids) == 3
    assert await gone(pids)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
async def test_a_timeout_also_kills_descendants_that_left_the_process_group(call: Call) -> None:
    result = await call(
        "run_command", {"command": "setsid sleep 300 & echo $!; echo $$; wait", "timeout": 1}
    )
    pids = pids_in(result.content.split("\n", 2)[2])
    assert len(pids) == 2
    assert await gone(pids)


async def test_cancellation_kills_the_tree_and_propagates(call: Call, workspace: Path) -> None:
    pidfile = workspace / "pids"
    task = asyncio.ensure_future(
        call(
            "run_command",
            {"command": "sleep 300 & echo $! >> pids; echo $$ >> pids; wait", "timeout": 600},
        )
    )
    pids = await appears(pidfile, 2)
    assert all(is_alive(pid) for pid in pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert await gone(pids)


async def test_processes_left_holding_the_output_are_killed_once_the_command_exits(
    call: Call,
) -> None:
    started = time.monotonic()
    result = await call("run_command", {"command": "sleep 300 & echo $!", "timeout": 60})
    assert time.monotonic() - started < 30
    assert not result.is_error
    assert "left running" in result.content
    assert await gone(pids_in(result.content.split("\n", 2)[2]))


async def test_a_background_process_that_closed_the_output_is_left_alone(
    call: Call, workspace: Path
) -> None:
    result = await call(
        "run_command", {"command": "sleep 300 >/dev/null 2>&1 & echo $!", "timeout": 60}
    )
    assert not result.is_error and "left running" not in result.content
    (pid,) = pids_in(result.content.split("\n", 2)[2])
    try:
        assert is_alive(pid)
    finally:
        os.kill(pid, 9)
    assert await gone([pid])


def test_descendants_are_found_through_the_parent_links() -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc")
    assert os.getpid() in descendants(os.getppid())
    assert os.getppid() not in descendants(os.getpid())


@pytest.mark.parametrize(
    "name",
    ["LLM_AUTH", "AUTH_HEADER", "basic_auth", "HTTP_AUTHORIZATION", "db_passwd", "AWS_CREDENTIALS"],
)
def test_auth_and_credential_names_are_left_out(name: str) -> None:
    assert child_environment({"PATH": "/bin", name: "x"}) == {"PATH": "/bin"}


@pytest.mark.parametrize(
    "name", ["GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "AUTHORS_FILE", "OAUTHLIB"]
)
def test_names_that_only_contain_the_letters_auth_are_kept(name: str) -> None:
    assert child_environment({name: "x"}) == {name: "x"}


async def test_the_context_hidden_variables_are_left_out(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_SESAME", "open-up")
    monkeypatch.setenv("PLAIN_SETTING", "visible")
    context = ToolContext(
        workspace=workspace, session_id="s", run_id="r", hidden_env=frozenset({"LLM_SESAME"})
    )
    result = await Call(ToolRegistry([RunCommand()]), context)("run_command", {"command": ["env"]})
    assert "PLAIN_SETTING=visible" in result.content
    assert "LLM_SESAME" not in result.content and "open-up" not in result.content


needs_proc_and_setsid = pytest.mark.skipif(
    not Path("/proc/self/stat").exists() or shutil.which("setsid") is None,
    reason="needs /proc and setsid",
)


@pytest.mark.parametrize(
    "command",
    [
        "setsid sleep 300 & echo $!",  # left the session, then orphaned
        "(setsid sleep 300 & echo $!) ; echo done",  # orphaned while the command still ran
    ],
)
@needs_proc_and_setsid
async def test_processes_that_detached_and_hold_the_output_are_killed_once_it_exits(
    call: Call, command: str
) -> None:
    result = await call("run_command", {"command": command, "timeout": 60})
    (pid,) = pids_in(result.content.split("\n", 2)[2])
    try:
        assert "left running with the output open were killed" in result.content
        assert await gone([pid])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


@needs_proc_and_setsid
async def test_a_timeout_kills_a_detached_orphan(call: Call) -> None:
    result = await call(
        "run_command", {"command": "(setsid sleep 300 & echo $!); sleep 300", "timeout": 1}
    )
    (pid,) = pids_in(result.content.split("\n", 2)[2])
    try:
        assert result.content.startswith("timed out after 1 s")
        assert await gone([pid])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


@needs_proc_and_setsid
async def test_a_detached_process_that_cannot_be_found_is_not_claimed_killed(call: Call) -> None:
    # It leaves the session and drops the environment, so nothing ties it to the command.
    result = await call("run_command", {"command": "setsid env -i sleep 300 & echo $!"})
    (pid,) = pids_in(result.content.split("\n", 2)[2])
    try:
        assert "were killed" not in result.content
        assert "could not be found" in result.content
        assert is_alive(pid)
    finally:
        os.kill(pid, 9)
    assert await gone([pid])


async def test_processes_of_other_commands_are_left_alone(call: Call) -> None:
    other = await call("run_command", {"command": "sleep 300 >/dev/null 2>&1 & echo $!"})
    (pid,) = pids_in(other.content.split("\n", 2)[2])
    try:
        result = await call("run_command", {"command": "sleep 300 & echo $!"})
        assert "were killed" in result.content
        assert await gone(pids_in(result.content.split("\n", 2)[2]))
        assert is_alive(pid)
    finally:
        os.kill(pid, 9)
