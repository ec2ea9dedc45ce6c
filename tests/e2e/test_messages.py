"""Messages as specified, through the real server on the memory and SQLite stores: the author of
what the kernel writes, tool names and structured outputs on results, content of any JSON shape,
sessions under ids the client chose (``session/create`` and ``tether run --session``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError
from tether.protocol import ErrorCode
from tether.sessions.sql import SqlStore, sqlite_url

from .conftest import start_scripted
from .test_kernel import call

STORES = ["memory", "sqlite"]


def _sessions(kind: str, tmp_path: Path) -> dict[str, Any]:
    if kind == "memory":
        return {}
    return {"sessions": {"store": "sqlite", "path": str(tmp_path / "sessions.db")}}


async def _messages(connection: Connection, session_id: str) -> list[dict[str, Any]]:
    page = await connection.request("session/messages", {"sessionId": session_id})
    messages: list[dict[str, Any]] = page["messages"]
    return messages


@pytest.mark.parametrize("kind", STORES)
async def test_the_kernel_writes_the_agents_author_and_the_tools_name(
    kind: str, project: Path, tmp_path: Path
) -> None:
    turns = [
        {"toolCalls": [call("c1", "read_file", path="src/app.py")]},
        {"text": "main returns 42."},
        {"toolCalls": [call("c2", "list_files")]},
        {"text": "Two files."},
    ]
    connection = await start_scripted(project, turns, **_sessions(kind, tmp_path))
    try:
        await connection.request("session/create", {"sessionId": "review-7", "agentId": "planner"})
        first = await connection.request(
            "kernel/run", {"sessionId": "review-7", "prompt": "What does main return?"}
        )
        second = await connection.request(
            "kernel/run", {"sessionId": "review-7", "prompt": "Files?", "author": "reviewer"}
        )
        messages = await _messages(connection, "review-7")
    finally:
        await connection.close()

    assert first["sessionId"] == second["sessionId"] == "review-7"
    shape = [(m["role"], m.get("author"), m.get("name")) for m in messages]
    assert shape == [
        ("user", None, None),
        ("assistant", "planner", None),
        ("tool", "planner", "read_file"),
        ("assistant", "planner", None),
        ("user", None, None),
        ("assistant", "reviewer", None),
        ("tool", "reviewer", "list_files"),
        ("assistant", "reviewer", None),
    ]


@pytest.mark.parametrize("kind", STORES)
async def test_content_of_any_json_shape_round_trips_and_reaches_the_model_as_json_text(
    kind: str, project: Path, tmp_path: Path
) -> None:
    contents: list[Any] = [
        {"order": 7, "lines": [{"sku": "a", "qty": 2}], "rush": False},
        12.5,
        ["a", 1, None],
        True,
    ]
    connection = await start_scripted(project, [{"text": "Seen."}], **_sessions(kind, tmp_path))
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        appended = await connection.request(
            "session/append",
            {"sessionId": sid, "messages": [{"role": "user", "content": c} for c in contents]},
        )
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "Go."})
        messages = await _messages(connection, sid)
    finally:
        await connection.close()

    assert [m["content"] for m in appended["messages"]] == contents
    assert [m["content"] for m in messages[:4]] == contents
    assert result["response"] == "Seen."


@pytest.mark.parametrize("kind", STORES)
async def test_a_session_is_created_under_a_chosen_id_once_and_bad_ids_are_refused(
    kind: str, project: Path, tmp_path: Path
) -> None:
    connection = await start_scripted(project, [], **_sessions(kind, tmp_path))
    try:
        created = await connection.request(
            "session/create", {"sessionId": "team:alice@ticket-12", "title": "first"}
        )
        with pytest.raises(RpcError) as taken:
            await connection.request(
                "session/create", {"sessionId": "team:alice@ticket-12", "title": "second"}
            )
        refused = []
        for bad in ["", "-leading", "has space", "x" * 129, "slash/no", "ünï"]:
            with pytest.raises(RpcError) as error:
                await connection.request("session/create", {"sessionId": bad})
            refused.append(error.value)
        kept = await connection.request("session/get", {"sessionId": "team:alice@ticket-12"})
        listed = await connection.request("session/list", {})
    finally:
        await connection.close()

    assert created["sessionId"] == "team:alice@ticket-12"
    assert taken.value.code == ErrorCode.INVALID_PARAMS
    assert taken.value.data["sessionId"] == "team:alice@ticket-12"
    assert "exists already" in taken.value.message
    assert all(e.code == ErrorCode.INVALID_PARAMS for e in refused)
    assert all(e.data["fields"][0]["field"] == "sessionId" for e in refused)
    assert kept["title"] == "first"
    assert [s["sessionId"] for s in listed["sessions"]] == ["team:alice@ticket-12"]


def test_tether_run_with_a_session_id_creates_it_and_then_continues_it(
    project: Path, tmp_path: Path
) -> None:
    database = tmp_path / "sessions.db"
    env = {
        **os.environ,
        "TETHER_SESSIONS_STORE": "sqlite",
        "TETHER_SESSIONS_PATH": str(database),
    }
    answers = []
    for number, text in enumerate(["First answer.", "Second answer."]):
        script = tmp_path / f"script-{number}.json"
        script.write_text(json.dumps([{"text": text}]))
        done = subprocess.run(
            [
                *(sys.executable, "-m", "tether", "run", f"question {number}", "--json"),
                *("--workspace", str(project), "--script", str(script), "--session", "my-id"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        answers.append(done.stdout)

    async def history() -> list[str]:
        store = await SqlStore.open(sqlite_url(database))
        try:
            return [str(m.content) for m in await store.history("my-id")]
        finally:
            await store.aclose()

    assert all('"sessionId": "my-id"' in a or '"sessionId":"my-id"' in a for a in answers)
    assert asyncio.run(history()) == ["question 0", "First answer.", "question 1", "Second answer."]
