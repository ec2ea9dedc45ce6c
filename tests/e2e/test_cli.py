"""The ``tether`` command line misused as people misuse it: each time one line on stderr and no
traceback. Every case runs the real ``tether`` process."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.fakes.model_server import ModelServer, Status
from tether.cli import _parser

from .test_kernel import call

TETHER = [sys.executable, "-m", "tether"]
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TETHER_PROVIDER", "TETHER_MODEL")


def tether(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str = "",
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES}
    return subprocess.run(
        [*TETHER, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**environ, **(env or {})},
        timeout=30,
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def script(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"text": "Done."}]))
    yield path


def test_a_port_that_is_not_a_number_is_one_line() -> None:
    done = tether("serve", "--tcp", "7777x")
    assert done.returncode == 2
    assert one_line_error(done) == (
        "tether serve: error: argument --tcp: expected HOST:PORT with a port from 1 to 65535, "
        "got '7777x' (see tether serve --help)"
    )


def test_a_busy_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tether("serve", "--tcp", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert one_line_error(done) == (
        f"tether serve: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_an_unknown_log_level_in_the_environment_is_one_line() -> None:
    done = tether("schema", env={"TETHER_LOG_LEVEL": "verbose"})
    assert done.returncode == 2
    assert one_line_error(done).startswith(
        "tether: error: TETHER_LOG_LEVEL='verbose' is not a log level: use one of debug"
    )


def test_zero_iterations_is_refused(script: Path) -> None:
    done = tether("run", "hi", "--script", str(script), "--max-iterations", "0")
    assert done.returncode == 2
    assert "--max-iterations: expected a whole number from 1 to 1000, got '0'" in (
        one_line_error(done)
    )


def test_a_closed_stdout_ends_the_run_quietly(project: Path, script: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)  # `tether run --json | head -0`: nobody reads
    try:
        process = subprocess.Popen(
            [*TETHER, "run", "hi", "--json", "--script", str(script)],
            cwd=project,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(writer)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 141
    assert stderr == ""


def test_log_level_after_the_command_reaches_the_server_run_starts(
    project: Path, script: Path
) -> None:
    done = tether("run", "hi", "--script", str(script), "--log-level", "debug", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "DEBUG tether.cli: tether " in done.stderr  # the server's own line
    assert "serving on stdio" in done.stderr


def test_every_option_has_help() -> None:
    missing: list[str] = []
    for parser in _all_parsers(_parser()):
        for action in parser._actions:
            if action.help is None or (not action.help.strip()):
                missing.append(f"{parser.prog} {action.dest}")
    assert missing == []


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_parsers(sub)


def test_a_prompt_is_read_from_stdin_with_a_dash(project: Path, script: Path) -> None:
    done = tether("run", "-", "--script", str(script), cwd=project, stdin="/plan\n")
    assert done.returncode == 0, done.stderr
    assert "There is no plan yet" in done.stdout  # the built-in command read from stdin


def test_an_empty_prompt_on_stdin_is_refused(project: Path, script: Path) -> None:
    done = tether("run", "-", "--script", str(script), cwd=project, stdin="\n")
    assert done.returncode == 2
    assert one_line_error(done) == "tether run: error: the prompt read from stdin is empty"


def test_a_run_keeps_its_session_in_the_user_store_to_go_on_with(
    project: Path, script: Path
) -> None:
    first = tether("run", "hi", "--json", "--script", str(script), cwd=project)
    assert first.returncode == 0, first.stderr
    session_id = json.loads(first.stdout.splitlines()[0])["sessionId"]
    again = tether("run", "/plan", "--session", session_id, "--script", str(script), cwd=project)
    assert again.returncode == 0, again.stderr
    assert "There is no plan yet" in again.stdout


def test_an_unknown_session_is_said_when_it_starts(project: Path, script: Path) -> None:
    done = tether("run", "hi", "--session", "mine", "--script", str(script), cwd=project)
    assert done.returncode == 0
    assert one_line_error(done) == (
        "tether: there was no session mine in the session store: it starts now, under that id"
    )
    again = tether("run", "/plan", "--session", "mine", "--script", str(script), cwd=project)
    assert again.returncode == 0
    assert again.stderr == ""


def test_a_write_without_a_terminal_says_it_needs_one(project: Path, tmp_path: Path) -> None:
    script = tmp_path / "write.json"
    write = call("c1", "write_file", path="new.txt", content="x")
    script.write_text(json.dumps([{"toolCalls": [write]}, {"text": "Could not."}]))
    done = tether("run", "write it", "--script", str(script), cwd=project)
    assert done.returncode == 0, done.stderr
    assert "✗ Write new.txt: refused: approval needs a terminal (use --approval auto)" in (
        done.stdout.splitlines()
    )
    assert not (project / "new.txt").exists()


def test_the_endpoint_message_is_shown_with_the_status(project: Path) -> None:
    body = json.dumps({"error": {"message": "Incorrect API key provided", "type": "x"}})
    with ModelServer.in_thread() as endpoint:
        endpoint.push(Status(401, body=body))
        env = {
            "TETHER_PROVIDER": "openai",
            "TETHER_MODEL": "m",
            "TETHER_BASE_URL": endpoint.openai_url,
            "OPENAI_API_KEY": "sk-wrong",
        }
        done = tether("run", "hi", cwd=project, env=env)
    assert done.returncode == 1
    assert (
        one_line_error(done) == "tether: error -32012: openai: HTTP 401: Incorrect API key provided"
    )


def test_a_missing_api_key_is_said_before_any_request(project: Path) -> None:
    env = {"TETHER_PROVIDER": "openai", "TETHER_MODEL": "m"}
    done = tether("run", "hi", cwd=project, env=env)
    assert done.returncode == 1
    assert "no API key: set OPENAI_API_KEY" in one_line_error(done)


def test_bare_tether_on_a_pipe_serves(project: Path) -> None:
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    frame = f"Content-Length: {len(initialize)}\r\n\r\n{initialize}"
    done = tether(cwd=project, stdin=frame)
    assert '"serverInfo"' in done.stdout
    assert "Traceback" not in done.stderr


def test_the_demo_runs_the_script_tether_ships(project: Path) -> None:
    done = tether("run", "What is this?", "--demo", cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Let me look at what this folder holds.")
    assert "That was tether's demo" in done.stdout


def test_chat_without_a_terminal_is_one_line(project: Path) -> None:
    done = tether("chat", cwd=project)
    assert done.returncode == 2
    assert one_line_error(done) == (
        "tether chat: error: needs a terminal (tether run answers one prompt anywhere)"
    )


def test_serving_from_a_file_instead_of_a_pipe_is_one_line(project: Path) -> None:
    with open(os.devnull) as nothing:
        done = subprocess.run(
            [*TETHER, "serve"], stdin=nothing, capture_output=True, text=True, timeout=30
        )
    assert done.returncode == 2
    assert one_line_error(done).startswith("tether serve: error: stdin is a file, not a stream")


def test_a_write_without_a_terminal_in_json_says_why_on_stderr(project: Path, tmp_path: Path):
    script = tmp_path / "write.json"
    write = call("c1", "write_file", path="new.txt", content="x")
    script.write_text(json.dumps([{"toolCalls": [write]}, {"text": "Could not."}]))
    done = tether("run", "write it", "--json", "--script", str(script), cwd=project)
    assert done.returncode == 0, done.stderr
    assert one_line_error(done) == (
        "tether: Write new.txt: refused: approval needs a terminal (use --approval auto)"
    )
    assert all(json.loads(line) for line in done.stdout.splitlines())  # stdout: JSON only


REFUSING = Path(__file__).with_name("imports_refused.py")


@pytest.mark.parametrize(
    ("chosen", "loop"),
    [
        ("", "uvloop"),  # unset (the suite's own asyncio left aside): uvloop, installed here
        ("asyncio", "asyncio"),
    ],
)
def test_the_server_runs_on_uvloop_when_it_is_installed_unless_asyncio_is_chosen(
    project: Path, script: Path, chosen: str, loop: str
) -> None:
    """uvloop is installed here (the dev group has the ``fast`` extra's package)."""
    done = tether(
        "run",
        "hi",
        "--script",
        str(script),
        "--log-level",
        "debug",
        cwd=project,
        env={"TETHER_EVENT_LOOP": chosen},
    )
    assert done.returncode == 0, done.stderr
    assert f"serving on stdio (event loop: {loop})" in done.stderr
    assert "Done." in done.stdout


def test_an_unknown_event_loop_is_one_line() -> None:
    for command in ("serve", "acp"):
        done = tether(command, env={"TETHER_EVENT_LOOP": "tokio"})
        assert done.returncode == 2
        assert one_line_error(done) == (
            f"tether {command}: error: TETHER_EVENT_LOOP is 'tokio'; expected asyncio or uvloop"
        )


def test_without_uvloop_the_server_serves_on_asyncio_unless_uvloop_is_asked_for() -> None:
    server = [sys.executable, "-P", str(REFUSING), "uvloop"]
    environ = {**os.environ, "TETHER_LOG_LEVEL": "debug", "TETHER_EVENT_LOOP": ""}
    done = subprocess.run(server, input="", capture_output=True, text=True, env=environ, timeout=30)
    assert "(event loop: asyncio)" in done.stderr  # then stdin ends, before any initialize
    assert "Traceback" not in done.stderr
    asked = subprocess.run(
        server,
        input="",
        capture_output=True,
        text=True,
        env={**environ, "TETHER_EVENT_LOOP": "uvloop"},
        timeout=30,
    )
    assert asked.returncode == 2
    assert one_line_error(asked) == (
        "tether serve: error: TETHER_EVENT_LOOP=uvloop, but uvloop is not installed "
        "(pip install 'tether[fast]')"
    )
