"""``_tether/rewind`` through the real ``tether acp``: tether's ``session/rewind`` as an extension
method; without ``messageId``, the undo of the last turn that changed files."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp import RequestError, text_block

from tests.acp.conftest import Setup
from tether.testing import tool_call


async def test_rewind_without_a_message_undoes_the_last_turns_files(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {
                "toolCalls": [
                    tool_call("write_file", "w1", path="notes/new.txt", content="hi\n"),
                    tool_call(
                        "edit_file", "e1", path="src/app.py", old_string="42", new_string="43"
                    ),
                ]
            },
            {"text": "Done."},
        ],
        approval="auto",
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Change")])
        assert (project / "src" / "app.py").read_text() == "def main():\n    return 43\n"

        undone = await agent.request("_tether/rewind", {"sessionId": session.session_id})
        assert undone == {
            "restored": ["src/app.py"],
            "removed": ["notes/new.txt"],
            "messagesRemoved": 0,
        }
        assert (project / "src" / "app.py").read_text() == "def main():\n    return 42\n"
        assert not (project / "notes").exists()

        with pytest.raises(RequestError) as not_a_prompt:
            await agent.request(
                "_tether/rewind", {"sessionId": session.session_id, "messageId": "no-such"}
            )
        assert not_a_prompt.value.code == -32602


async def test_the_undo_command_answers_what_it_restored(setup: Setup, project: Path) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="notes/new.txt", content="hi\n")]},
            {"text": "Done."},
        ],
        approval="auto",
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        await agent.conn.prompt(session_id=sid, prompt=[text_block("Write")])
        assert (project / "notes" / "new.txt").exists()
        response = await agent.conn.prompt(session_id=sid, prompt=[text_block("/undo")])
        updates = agent.wire.updates(sid)

    assert response.stop_reason == "end_turn"
    chunks = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert chunks[-1] == "Undid the changes of the last turn to the files:\n- removed notes/new.txt"
    assert not (project / "notes").exists()
