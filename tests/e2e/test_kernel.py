"""kernel/run through the real server, with the scripted provider reading a script file."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError
from tether.escapes import printable as _printable
from tether.protocol import ErrorCode

from .conftest import SERVER, start_scripted


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


async def start(project: Path, turns: list[dict[str, Any]], **provider: Any) -> Connection:
    return await start_scripted(project, turns, provider=provider)


def drain(connection: Connection) -> list[dict[str, Any]]:
    events = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "kernel/progress":
            events.append(params)
    return events


async def next_event(connection: Connection, kind: str) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while True:
            method, params = await connection.notifications.get()
            if method == "kernel/progress" and params["event"]["kind"] == kind:
                return params


async def test_a_run_with_tool_calls_records_the_exchange_and_streams_ordered_progress(
    project: Path,
):
    connection = await start(
        project,
        [
            {
                "text": "Let me look.",
                "toolCalls": [call("c1", "list_files"), call("c2", "read_file", path="README.md")],
            },
            {"text": "It is a demo project."},
        ],
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "What is this?"}
        )
        events = drain(connection)
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn"
    assert result["response"] == "It is a demo project."
    assert result["iterations"] == 2
    assert [(c["name"], c["isError"]) for c in result["toolCalls"]] == [
        ("list_files", False),
        ("read_file", False),
    ]
    assert "A small project." in result["toolCalls"][1]["result"]

    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in history[1]["toolCalls"]] == ["c1", "c2"]
    assert [m["toolCallId"] for m in history[2:4]] == ["c1", "c2"]
    assert all(m["runId"] == result["runId"] for m in history)

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["event"]["kind"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("iteration_started") == 2 and kinds.count("tool_call") == 2
    deltas = [e["event"] for e in events if e["event"]["kind"] == "message_delta"]
    assert "".join(d["text"] for d in deltas) == "Let me look.It is a demo project."
    assert {d["messageId"] for d in deltas} == {history[1]["id"], history[4]["id"]}
    assert events[0]["event"]["userMessageId"] == history[0]["id"]


async def test_max_iterations_ends_the_run_with_a_partial_result_kept_in_the_session(
    project: Path,
):
    turns = [{"toolCalls": [call(f"c{n}", "list_files")]} for n in range(3)]
    connection = await start(project, turns)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "loop", "maxIterations": 3}
        )
        total = (await connection.request("session/messages", {"sessionId": sid}))["total"]
    finally:
        await connection.close()
    assert result["stopReason"] == "max_iterations" and result["iterations"] == 3
    assert total == 1 + 3 * 2


async def test_a_failing_tool_call_goes_back_to_the_model_as_an_error_result(project: Path):
    connection = await start(
        project,
        [
            {
                "toolCalls": [
                    call("c1", "read_file", path="missing.txt"),
                    call("c2", "no_such_tool"),
                ]
            },
            {"text": "That file does not exist."},
        ],
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "read it"})
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    assert result["stopReason"] == "end_turn"
    assert [c["isError"] for c in result["toolCalls"]] == [True, True]
    assert [m.get("isError") for m in history if m["role"] == "tool"] == [True, True]


async def test_kernel_cancel_stops_a_streaming_run_and_the_session_stays_consistent(
    project: Path,
):
    connection = await start(project, [{"text": "a very long answer " * 50, "delay": 30}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = asyncio.ensure_future(
            connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
        )
        await next_event(connection, "iteration_started")
        with pytest.raises(RpcError) as busy:
            await connection.request("kernel/run", {"sessionId": sid, "prompt": "again"})
        assert busy.value.code == ErrorCode.SESSION_BUSY
        assert (await connection.request("session/get", {"sessionId": sid}))["running"] is True
        assert await connection.request("kernel/cancel", {"sessionId": sid}) == {"cancelled": True}
        result = await asyncio.wait_for(run, 20)
        session = await connection.request("session/get", {"sessionId": sid})
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    assert result["stopReason"] == "cancelled"
    assert session["running"] is False
    # the cut-short answer is kept as it was shown, marked cancelled
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["metadata"] == {"cancelled": True} and history[1]["content"]


async def test_the_session_takes_the_next_run_as_soon_as_kernel_cancel_answers(project: Path):
    connection = await start(
        project, [{"text": "a very long answer", "delay": 30}, {"text": "the next one"}]
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = asyncio.ensure_future(
            connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
        )
        await next_event(connection, "iteration_started")
        assert await connection.request("kernel/cancel", {"sessionId": sid}) == {"cancelled": True}
        nxt = await connection.request("kernel/run", {"sessionId": sid, "prompt": "again"})
        first = await asyncio.wait_for(run, 20)
    finally:
        await connection.close()
    assert (first["stopReason"], nxt["stopReason"]) == ("cancelled", "end_turn")


async def test_cancel_request_on_a_run_answers_32800_with_the_partial_result(project: Path):
    connection = await start(
        project,
        [{"toolCalls": [call("c1", "list_files")]}, {"text": "slow " * 50, "delay": 30}],
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        msg_id, future = connection.start_request("kernel/run", {"sessionId": sid, "prompt": "go"})
        await next_event(connection, "iteration_finished")
        await next_event(connection, "iteration_started")
        connection.notify("$/cancelRequest", {"id": msg_id})
        with pytest.raises(RpcError) as raised:
            await asyncio.wait_for(future, 20)
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    assert raised.value.code == ErrorCode.REQUEST_CANCELLED
    partial = raised.value.data
    assert partial["stopReason"] == "cancelled" and partial["iterations"] == 2
    assert [c["id"] for c in partial["toolCalls"]] == ["c1"]
    assert [m["role"] for m in history[:3]] == ["user", "assistant", "tool"]


async def test_an_unreachable_endpoint_is_a_provider_error_after_retries(project: Path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connection = await Connection.spawn(SERVER, env={"OPENAI_API_KEY": "sk-test-secret"})
    try:
        await connection.request(
            "initialize",
            {
                "workspaceFolders": [{"uri": project.as_uri()}],
                "initializationOptions": {
                    "provider": {
                        "type": "openai",
                        "baseUrl": f"http://127.0.0.1:{port}/v1",
                        "model": "m",
                        "maxRetries": 1,
                        "timeout": 5,
                    }
                },
            },
        )
        sid = (await connection.request("session/create", {}))["sessionId"]
        with pytest.raises(RpcError) as raised:
            await connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"})
        total = (await connection.request("session/messages", {"sessionId": sid}))["total"]
    finally:
        await connection.close()
    assert raised.value.code == ErrorCode.PROVIDER_ERROR
    assert raised.value.data["provider"] == "openai"
    assert "sk-test-secret" not in json.dumps(raised.value.data) + raised.value.message
    assert total == 1  # the prompt is kept; nothing half-made follows it


async def test_kernel_methods_refuse_unknown_sessions(project: Path):
    connection = await start(project, [])
    try:
        for method in ("kernel/run", "kernel/cancel"):
            with pytest.raises(RpcError) as raised:
                await connection.request(method, {"sessionId": "nope", "prompt": "x"})
            assert raised.value.code == ErrorCode.SESSION_NOT_FOUND
    finally:
        await connection.close()


def tether_run(*args: str) -> subprocess.CompletedProcess[str]:
    """``tether run ARGS`` in a process of its own, bounded in time."""
    return subprocess.run(
        [sys.executable, "-m", "tether", "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_tether_run_prints_the_streamed_answer_and_a_line_per_tool_call(project: Path):
    script = project.parent / "cli-script.json"
    script.write_text(
        json.dumps(
            [
                {"text": "Reading.", "toolCalls": [call("c1", "read_file", path="src/app.py")]},
                {"text": "main returns 42."},
            ]
        )
    )
    done = tether_run(
        "What does main return?", "--workspace", str(project), "--script", str(script)
    )
    assert done.returncode == 0, done.stderr
    assert "main returns 42." in done.stdout
    assert "→ Read src/app.py" in done.stdout and "✓ Read src/app.py" in done.stdout


def write_script(project: Path, path: str) -> Path:
    script = project.parent / "cli-write-script.json"
    turns = [{"toolCalls": [call("w1", "write_file", path=path, content="hi\n")]}, {"text": "ok"}]
    script.write_text(json.dumps(turns))
    return script


def test_tether_run_refuses_writes_when_nobody_can_be_asked_and_allows_them_with_auto(
    project: Path,
):
    script = write_script(project, "refused.txt")
    refused = tether_run("write", "--workspace", str(project), "--script", str(script))
    assert refused.returncode == 0, refused.stderr
    refusal = "✗ Write refused.txt: refused: approval needs a terminal (use --approval auto)"
    assert refusal in refused.stdout.splitlines()
    assert not (project / "refused.txt").exists()

    script = write_script(project, "allowed.txt")
    args = ("--workspace", str(project), "--script", str(script), "--approval", "auto")
    allowed = tether_run("write", *args)
    assert allowed.returncode == 0, allowed.stderr
    assert (project / "allowed.txt").read_text() == "hi\n"


def test_tether_run_on_a_terminal_asks_before_a_write(project: Path):
    script = write_script(project, "asked.txt")
    argv = [sys.executable, "-m", "tether", "run", "write", "--workspace", str(project)]
    controller, terminal = pty.openpty()
    os.write(controller, b"y\n")  # typed ahead: read when the question comes
    try:
        done = subprocess.run(
            [*argv, "--script", str(script)],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == 0, done.stderr
    assert "Allow Write asked.txt?" in done.stderr
    assert (project / "asked.txt").read_text() == "hi\n"


def test_tether_run_interrupted_at_its_question_exits_without_waiting_for_an_answer(
    project: Path,
):
    script = write_script(project, "never.txt")
    argv = [sys.executable, "-m", "tether", "run", "write", "--workspace", str(project)]
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*argv, "--script", str(script)],
        stdin=terminal,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        asked = ""
        while "Allow Write" not in asked:  # bounded by the test's timeout
            chunk = process.stderr.read(1)
            assert chunk, "tether run ended without asking"
            asked += chunk
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        process.kill()
        os.close(terminal)
        os.close(controller)
    assert not (project / "never.txt").exists()


def test_the_question_of_tether_run_shows_control_characters_escaped() -> None:
    assert (
        _printable('{"command": "ls\\r\\x1b[2Krm -rf /"}') == '{"command": "ls\\r\\x1b[2Krm -rf /"}'
    )
    assert _printable('{"a":\r"b"}\x1b[2K') == '{"a":\\r"b"}\\x1b[2K'


def test_a_log_line_quoting_a_repository_file_shows_its_control_characters_escaped(
    project: Path,
):
    (project / ".tether").mkdir()
    hostile_key = r'"\u001b]52;c;UFdORUQ=\u0007\u001b[2J\rok\u009b1m" = 1'
    (project / ".tether" / "config.toml").write_text(hostile_key + "\n")
    script = project.parent / "cli-script.json"
    script.write_text(json.dumps([{"text": "Hello."}]))
    argv = ["run", "hi", "--workspace", str(project), "--script", str(script)]
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,  # bytes: text mode would turn a carriage return into a line feed
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    [logged] = [line for line in stderr.split("\n") if " WARNING tether." in line]
    assert "\\x1b]52;c;UFdORUQ=\\x07\\x1b[2J\\rok\\x9b1m" in logged
    assert not {"\x1b", "\x07", "\r", "\x9b"} & set(stderr)


def test_tether_run_json_prints_events_and_the_result_as_json_lines(project: Path):
    script = project.parent / "cli-script.json"
    script.write_text(json.dumps([{"text": "Hello."}]))
    done = tether_run("hi", "--json", "--workspace", str(project), "--script", str(script))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["event"]["kind"] == "run_started"
    assert lines[-1]["result"]["response"] == "Hello."


def test_tether_run_exits_non_zero_on_an_error(project: Path):
    # a session id no session may have (a missing one is created: see test_messages.py)
    done = tether_run("hi", "--workspace", str(project), "--session", "not a valid id")
    assert done.returncode == 1
    assert "-32602" in done.stderr


async def test_two_runs_sent_together_on_one_session_one_is_refused_as_busy(project: Path):
    connection = await start(project, [{"text": "one"}, {"text": "two"}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        both = await asyncio.gather(
            connection.request("kernel/run", {"sessionId": sid, "prompt": "a"}),
            connection.request("kernel/run", {"sessionId": sid, "prompt": "b"}),
            return_exceptions=True,
        )
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    refused = [r for r in both if isinstance(r, RpcError)]
    assert [r.code for r in refused] == [ErrorCode.SESSION_BUSY]
    assert [m["role"] for m in history] == ["user", "assistant"]


async def test_the_script_goes_on_from_one_run_to_the_next_and_an_empty_turn_is_an_empty_answer(
    project: Path,
):
    connection = await start(project, [{"text": "first"}, {}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        first = await connection.request("kernel/run", {"sessionId": sid, "prompt": "a"})
        second = await connection.request("kernel/run", {"sessionId": sid, "prompt": "b"})
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    assert (first["response"], second["response"]) == ("first", "")
    assert second["stopReason"] == "end_turn"
    assert [(m["role"], m["content"]) for m in history[2:]] == [("user", "b"), ("assistant", "")]


async def test_an_empty_prompt_is_invalid_params(project: Path):
    connection = await start(project, [])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        for prompt in ("", "   ", []):
            with pytest.raises(RpcError) as raised:
                await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
            assert raised.value.code == ErrorCode.INVALID_PARAMS
    finally:
        await connection.close()


def test_interrupting_tether_run_cancels_the_run_and_exits_130(project: Path):
    script = project.parent / "slow-script.json"
    script.write_text(json.dumps([{"text": "a slow answer", "delay": 30}]))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether",
            "run",
            "hi",
            "--json",
            "--workspace",
            str(project),
            "--script",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:  # wait until the answer has started to stream
        if json.loads(line).get("event", {}).get("kind") == "message_delta":
            break
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 130
    assert json.loads(out.splitlines()[-1])["result"]["stopReason"] == "cancelled"
