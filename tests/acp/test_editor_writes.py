"""``write_file`` and ``edit_file`` through the editor (``fs/write_text_file``) when the client
declares it, after tether's own checks, through the real ``tether acp``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from acp import text_block

from tests.acp.conftest import Agent, Setup, until
from tether.testing import tool_call

APP = "def main():\n    return 42\n"


async def _turn(agent: Agent, project: Path) -> list[dict[str, Any]]:
    session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
    await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Change it")])
    return agent.wire.updates(session.session_id)


def _ended(updates: list[dict[str, Any]]) -> dict[str, Any]:
    [ended] = [
        u
        for u in updates
        if u["sessionUpdate"] == "tool_call_update" and u["status"] in {"completed", "failed"}
    ]
    return ended


async def test_edit_file_edits_the_editors_text_and_the_editor_writes_it(
    setup: Setup, project: Path
) -> None:
    app = str(project / "src" / "app.py")
    unsaved = "def main():\n    # unsaved\n    return 42\n"
    setup.script(
        [
            {
                "toolCalls": [
                    tool_call("edit_file", "e1", path="src/app.py", oldString="42", newString="43")
                ]
            },
            {"text": "done"},
        ],
        approval="auto",
    )
    async with setup.agent(buffers={app: unsaved}, writes=True) as agent:
        updates = await _turn(agent, project)
        writes = agent.client.writes
    expected = "def main():\n    # unsaved\n    return 43\n"
    assert writes == [(app, expected)]
    assert (project / "src" / "app.py").read_text() == APP  # tether did not write the disk
    ended = _ended(updates)
    assert ended["status"] == "completed"
    [diff] = [c for c in ended["content"] if c["type"] == "diff"]
    assert diff == {"type": "diff", "path": app, "oldText": unsaved, "newText": expected}
    assert ended["rawOutput"] == "edited src/app.py: replaced 1 occurrence"  # the diff: once
    [pending] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert pending["content"] == [diff]  # proposed from the editor's text, not the disk's


async def test_write_file_creates_a_file_through_the_editor_only(
    setup: Setup, project: Path
) -> None:
    notes = str(project / "notes.txt")
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="notes.txt", content="hi\n")]},
            {"text": "done"},
        ],
        approval="auto",
    )
    async with setup.agent(writes=True) as agent:
        updates = await _turn(agent, project)
        writes = agent.client.writes
    assert writes == [(notes, "hi\n")]
    assert not (project / "notes.txt").exists()
    ended = _ended(updates)
    assert ended["status"] == "completed" and ended["rawOutput"].startswith("created notes.txt")
    [diff] = [c for c in ended["content"] if c["type"] == "diff"]
    assert diff == {"type": "diff", "path": notes, "newText": "hi\n"}


async def test_an_editor_error_is_the_tools_error_and_the_disk_is_left_alone(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="src/app.py", content="x = 1\n")]},
            {"text": "done"},
        ],
        approval="auto",
    )
    async with setup.agent(writes=True) as agent:
        agent.client.write_error = "the buffer is read-only"
        updates = await _turn(agent, project)
        writes = agent.client.writes
    assert writes == [(str(project / "src" / "app.py"), "x = 1\n")]
    assert (project / "src" / "app.py").read_text() == APP
    ended = _ended(updates)
    assert ended["status"] == "failed"
    assert "the editor did not write" in ended["rawOutput"]
    assert "the buffer is read-only" in ended["rawOutput"]


async def test_the_workspace_checks_come_before_the_editor_is_asked(
    setup: Setup, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    (project / "link.txt").symlink_to(outside)
    setup.script(
        [
            {
                "toolCalls": [
                    tool_call("write_file", "w1", path="../outside.txt", content="x\n"),
                    tool_call("write_file", "w2", path="link.txt", content="x\n"),
                    tool_call("write_file", "w3", path=".git/config", content="x\n"),
                ]
            },
            {"text": "done"},
        ],
        approval="auto",
    )
    async with setup.agent(writes=True) as agent:
        agent.client.answers = ["reject_once"]  # the protected path is asked about
        updates = await _turn(agent, project)
        writes = agent.client.writes
    assert writes == []
    failed = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
    assert {u["toolCallId"] for u in failed if u["status"] == "failed"} == {"w1", "w2", "w3"}
    assert outside.read_text() == "secret\n"


async def test_an_approved_write_to_a_protected_path_goes_to_the_editor(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path=".tether/notes.md", content="n\n")]},
            {"text": "done"},
        ],
        approval="auto",
    )
    async with setup.agent(writes=True) as agent:
        agent.client.answers = ["allow_once"]
        updates = await _turn(agent, project)
        writes = agent.client.writes
        asked = len(agent.client.permission_requests)
    assert asked == 1
    assert writes == [(str(project / ".tether" / "notes.md"), "n\n")]
    assert not (project / ".tether" / "notes.md").exists()
    assert _ended(updates)["status"] == "completed"


async def test_without_the_capability_tether_writes_the_disk(setup: Setup, project: Path) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="notes.txt", content="hi\n")]},
            {"text": "done"},
        ],
        approval="auto",
    )
    async with setup.agent(buffers={}) as agent:
        updates = await _turn(agent, project)
        writes = agent.client.writes
    assert writes == []
    assert (project / "notes.txt").read_text() == "hi\n"
    assert _ended(updates)["status"] == "completed"


WRITE_APP = {"toolCalls": [tool_call("write_file", "w1", path="src/app.py", content="x = 1\n")]}


async def test_a_write_the_editor_never_answers_fails_after_the_request_timeout(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [WRITE_APP, {"text": "done"}], approval="auto", more="[acp]\nrequest_timeout = 1\n"
    )
    async with setup.agent(writes=True) as agent:
        agent.client.write_waits = True
        async with asyncio.timeout(30):  # a bound on the test: the write gives up after 1 s
            updates = await _turn(agent, project)
        agent.client.release.set()
    assert (project / "src" / "app.py").read_text() == APP
    ended = _ended(updates)
    assert ended["status"] == "failed"
    assert (
        "did not answer fs/write_text_file within 1 s (acp.request_timeout)" in (ended["rawOutput"])
    )


EDIT_APP = {
    "toolCalls": [tool_call("edit_file", "e1", path="src/app.py", oldString="42", newString="43")]
}


async def test_an_edit_whose_read_the_editor_never_answers_fails_and_writes_nothing(
    setup: Setup, project: Path
) -> None:
    """The disk may lack the editor's unsaved text: an edit made from it and written to the
    editor's buffer would undo them, so the edit fails instead of reading the disk."""
    setup.script([EDIT_APP, {"text": "done"}], approval="auto", more="[acp]\nrequest_timeout = 1\n")
    app = str(project / "src" / "app.py")
    async with setup.agent(
        buffers={app: "def main():\n    # unsaved\n    return 42\n"}, writes=True
    ) as agent:
        agent.client.read_waits = True
        async with asyncio.timeout(30):  # a bound on the test: the read gives up after 1 s
            updates = await _turn(agent, project)
        agent.client.release.set()
        writes = agent.client.writes
    assert writes == []
    assert (project / "src" / "app.py").read_text() == APP
    ended = _ended(updates)
    assert ended["status"] == "failed"
    assert "did not answer fs/read_text_file within 1 s (acp.request_timeout)" in ended["rawOutput"]
    assert f"{app} was not changed" in ended["rawOutput"]


async def test_a_read_file_the_editor_never_answers_reads_the_disk(
    setup: Setup, project: Path
) -> None:
    read = {"toolCalls": [tool_call("read_file", "r1", path="src/app.py")]}
    setup.script([read, {"text": "done"}], more="[acp]\nrequest_timeout = 1\n")
    async with setup.agent(buffers={}) as agent:
        agent.client.read_waits = True
        async with asyncio.timeout(30):
            updates = await _turn(agent, project)
        agent.client.release.set()
    ended = _ended(updates)
    assert ended["status"] == "completed"
    assert "return 42" in ended["rawOutput"]


async def test_cancel_ends_a_turn_waiting_for_the_editors_write_at_once(
    setup: Setup, project: Path
) -> None:
    setup.script([WRITE_APP, {"text": "done"}], approval="auto")  # the 30 s of the default
    async with setup.agent(writes=True) as agent:
        agent.client.write_waits = True
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        turn = asyncio.ensure_future(
            agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Change it")])
        )
        await until(agent.client.write_asked)
        await agent.conn.cancel(session_id=session.session_id)
        async with asyncio.timeout(10):
            answer = await turn
        agent.client.release.set()
        updates = agent.wire.updates(session.session_id)
    assert answer.stop_reason == "cancelled"
    ended = _ended(updates)
    assert ended["status"] == "failed"
    assert "cancelled while it waited for the editor's answer" in ended["rawOutput"]


async def test_cancel_ends_a_turn_whose_edit_waits_for_the_editors_text_to_propose_its_change(
    setup: Setup, project: Path
) -> None:
    """The change an edit proposes is read from the editor before the call is shown: a cancel
    then ends the turn at once (not after acp.request_timeout), and the call is shown, failed."""
    setup.script([EDIT_APP, {"text": "done"}], approval="auto")  # the 30 s of the default
    app = str(project / "src" / "app.py")
    async with setup.agent(buffers={app: APP}, writes=True) as agent:
        agent.client.read_waits = True
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        turn = asyncio.ensure_future(
            agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Change it")])
        )
        await until(agent.client.read_asked)
        await agent.conn.cancel(session_id=session.session_id)
        async with asyncio.timeout(10):
            answer = await turn
        agent.client.release.set()
        updates = agent.wire.updates(session.session_id)
    assert answer.stop_reason == "cancelled"
    assert agent.client.writes == []
    [started] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert started["toolCallId"] == "e1" and "content" not in started
    assert _ended(updates)["status"] == "failed"
