"""The SQLite session store through the real server: restarts, forks, a store that cannot open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError
from tether.protocol import ErrorCode

from .conftest import SERVER, initialized, script_options
from .test_kernel import call


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# Demo\nA small project.\n")
    return root


async def start(
    project: Path, turns: list[dict[str, Any]], env: dict[str, str], name: str = "script"
) -> tuple[Connection, dict[str, Any]]:
    connection = await Connection.spawn(SERVER, env=env)
    options = script_options(project, turns, name=name, provider={"model": "m"})
    return connection, await initialized(connection, project, options)


async def test_a_second_server_on_the_same_file_lists_and_continues_the_session(
    project: Path, tmp_path: Path
) -> None:
    env = {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    first, init = await start(
        project,
        [
            {"text": "Looking.", "toolCalls": [call("c1", "read_file", path="README.md")]},
            {"text": "A demo."},
        ],
        env,
    )
    assert init["capabilities"]["sessions"] == {"store": "sqlite", "fork": True, "durable": True}
    try:
        sid = (await first.request("session/create", {"title": "kept"}))["sessionId"]
        await first.request(
            "session/configure",
            {"sessionId": sid, "state": {"step": 1}, "allowedModels": ["m"]},
        )
        run = await first.request("kernel/run", {"sessionId": sid, "prompt": "What is it?"})
        assert run["response"] == "A demo."
    finally:
        await first.close()

    second, _ = await start(project, [{"text": "Still a demo."}], env, name="second")
    try:
        listed = (await second.request("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]
        assert listed[0]["title"] == "kept"
        assert listed[0]["state"] == {"step": 1}
        assert listed[0]["allowedModels"] == ["m"]
        assert listed[0]["messageCount"] == 4
        run = await second.request("kernel/run", {"sessionId": sid, "prompt": "And now?"})
        assert run["response"] == "Still a demo."
        history = (await second.request("session/messages", {"sessionId": sid}))["messages"]
        assert [m["role"] for m in history] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
        ]

        fork = await second.request(
            "session/fork",
            {"sessionId": sid, "atMessageId": history[3]["id"], "title": "branch"},
        )
        assert fork["parentSessionId"] == sid
        assert fork["forkedFromMessageId"] == history[3]["id"]
        assert (fork["title"], fork["messageCount"], fork["state"]) == ("branch", 4, {"step": 1})
        forked = await second.request("session/messages", {"sessionId": fork["sessionId"]})
        assert [m["id"] for m in forked["messages"]] == [m["id"] for m in history[:4]]

        with pytest.raises(RpcError) as refused:
            await second.request(
                "session/fork", {"sessionId": sid, "atMessageId": history[1]["id"]}
            )
        assert refused.value.code == ErrorCode.INVALID_PARAMS
        assert "tool exchange" in refused.value.message

        await second.request("session/delete", {"sessionId": sid})
        with pytest.raises(RpcError) as gone:
            await second.request("session/get", {"sessionId": sid})
        assert gone.value.code == ErrorCode.SESSION_NOT_FOUND
        kept = await second.request("session/messages", {"sessionId": fork["sessionId"]})
        assert kept["total"] == 4
    finally:
        await second.close()


async def test_a_store_that_cannot_be_opened_answers_config_error_and_the_server_stays_up(
    project: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    env = {
        "TETHER_SESSIONS_STORE": "sqlite",
        "TETHER_SESSIONS_PATH": str(blocker / "sessions.db"),
    }
    connection, _ = await start(project, [], env)
    try:
        for _ in range(2):
            with pytest.raises(RpcError) as failed:
                await connection.request("session/list", {})
            assert failed.value.code == ErrorCode.CONFIG_ERROR
            assert "cannot open the session store" in failed.value.message
    finally:
        assert await connection.close() == 0


async def test_init_options_choose_the_store(project: Path, tmp_path: Path) -> None:
    connection = await Connection.spawn(SERVER)
    path = tmp_path / "chosen.db"
    try:
        result = await connection.request(
            "initialize",
            {
                "workspaceFolders": [{"uri": project.as_uri()}],
                "initializationOptions": {"sessions": {"store": "sqlite", "path": str(path)}},
            },
        )
        assert result["capabilities"]["sessions"]["store"] == "sqlite"
        await connection.request("session/create", {})
    finally:
        await connection.close()
    assert path.exists()
