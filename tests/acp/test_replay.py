"""``session/load`` in a second real ``tether acp`` replays what the live turns showed: the
answers' text (a cancelled one's too), each tool call with the kind it had live, each edit's
diff once, and each turn's usage, as the official SDK client folds them into a transcript."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp import text_block

from tether.testing import tool_call

from .conftest import Setup, until


@pytest.fixture
def durable(setup: Setup, tmp_path: Path) -> Setup:
    setup.env["TETHER_SESSIONS_STORE"] = "sqlite"
    setup.env["TETHER_SESSIONS_PATH"] = str(tmp_path / "sessions.db")
    return setup


def transcript(updates: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a client shows once ``updates`` are applied: each message's text (by message id),
    each tool call as its last update leaves it, the usage lines, in order of appearance. The
    user's messages (shown by the client itself live) and session info are left out."""
    entries: dict[tuple[str, str], Any] = {}
    usage: list[tuple[Any, ...]] = []
    for update in updates:
        kind = update["sessionUpdate"]
        if kind == "agent_message_chunk":
            key = ("text", update["messageId"])
            entries[key] = entries.get(key, "") + update["content"]["text"]
        elif kind in {"tool_call", "tool_call_update"}:
            key = ("tool", update["toolCallId"])
            fields = {k: v for k, v in update.items() if k != "sessionUpdate"}
            entries[key] = {**entries.get(key, {}), **fields}
        elif kind == "usage_update":
            usage.append((update["used"], update["size"]))
    return [(*key, value) for key, value in entries.items()] + [("usage", *u) for u in usage]


async def test_a_loaded_session_replays_what_the_live_turns_showed(
    durable: Setup, project: Path
) -> None:
    edit = tool_call("edit_file", "e1", path="src/app.py", oldString="42", newString="43")
    durable.script(
        [
            {"text": "Editing.", "toolCalls": [edit, tool_call("state_get", "s1")]},
            {"text": "Done.", "usage": {"inputTokens": 40, "outputTokens": 2}},
            {"text": "Thinking about it for a long while", "delay": 60},
        ],
        approval="auto",
        more="[context]\nmax_tokens = 100000\n",
    )
    async with durable.agent() as first:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        await first.conn.prompt(session_id=sid, prompt=[text_block("Make it 43")])
        first.client.chunk.clear()
        turn = asyncio.ensure_future(first.conn.prompt(session_id=sid, prompt=[text_block("?")]))
        await until(first.client.chunk)
        await first.conn.cancel(session_id=sid)
        assert (await asyncio.wait_for(turn, 20)).stop_reason == "cancelled"
        live = first.wire.updates(sid)
    async with durable.agent() as second:
        await second.conn.load_session(cwd=str(project), session_id=sid)
        replayed = second.wire.updates(sid)

    shown = transcript(live)
    assert transcript(replayed) == shown
    texts = [entry[2] for entry in shown if entry[0] == "text"]
    assert texts[:2] == ["Editing.", "Done."] and texts[2].startswith("Thinking")
    tools = {entry[1]: entry[2] for entry in shown if entry[0] == "tool"}
    assert (tools["e1"]["kind"], tools["s1"]["kind"]) == ("edit", "read")
    assert [c["type"] for c in tools["e1"]["content"]] == ["content", "diff"]
    assert ("usage", 42, 100000) in shown
    users = [u for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
    assert [u["content"]["text"] for u in users] == ["Make it 43", "?"]
    assert all(u.get("messageId") for u in users)
