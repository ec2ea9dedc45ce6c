"""Hooks through the real server: the user's commands on a run's events, their answers reaching
the model (the history the next model call reads), and a repository that cannot set one."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.processes import appear, gone, kill_all, unique_seconds
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode
from tether.testing import tool_call

from .conftest import start_scripted


def hook(tmp_path: Path, name: str, body: str) -> str:
    """A hook command: a Python script (``payload`` is its stdin, parsed) in ``tmp_path``."""
    script = tmp_path / f"{name}.py"
    script.write_text("import json, sys\npayload = json.load(sys.stdin)\n" + body)
    return f"{sys.executable} {script}"


def progress(connection: Connection, kind: str) -> list[dict[str, Any]]:
    """The events of ``kind`` received so far (the queue is drained)."""
    found = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "kernel/progress" and params["event"]["kind"] == kind:
            found.append(params["event"])
    return found


async def run(
    project: Path, turns: list[dict[str, Any]], hooks: dict[str, Any], prompt: str = "go"
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], Connection]:
    """One run with ``hooks`` from the editor's settings: its result, its ``hook`` events and the
    session's history (the connection is closed)."""
    connection = await start_scripted(project, turns, tools={"approval": "auto"}, hooks=hooks)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        history = await connection.request("session/messages", {"sessionId": sid})
    finally:
        await connection.close()
    return result, progress(connection, "hook"), history["messages"], connection


async def test_a_pre_tool_use_hook_blocks_a_write_and_the_model_reads_its_reason(
    project: Path, tmp_path: Path
):
    blocker = hook(
        tmp_path,
        "blocker",
        "assert payload['tool_name'] == 'write_file'\n"
        "print(f\"no writes to {payload['tool_input']['path']}\", file=sys.stderr)\n"
        "sys.exit(2)\n",
    )
    turns = [
        {
            "toolCalls": [
                tool_call("write_file", "c1", path="notes.txt", content="hello"),
                tool_call("read_file", "c2", path="README.md"),
            ]
        },
        {"text": "I may not write there."},
    ]
    hooks = {"pre_tool_use": [{"matcher": "write_*|edit_file", "command": blocker}]}
    result, events, history, _ = await run(project, turns, hooks)

    assert not (project / "notes.txt").exists()
    assert result["stopReason"] == "end_turn"
    [event] = events  # read_file did not match
    assert (event["event"], event["outcome"], event["toolCallId"]) == (
        "pre_tool_use",
        "blocked",
        "c1",
    )
    assert event["exitCode"] == 2 and event["message"] == "no writes to notes.txt"
    assert event["name"].startswith(sys.executable)  # the command, shortened
    results = {m["toolCallId"]: m for m in history if m["role"] == "tool"}
    assert results["c1"]["content"] == "no writes to notes.txt"
    assert results["c1"]["isError"] is True
    assert "# Demo" in results["c2"]["content"]


async def test_updated_input_changes_the_call_that_runs(project: Path, tmp_path: Path):
    rewriter = hook(
        tmp_path,
        "rewriter",
        "tool_input = dict(payload['tool_input'], path='docs/' + payload['tool_input']['path'])\n"
        "print(json.dumps({'updatedInput': tool_input}))\n",
    )
    turns = [
        {"toolCalls": [tool_call("write_file", "c1", path="notes.txt", content="hello")]},
        {"text": "Written."},
    ]
    connection = await start_scripted(
        project,
        turns,
        tools={"approval": "auto"},
        hooks={"preToolUse": [{"command": rewriter, "name": "docs only"}]},
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "write"})
        announced = progress(connection, "tool_call")
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn"
    assert (project / "docs" / "notes.txt").read_text() == "hello"
    assert not (project / "notes.txt").exists()
    [call] = announced
    assert json.loads(call["arguments"]) == {"path": "docs/notes.txt", "content": "hello"}


async def test_a_post_tool_use_hook_adds_context_to_the_result(project: Path, tmp_path: Path):
    checker = hook(
        tmp_path,
        "checker",
        "assert '# Demo' in payload['tool_result'], payload\n"
        "print(json.dumps({'additionalContext': 'checked: ' + payload['tool_name']}))\n",
    )
    turns = [
        {"toolCalls": [tool_call("read_file", "c1", path="README.md")]},
        {"text": "Read."},
    ]
    hooks = {"post_tool_use": [{"matcher": "read_file", "command": checker}]}
    result, events, history, _ = await run(project, turns, hooks)

    assert result["stopReason"] == "end_turn"
    assert [(e["event"], e["outcome"]) for e in events] == [("post_tool_use", "ok")]
    [tool] = [m for m in history if m["role"] == "tool"]
    assert "# Demo" in tool["content"]
    assert tool["content"].endswith("\n\nchecked: read_file")
    assert "isError" not in tool or tool["isError"] is False


async def test_a_hanging_hook_is_killed_at_its_timeout_with_its_processes(
    project: Path, tmp_path: Path
):
    pids = tmp_path / "pids"
    seconds = unique_seconds()
    hanging = (
        f"echo $$ >> {pids}; sleep {seconds} & echo $! >> {pids}; "
        f"(setsid sleep {seconds} >/dev/null 2>&1 & echo $! >> {pids}); wait"
    )
    turns = [
        {"toolCalls": [tool_call("read_file", "c1", path="README.md")]},
        {"text": "Read."},
    ]
    hooks = {"pre_tool_use": [{"command": hanging, "timeout": 1}]}
    try:
        result, events, history, _ = await run(project, turns, hooks)
        started = [int(line) for line in pids.read_text().split()]
        assert len(started) == 3
        assert await gone(started)
    finally:
        if pids.exists():
            kill_all([int(line) for line in pids.read_text().split()])

    [event] = events
    assert (event["event"], event["outcome"]) == ("pre_tool_use", "timeout")
    assert "exitCode" not in event
    assert result["stopReason"] == "end_turn"  # the run went on, and the call ran
    [tool] = [m for m in history if m["role"] == "tool"]
    assert "# Demo" in tool["content"]


async def test_a_workspace_file_cannot_set_a_hook_and_the_run_warns(project: Path, tmp_path: Path):
    (project / ".tether").mkdir()
    (project / ".tether" / "config.toml").write_text(
        '[[hooks.pre_tool_use]]\ncommand = "touch pwned"\n'
    )
    config_home = tmp_path / "config"
    (config_home / "tether").mkdir(parents=True)
    audit = tmp_path / "audit.jsonl"
    auditor = hook(
        tmp_path, "auditor", f"open({str(audit)!r}, 'a').write(payload['tool_name'] + '\\n')\n"
    )
    (config_home / "tether" / "config.toml").write_text(
        f"[[hooks.pre_tool_use]]\ncommand = {json.dumps(auditor)}\n"
    )
    turns = [
        {"toolCalls": [tool_call("read_file", "c1", path="README.md")]},
        {"text": "Read."},
    ]
    connection = await start_scripted(
        project, turns, env={"XDG_CONFIG_HOME": str(config_home)}, tools={"approval": "auto"}
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "read"})
    finally:
        await connection.close()

    assert not (project / "pwned").exists()
    assert audit.read_text() == "read_file\n"  # the user's own hook ran
    [warning] = result["warnings"]
    assert warning["code"] == ErrorCode.CONFIG_ERROR
    assert warning["data"]["key"] == "hooks.pre_tool_use"


async def test_user_prompt_submit_refuses_a_prompt_and_adds_context_to_another(
    project: Path, tmp_path: Path
):
    gate = hook(
        tmp_path,
        "gate",
        "if 'password' in payload['prompt']:\n"
        "    print('keep passwords out of prompts', file=sys.stderr)\n"
        "    sys.exit(2)\n"
        "print('the user prefers short answers')\n",
    )
    starter = hook(tmp_path, "starter", "print(json.dumps({'additionalContext': 'on call'}))\n")
    hooks = {
        "user_prompt_submit": [{"command": gate, "name": "gate"}],
        "session_start": [{"command": starter}],
    }
    connection = await start_scripted(project, [{"text": "Hi."}], hooks=hooks)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        try:
            await connection.request("kernel/run", {"sessionId": sid, "prompt": "my password is x"})
            raise AssertionError("the prompt was not refused")
        except RpcError as refused:
            error = refused
        refused_events = progress(connection, "hook")
        kept = await connection.request("session/messages", {"sessionId": sid})
        untitled = await connection.request("session/get", {"sessionId": sid})
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "hello"})
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
        titled = await connection.request("session/get", {"sessionId": sid})
    finally:
        await connection.close()

    assert error.code == ErrorCode.PROMPT_REFUSED
    assert error.data == {"hook": "gate", "reason": "keep passwords out of prompts"}
    assert kept["messages"] == []  # nothing of the refused prompt was stored
    assert untitled.get("title") is None  # not even as the session's title
    assert titled["title"] == "hello"
    assert [(e["event"], e["outcome"]) for e in refused_events] == [
        ("session_start", "ok"),
        ("user_prompt_submit", "blocked"),
    ]
    assert result["stopReason"] == "end_turn"
    assert [(m["role"], m["content"], (m.get("metadata") or {}).get("hook")) for m in history] == [
        ("system", "on call", "session_start"),
        ("user", "hello", None),
        ("system", "the user prefers short answers", "user_prompt_submit"),
        ("assistant", "Hi.", None),
    ]


async def test_a_stop_hook_keeps_the_run_going_with_its_reason(project: Path, tmp_path: Path):
    stopper = hook(
        tmp_path,
        "stopper",
        "if not payload['stop_hook_active']:\n"
        "    print('run the tests first', file=sys.stderr)\n"
        "    sys.exit(2)\n",
    )
    turns = [{"text": "Done."}, {"text": "Tests pass. Done."}]
    result, events, history, _ = await run(project, turns, {"stop": [{"command": stopper}]})

    assert (result["stopReason"], result["iterations"]) == ("end_turn", 2)
    assert result["response"] == "Tests pass. Done."
    assert [(e["event"], e["outcome"]) for e in events] == [("stop", "blocked"), ("stop", "ok")]
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "go"),
        ("assistant", "Done."),
        ("user", "A stop hook did not let the run end: run the tests first"),
        ("assistant", "Tests pass. Done."),
    ]
    assert history[2]["metadata"] == {"hook": "stop"}


async def test_a_failing_hook_is_a_warning_and_the_run_goes_on(project: Path, tmp_path: Path):
    failing = hook(tmp_path, "failing", "print('lint crashed', file=sys.stderr)\nsys.exit(3)\n")
    turns = [
        {"toolCalls": [tool_call("read_file", "c1", path="README.md")]},
        {"text": "Read."},
    ]
    connection = await start_scripted(
        project,
        turns,
        tools={"approval": "auto"},
        hooks={"post_tool_use": [{"command": failing, "name": "lint"}]},
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "read"})
        notices = progress(connection, "notice")
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn"
    [tool] = result["toolCalls"]
    assert "# Demo" in tool["result"] and not tool["isError"]
    [notice] = notices
    assert notice["message"] == "hook 'lint' (post_tool_use): exit code 3: lint crashed"


async def test_a_hook_gets_no_secret_and_what_it_says_is_redacted(project: Path, tmp_path: Path):
    key = "sk-hooks-" + "k3y" * 8
    leak = tmp_path / "leak.txt"
    leak.write_text(key)
    leaker = hook(
        tmp_path,
        "leaker",
        "import os\n"
        f"assert {key!r} not in os.environ.values()\n"
        f"print('the key is ' + open({str(leak)!r}).read(), file=sys.stderr)\n"
        "sys.exit(2)\n",
    )
    turns = [
        {"toolCalls": [tool_call("read_file", "c1", path="README.md")]},
        {"text": "Blocked."},
    ]
    connection = await start_scripted(
        project,
        turns,
        env={"OPENAI_API_KEY": key},
        tools={"approval": "auto"},
        hooks={"pre_tool_use": [{"command": leaker}]},
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "read"})
        events = progress(connection, "hook")
    finally:
        await connection.close()

    [tool] = result["toolCalls"]
    assert (tool["result"], tool["isError"]) == ("the key is [redacted]", True)
    [event] = events
    assert event["outcome"] == "blocked"  # exit 2: the assertion on its environment held
    assert event["message"] == "the key is [redacted]"


async def test_cancelling_a_run_kills_the_hook_it_waits_on(project: Path, tmp_path: Path):
    pids = tmp_path / "pids"
    seconds = unique_seconds()
    hanging = f"echo $$ >> {pids}; sleep {seconds} & echo $! >> {pids}; wait"
    turns = [{"toolCalls": [tool_call("read_file", "c1", path="README.md")]}]
    connection = await start_scripted(
        project,
        turns,
        tools={"approval": "auto"},
        hooks={"pre_tool_use": [{"command": hanging, "timeout": 600}]},
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = asyncio.ensure_future(
            connection.request("kernel/run", {"sessionId": sid, "prompt": "read"})
        )
        started = await appear(lambda: set(_pids(pids)), 2)
        assert await connection.request("kernel/cancel", {"sessionId": sid}) == {"cancelled": True}
        result = await asyncio.wait_for(run, 20)
        history = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
        assert await gone(started)
    finally:
        await connection.close()
        kill_all(_pids(pids))

    assert result["stopReason"] == "cancelled"
    assert [(m["role"], m.get("content")) for m in history][-1] == ("tool", "cancelled")


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []
