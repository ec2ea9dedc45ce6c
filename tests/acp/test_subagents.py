"""A ``task`` sub-agent through the real ``tether acp``: shown as the task's tool call, whose
content streams what the sub-agent does, its questions asked in the session the client knows."""

from __future__ import annotations

from pathlib import Path

from acp import text_block

from tests.acp.conftest import Setup
from tether.testing import tool_call


async def test_a_sub_agent_streams_into_its_task_call_and_asks_in_the_client_s_session(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {
                "toolCalls": [
                    tool_call("task", "t1", prompt="Write the note", description="Note writer")
                ]
            },
            {"toolCalls": [tool_call("write_file", "w1", path="notes/new.txt", content="hi\n")]},
            {"text": "Wrote the note."},
            {"text": "Done."},
        ]
    )
    async with setup.agent() as agent:
        agent.client.answers = ["allow_once"]
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        answer = await agent.conn.prompt(session_id=sid, prompt=[text_block("Write a note")])
        updates = agent.wire.updates()
        [question] = agent.wire.received("session/request_permission")
    assert answer.stop_reason == "end_turn"
    assert {m["params"]["sessionId"] for m in agent.wire.received("session/update")} == {sid}
    assert question["params"]["sessionId"] == sid
    assert question["params"]["toolCall"]["toolCallId"] == "w1"
    assert (project / "notes" / "new.txt").read_text() == "hi\n"

    [start] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert (start["toolCallId"], start["title"]) == ("t1", "Task: Note writer")
    progress = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
    assert all(u["toolCallId"] == "t1" for u in progress)  # the sub-agent's calls are text
    shown = [
        u["content"][0]["content"]["text"]
        for u in progress
        if u["status"] == "in_progress" and "content" in u
    ]
    assert any("→ Write notes/new.txt" in text for text in shown)
    assert "→ Write notes/new.txt\nWrote the note." in shown[-1]
    assert progress[-1]["status"] == "completed"
    assert progress[-1]["rawOutput"] == "Wrote the note."
    chunks = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert "".join(chunks) == "Done."  # the sub-agent's answer is no message of the agent
