"""Project instructions (``AGENTS.md``) through the real server against a real loopback model
endpoint: what the endpoint receives as the system prompt, with no configuration at all."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import ModelServer, Reply
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode

from .conftest import SERVER


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


@pytest.fixture
def user_config(tmp_path: Path) -> Path:
    """An empty user configuration directory (``$XDG_CONFIG_HOME``)."""
    config = tmp_path / "config"
    (config / "tether").mkdir(parents=True)
    return config


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg" / "sub").mkdir(parents=True)
    return root


async def connect(
    endpoint: ModelServer, project: Path, user_config: Path, **options: Any
) -> Connection:
    connection = await Connection.spawn(
        SERVER, env={"OPENAI_API_KEY": "sk-test", "XDG_CONFIG_HOME": str(user_config)}
    )
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "m"}
    await connection.request(
        "initialize",
        {
            "workspaceFolders": [{"uri": project.as_uri()}],
            "initializationOptions": {
                "provider": provider,
                "kernel": {"systemPrompt": "Be brief."},
                **options,
            },
        },
    )
    connection.notify("initialized", {})
    return connection


def system_prompt(body: dict[str, Any]) -> str:
    [system] = [m["content"] for m in body["messages"] if m["role"] == "system"]
    assert isinstance(system, str)
    return system


async def test_agents_md_of_the_user_the_root_and_the_turns_folder_reach_the_model_in_order(
    endpoint: ModelServer, project: Path, user_config: Path
) -> None:
    user_file = user_config / "tether" / "AGENTS.md"
    user_file.write_text("Answer in English.\n")
    (project / "AGENTS.md").write_text("Run make test.\n")
    (project / "pkg" / "AGENTS.md").write_text("pkg uses tabs.\n")
    (project / "pkg" / "sub" / "AGENTS.md").write_text("sub is generated: do not edit.\n")
    (project / ".tether" / "memory").mkdir(parents=True)
    (project / ".tether" / "memory" / "notes.md").write_text("Remember the milk.\n")
    endpoint.push(*(Reply(text=f"answer {i}") for i in range(3)))
    connection = await connect(endpoint, project, user_config)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        session = await connection.request("session/get", {"sessionId": sid})
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "at the root"})
        nested = {"sessionId": sid, "prompt": "in sub", "directory": "pkg/sub"}
        await connection.request("kernel/run", nested)
        (project / "AGENTS.md").write_text("Run make check, never make test.\n")
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "after an edit"})
    finally:
        await connection.close()

    root, deep, edited = (system_prompt(r.body) for r in endpoint.requests[-3:])
    user = f"## {user_file}\n\nAnswer in English."
    memory = "# Memory\n\n## .tether/memory/notes.md\n\nRemember the milk."
    assert root == (
        f"Be brief.\n\n# Instructions\n\n{user}\n\n## AGENTS.md\n\nRun make test.\n\n{memory}"
    )
    assert deep == (
        f"Be brief.\n\n# Instructions\n\n{user}\n\n## AGENTS.md\n\nRun make test.\n\n"
        "## pkg/AGENTS.md\n\npkg uses tabs.\n\n"
        f"## pkg/sub/AGENTS.md\n\nsub is generated: do not edit.\n\n{memory}"
    )
    assert "## AGENTS.md\n\nRun make check, never make test." in edited
    assert session["instructions"] == [str(user_file), "AGENTS.md"]


async def test_hostile_instruction_files_are_warnings_and_the_run_goes_on_without_them(
    endpoint: ModelServer, project: Path, user_config: Path
) -> None:
    (project / "AGENTS.md").symlink_to("/dev/zero")
    os.mkfifo(project / "pkg" / "AGENTS.md")  # opening it would block until someone writes
    with (project / "CLAUDE.md").open("wb") as huge:
        huge.truncate(64 * 1024 * 1024)
    (project / "pkg" / "CLAUDE.md").write_text("Kept.\n")
    endpoint.push(Reply(text="fine"))
    connection = await connect(
        endpoint, project, user_config, instructions={"files": ["AGENTS.md", "CLAUDE.md"]}
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "hi", "directory": str(project / "pkg")}
        )
        session = await connection.request("session/get", {"sessionId": sid})
    finally:
        await connection.close()

    assert run["stopReason"] == "end_turn"
    left_out = {
        w["data"]["path"]: w["data"]["reason"]
        for w in run["warnings"]
        if w["data"]["key"] == "instructions.files"
    }
    assert left_out == {
        "AGENTS.md": "outside",  # a symlink out of the workspace, to a device: never opened
        "CLAUDE.md": "too_large",
        "pkg/AGENTS.md": "not_regular",
    }
    assert all(w["code"] == ErrorCode.CONFIG_ERROR for w in run["warnings"])
    prompt = system_prompt(endpoint.requests[-1].body)
    assert prompt == "Be brief.\n\n# Instructions\n\n## pkg/CLAUDE.md\n\nKept."
    assert "instructions" not in session  # none in effect


async def test_instructions_turned_off_and_a_folder_outside_the_workspace(
    endpoint: ModelServer, project: Path, user_config: Path, tmp_path: Path
) -> None:
    (project / "AGENTS.md").write_text("Run make test.\n")
    endpoint.push(Reply(text="fine"))
    connection = await connect(endpoint, project, user_config, instructions={"enabled": False})
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        with pytest.raises(RpcError) as outside:
            await connection.request(
                "kernel/run", {"sessionId": sid, "prompt": "hi", "directory": str(tmp_path)}
            )
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "hi"})
        session = await connection.request("session/get", {"sessionId": sid})
    finally:
        await connection.close()

    assert outside.value.code == ErrorCode.INVALID_PARAMS
    assert outside.value.data["fields"][0]["field"] == "directory"
    assert system_prompt(endpoint.requests[-1].body) == "Be brief."
    assert "instructions" not in session
