"""``_tether/rewind`` through the real ``tether acp``: tether's ``session/rewind`` as an extension
method; without ``messageId``, the undo of the last turn that changed files."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from acp import RequestError, text_block

from tests.acp.conftest import Setup
from tests.checkpoints.stalled_git import stalled_git
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


# `tether acp` with SIGTERM's default disposition set in the child: a test run in the background
# may have inherited it ignored, and tether leaves an ignored SIGTERM ignored.
AGENT_TERMINABLE = [
    sys.executable,
    "-c",
    "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
    "from tether.cli import main; sys.exit(main(['acp']))",
]


@pytest.mark.parametrize(("how", "code"), [("end of input", 0), ("SIGTERM", 143)])
async def test_an_agent_that_exits_during_the_first_snapshot_leaves_no_git_behind(
    setup: Setup, project: Path, tmp_path: Path, how: str, code: int
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="notes/new.txt", content="hi\n")]},
            {"text": "Done."},
        ],
        approval="auto",
    )
    stalled = stalled_git(tmp_path / "bin", os.environ["PATH"])
    setup.env = stalled.env()
    try:
        async with setup.agent(argv=AGENT_TERMINABLE) as agent:
            await agent.conn.new_session(cwd=str(project), mcp_servers=[])
            await stalled.stalling()  # the first snapshot is under way, and stays so
            process = agent.process
            if how == "SIGTERM":
                process.send_signal(signal.SIGTERM)
            else:
                assert process.stdin is not None
                process.stdin.close()
            assert await asyncio.wait_for(process.wait(), 20) == code
    finally:
        left = stalled.sweep()
    assert not left  # nothing the agent started is left
    assert not list(setup.home.rglob("index.lock"))
    setup.env = {}
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Write")])
        undone = await agent.request("_tether/rewind", {"sessionId": session.session_id})
        assert undone["removed"] == ["notes/new.txt"]
