"""run_command: argv or shell, a cwd inside, output, environment (process trees:
``test_process_trees.py``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.files import write
from tests.processes import appear, gone, kill_all, unique_seconds, with_argument
from tether.tools import ToolContext, ToolRegistry
from tether.tools.processes import MARK_VARIABLE, descendants, kill_tree, new_mark
from tether.tools.run_command import RunCommand, child_environment

from .conftest import Call

pytestmark = pytest.mark.skipif(os.name != "posix", reason="commands run on POSIX systems")


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


async def test_the_last_resort_kills_the_group_and_the_marked_processes_that_left_it() -> None:
    # What run_command does where there is no wrapper, or when it did not end in time.
    mark, seconds = new_mark(), unique_seconds()
    leader = await asyncio.create_subprocess_exec(
        "sh", "-c", f"setsid sleep {seconds} & sleep {seconds} & wait",
        env={**os.environ, MARK_VARIABLE: mark}, start_new_session=True,
    )  # fmt: skip
    try:
        found = await appear(lambda: with_argument(seconds), 2)
        kill_tree(leader.pid, mark)
        assert await asyncio.wait_for(leader.wait(), 10) == -9
        assert await gone(found)
    finally:
        kill_all(with_argument(seconds))


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
