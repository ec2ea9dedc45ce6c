"""Slash commands through the real server: listed by ``session/commands``, a custom command
expanded into what the model reads (a loopback endpoint records it), its tools narrowed, the
built-ins answered without a model call, and hostile command files left out with a warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import ModelServer, Reply
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode

from .conftest import SERVER, start_scripted


@pytest.fixture
def user_config(tmp_path: Path) -> Path:
    """``XDG_CONFIG_HOME`` of the server, with the user's commands folder."""
    config = tmp_path / "config"
    (config / "tether" / "commands").mkdir(parents=True)
    return config


def user_command(user_config: Path, name: str, text: str) -> None:
    path = user_config / "tether" / "commands" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def workspace_command(project: Path, name: str, text: str) -> Path:
    path = project / ".tether" / "commands" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


async def scripted(
    project: Path, user_config: Path, turns: list[dict[str, Any]] | None = None
) -> Connection:
    """A real server on ``project`` whose model plays ``turns`` (none: a model call fails)."""
    env = {"XDG_CONFIG_HOME": str(user_config)}
    return await start_scripted(project, turns or [], env=env, tools={"approval": "auto"})


def progress(connection: Connection) -> list[dict[str, Any]]:
    """The ``kernel/progress`` events received so far (the queue is drained)."""
    found = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "kernel/progress":
            found.append(params["event"])
    return found


async def test_session_commands_lists_the_built_ins_the_users_and_the_workspaces(
    project: Path, user_config: Path
):
    user_command(
        user_config,
        "review",
        "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $1.\n",
    )
    workspace_command(project, "git/commit", "Write a commit message for the staged changes.\n")
    shadowed = workspace_command(project, "review", "The repository's review.\n")
    builtin = workspace_command(project, "help", "Not the help.\n")
    connection = await scripted(project, user_config)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("session/commands", {"sessionId": sid})
    finally:
        await connection.close()

    listed = {c["name"]: c for c in result["commands"]}
    assert [c["name"] for c in result["commands"]] == [
        "compact",
        "mode",
        "plan",
        "agent",
        "undo",
        "rewind",
        "help",
        "git:commit",
        "review",
    ]
    assert {c["source"] for c in result["commands"][:7]} == {"builtin"}
    assert listed["review"] == {
        "name": "review",
        "description": "Review a file",
        "argumentHint": "<file>",
        "source": "user",  # the user's own wins over the repository's
    }
    assert listed["git:commit"] == {
        "name": "git:commit",
        "description": "Write a commit message for the staged changes.",
        "source": "workspace",
    }
    reasons = {w["data"]["path"]: w["data"]["reason"] for w in result["warnings"]}
    assert reasons == {str(shadowed): "shadowed", str(builtin): "shadowed"}


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


async def test_a_workspace_command_is_expanded_with_its_arguments_and_narrows_the_tools(
    project: Path, user_config: Path, endpoint: ModelServer
):
    workspace_command(
        project,
        "fix",
        "---\n"
        "description: Fix an issue\n"
        "allowed-tools: [read_file, search_text, no_such_tool]\n"
        "---\n"
        "Fix issue #$1 in $2.\nEverything typed: $ARGUMENTS\n",
    )
    endpoint.push(Reply(text="Fixed."))
    connection = await Connection.spawn(
        SERVER, env={"XDG_CONFIG_HOME": str(user_config), "OPENAI_API_KEY": "sk-test"}
    )
    try:
        provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m"}
        await connection.request(
            "initialize",
            {
                "workspaceFolders": [{"uri": project.as_uri()}],
                "initializationOptions": {"provider": provider},
            },
        )
        connection.notify("initialized", {})
        sid = (await connection.request("session/create", {}))["sessionId"]
        prompt = '/fix 42 "src/app.py"'
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
        session = await connection.request("session/get", {"sessionId": sid})
    finally:
        await connection.close()

    assert result["response"] == "Fixed."
    [request] = endpoint.requests
    expanded = 'Fix issue #42 in src/app.py.\nEverything typed: 42 "src/app.py"'
    sent = [m for m in request.body["messages"] if m["role"] == "user"]
    assert [m["content"] for m in sent] in ([expanded], [[{"type": "text", "text": expanded}]])
    offered = sorted(tool["function"]["name"] for tool in request.body["tools"])
    assert offered == ["read_file", "search_text"]  # narrowed; an unknown name adds nothing
    user = messages[0]
    assert user["content"] == expanded
    assert user["metadata"]["command"] == {
        "name": "fix",
        "arguments": '42 "src/app.py"',
        "source": "workspace",
    }
    assert session["title"] == '/fix 42 "src/app.py"'  # what the user typed


async def test_allowed_tools_narrow_the_sessions_and_the_requests_tools_without_refusing(
    project: Path, user_config: Path, endpoint: ModelServer
):
    workspace_command(project, "look", "---\nallowed-tools: read_file, write_file\n---\nLook.\n")
    endpoint.push(Reply(text="Looked."), Reply(text="Looked."))
    connection = await Connection.spawn(
        SERVER, env={"XDG_CONFIG_HOME": str(user_config), "OPENAI_API_KEY": "sk-test"}
    )
    try:
        provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m"}
        await connection.request(
            "initialize",
            {
                "workspaceFolders": [{"uri": project.as_uri()}],
                "initializationOptions": {"provider": provider},
            },
        )
        connection.notify("initialized", {})
        session = {"tools": ["read_file", "list_files"]}
        sid = (await connection.request("session/create", session))["sessionId"]
        first = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/look"})
        params = {"sessionId": sid, "prompt": "/look", "tools": ["list_files"]}
        second = await connection.request("kernel/run", params)
    finally:
        await connection.close()

    assert first["response"] == second["response"] == "Looked."
    offered = [
        [tool["function"]["name"] for tool in r.body.get("tools", [])] for r in endpoint.requests
    ]
    assert offered == [
        ["read_file"],
        [],
    ]  # write_file is not the session's; list_files not the command's


async def test_mode_read_only_changes_the_sessions_mode_without_a_model_call(
    project: Path, user_config: Path
):
    connection = await scripted(project, user_config)  # a model call would fail the run
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "/mode read_only"}
        )
        session = await connection.request("session/get", {"sessionId": sid})
        messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
        with pytest.raises(RpcError) as refused:
            await connection.request("kernel/run", {"sessionId": sid, "prompt": "/mode sideways"})
    finally:
        await connection.close()

    assert (result["stopReason"], result["iterations"]) == ("end_turn", 0)
    assert result["response"] == "Mode set to read_only."
    assert session["mode"] == "read_only"
    assert messages == []  # a built-in's answer is not the model's to read
    assert "title" not in session
    assert refused.value.code == ErrorCode.INVALID_PARAMS


async def test_help_lists_the_commands_without_a_model_call(project: Path, user_config: Path):
    user_command(user_config, "standup", "---\ndescription: Summarize my day\n---\nSummarize.\n")
    connection = await scripted(project, user_config)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/help"})
        shown = progress(connection)
    finally:
        await connection.close()

    assert result["stopReason"] == "end_turn" and result["iterations"] == 0
    assert "- /mode ask | accept_edits | read_only:" in result["response"]
    assert "- /standup: Summarize my day (user)" in result["response"]
    assert [e["kind"] for e in shown] == ["run_started", "message_delta", "run_finished"]
    assert shown[1]["text"] == result["response"]


async def test_compact_with_nothing_old_enough_answers_so_without_a_model_call(
    project: Path, user_config: Path
):
    connection = await scripted(project, user_config)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/compact"})
    finally:
        await connection.close()
    assert result["response"].startswith("Nothing to compact")


async def test_an_unknown_command_is_sent_as_typed(project: Path, user_config: Path):
    connection = await scripted(project, user_config, [{"text": "No such command here."}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        prompt = "/nope with words"
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()
    assert result["response"] == "No such command here."
    assert messages[0]["content"] == "/nope with words"
    assert "metadata" not in messages[0]


async def test_hostile_command_files_are_warnings_and_the_rest_still_work(
    project: Path, user_config: Path, tmp_path: Path
):
    folder = project / ".tether" / "commands"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "fifo.md")
    (folder / "zero.md").symlink_to("/dev/zero")
    outside = tmp_path / "secret.md"
    outside.write_text("a file of the user's, outside the workspace\n")
    (folder / "away.md").symlink_to(outside)
    (folder / "huge.md").write_bytes(b"x" * (1 << 20))
    (folder / "binary.md").write_bytes(b"\xff\xfe\x00bad")
    (folder / "matter.md").write_text("---\ndescription: never closed\nBody.\n")
    (folder / "ok.md").write_text("Say OK.\n")
    connection = await scripted(project, user_config, [{"text": "OK."}])
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        listed = await connection.request("session/commands", {"sessionId": sid})
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/ok"})
    finally:
        await connection.close()

    assert [c["name"] for c in listed["commands"] if c["source"] == "workspace"] == ["ok"]
    reasons = {Path(w["data"]["path"]).name: w["data"]["reason"] for w in listed["warnings"]}
    assert reasons == {
        "fifo.md": "not_regular",
        "zero.md": "outside",
        "away.md": "outside",
        "huge.md": "too_large",
        "binary.md": "not_utf8",
        "matter.md": "front_matter",
    }
    assert all(w["code"] == ErrorCode.CONFIG_ERROR for w in listed["warnings"])
    assert result["response"] == "OK."


def test_tether_run_answers_help(project: Path, user_config: Path, tmp_path: Path):
    script = tmp_path / "empty.json"
    script.write_text(json.dumps([]))
    argv = ["run", "/help", "--workspace", str(project), "--script", str(script)]
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(user_config)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "- /compact:" in done.stdout and "- /help: List the commands" in done.stdout


async def test_compact_summarizes_the_older_turns_within_the_commands_run(
    project: Path, user_config: Path
):
    turns = [{"text": "First answer."}, {"text": "Second answer."}, {"text": "The summary."}]
    connection = await scripted(project, user_config, turns)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        for prompt in ("first question", "second question"):
            await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        progress(connection)
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/compact"})
        shown = progress(connection)
        messages = (await connection.request("session/messages", {"sessionId": sid}))["messages"]
    finally:
        await connection.close()

    assert result["response"] == "The older turns are now a summary."
    assert [e["kind"] for e in shown] == [
        "run_started",
        "compaction_started",
        "compaction_finished",
        "message_delta",
        "run_finished",
    ]
    assert shown[2]["summary"] == "The summary."
    assert [m.get("kind") for m in messages].count("compaction") == 1
