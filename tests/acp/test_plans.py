"""The session plan through the real ``tether acp``: each ``update_plan`` is a ``plan`` update
(valid against the ACP schema, as every message these tests receive), and ``session/load``
shows the plan as it is after the replayed history."""

from __future__ import annotations

from pathlib import Path

from acp import text_block

from tether.testing import tool_call

from .conftest import Setup

STEPS = [
    {"content": "Find the bug", "status": "completed", "priority": "high"},
    {"content": "Fix it", "status": "in_progress"},
]


async def test_update_plan_is_a_plan_update_and_a_loaded_session_shows_the_plan(
    setup: Setup, project: Path, tmp_path: Path
) -> None:
    setup.env["TETHER_SESSIONS_STORE"] = "sqlite"
    setup.env["TETHER_SESSIONS_PATH"] = str(tmp_path / "sessions.db")
    setup.script([{"toolCalls": [tool_call("update_plan", "p1", entries=STEPS)]}, {"text": "Ok."}])
    async with setup.agent() as first:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        answer = await first.conn.prompt(session_id=sid, prompt=[text_block("Plan the fix")])
        live = [u for u in first.wire.updates(sid) if u["sessionUpdate"] == "plan"]
        [call] = [u for u in first.wire.updates(sid) if u["sessionUpdate"] == "tool_call"]
    async with setup.agent() as second:
        await second.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        loaded = second.wire.updates(sid)

    assert answer.stop_reason == "end_turn"
    expected = {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "Find the bug", "priority": "high", "status": "completed"},
            {"content": "Fix it", "priority": "medium", "status": "in_progress"},  # ACP needs one
        ],
    }
    assert live == [expected]
    assert call["kind"] == "other"
    kinds = [u["sessionUpdate"] for u in loaded]
    assert [u for u in loaded if u["sessionUpdate"] == "plan"] == [expected]
    assert kinds.index("plan") > max(i for i, k in enumerate(kinds) if k == "agent_message_chunk")
