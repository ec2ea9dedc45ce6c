"""A prompt turn through the real ``tether acp``: streamed text, tool calls, permission, cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from acp import text_block
from acp.schema import ClientCapabilities, Implementation

from tests.acp.conftest import Setup, until
from tether.testing import tool_call


async def test_initialize_negotiates_version_1_and_declares_what_is_served(setup: Setup) -> None:
    setup.script([])
    async with setup.agent(initialize=False) as agent:
        answer = await agent.conn.initialize(
            protocol_version=7,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="test", version="1"),
        )
    assert answer.protocol_version == 1
    assert answer.agent_info is not None and answer.agent_info.name == "tether"
    capabilities = answer.agent_capabilities
    assert capabilities is not None and capabilities.load_session is True
    assert (
        capabilities.prompt_capabilities.image and capabilities.prompt_capabilities.embedded_context
    )
    assert not capabilities.prompt_capabilities.audio
    assert capabilities.mcp_capabilities.http and capabilities.mcp_capabilities.sse
    sessions = capabilities.session_capabilities
    assert sessions.list is not None and sessions.delete is not None
    assert sessions.resume is not None and sessions.close is not None
    assert answer.auth_methods == []


async def test_a_prompt_streams_text_and_a_read_file_call_then_ends_the_turn(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {
                "text": "Let me look.",
                "toolCalls": [tool_call("read_file", "c1", path="src/app.py")],
            },
            {"text": "main returns 42."},
        ]
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.conn.prompt(
            session_id=session.session_id, prompt=[text_block("What does main return?")]
        )
        updates = agent.wire.updates(session.session_id)
    assert answer.stop_reason == "end_turn"
    chunks = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert "".join(chunks) == "Let me look.main returns 42."
    [start] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert start == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c1",
        "title": "Read src/app.py",
        "kind": "read",
        "status": "pending",
        "rawInput": {"path": "src/app.py"},
        "locations": [{"path": str(project / "src" / "app.py")}],
    }
    progress = [u for u in updates if u["sessionUpdate"] == "tool_call_update"]
    assert [u["status"] for u in progress] == ["in_progress", "completed"]
    [content] = progress[-1]["content"]
    assert content["type"] == "content" and "return 42" in content["content"]["text"]
    assert "return 42" in progress[-1]["rawOutput"]
    [info] = [u for u in updates if u["sessionUpdate"] == "session_info_update"]
    assert info["title"] == "What does main return?"


async def test_text_images_links_and_embedded_files_reach_the_model(
    setup: Setup, project: Path
) -> None:
    setup.script([{"text": "Seen."}])
    png = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5"
        "ErkJggg=="
    )
    prompt = [
        {"type": "text", "text": "Look at these"},
        {"type": "image", "mimeType": "image/png", "data": png},
        {"type": "resource_link", "uri": "file:///x/README.md", "name": "README.md"},
        {
            "type": "resource",
            "resource": {"uri": "file:///x/notes.txt", "text": "remember the milk"},
        },
    ]
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.request(
            "session/prompt", {"sessionId": session.session_id, "prompt": prompt}
        )
        load = await agent.request(
            "session/load", {"sessionId": session.session_id, "cwd": str(project), "mcpServers": []}
        )
        replayed = agent.wire.updates(session.session_id)
    assert answer == {"stopReason": "end_turn"}
    assert "modes" in load
    user = [u["content"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
    assert user[0] == {"type": "text", "text": "Look at these"}
    assert user[1] == {"type": "image", "mimeType": "image/png", "data": png}
    assert user[2] == {"type": "resource_link", "uri": "file:///x/README.md", "name": "README.md"}
    assert "remember the milk" in user[3]["text"] and "file:///x/notes.txt" in user[3]["text"]


@pytest.mark.parametrize(
    ("option", "written", "status"),
    [("allow_once", True, "completed"), ("reject_once", False, "failed")],
)
async def test_a_write_asks_permission_and_the_answer_decides(
    setup: Setup, project: Path, option: str, written: bool, status: str
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="notes/new.txt", content="hi\n")]},
            {"text": "Done."},
        ]
    )
    async with setup.agent() as agent:
        agent.client.answers = [option]
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.conn.prompt(
            session_id=session.session_id, prompt=[text_block("Write a note")]
        )
        updates = agent.wire.updates(session.session_id)
        [question] = agent.wire.received("session/request_permission")
    assert answer.stop_reason == "end_turn"
    params = question["params"]
    assert params["toolCall"]["toolCallId"] == "w1"
    assert params["toolCall"]["title"] == "Write notes/new.txt"
    assert params["toolCall"]["kind"] == "edit"
    assert [o["kind"] for o in params["options"]] == [
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    ]
    proposed = {"type": "diff", "path": str(project / "notes" / "new.txt"), "newText": "hi\n"}
    assert params["toolCall"]["content"] == [proposed]  # asked with the change it makes
    [pending] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert (pending["status"], pending["content"]) == ("pending", [proposed])
    assert (project / "notes" / "new.txt").exists() is written
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    assert last["status"] == status
    if written:
        diff = [c for c in last["content"] if c["type"] == "diff"]
        assert diff == [proposed]
    else:
        assert last["content"][0]["content"]["text"] == "rejected by user"


async def test_an_edit_shows_the_whole_file_before_and_after(setup: Setup, project: Path) -> None:
    setup.script(
        [
            {
                "toolCalls": [
                    tool_call("edit_file", "e1", path="src/app.py", oldString="42", newString="43")
                ]
            },
            {"text": "Changed."},
        ],
        approval="auto",
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("bump")])
        updates = agent.wire.updates(session.session_id)
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    whole = {
        "type": "diff",
        "path": str(project / "src" / "app.py"),
        "oldText": "def main():\n    return 42\n",
        "newText": "def main():\n    return 43\n",
    }
    [text, diff] = last["content"]
    assert diff == whole
    # one diff per update: the text and the raw output say what was done, without it again
    assert (
        text["content"]["text"] == last["rawOutput"] == "edited src/app.py: replaced 1 occurrence"
    )
    [pending] = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert pending["content"] == [whole]


async def test_always_answers_are_remembered_for_the_session(setup: Setup, project: Path) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="a.txt", content="a")]},
            {"toolCalls": [tool_call("write_file", "w2", path="b.txt", content="b")]},
            {"toolCalls": [tool_call("run_command", "r1", command="true")]},
            {"toolCalls": [tool_call("run_command", "r2", command="true")]},
            {"text": "Done."},
        ]
    )
    async with setup.agent() as agent:
        agent.client.answers = ["allow_always", "reject_always"]
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
        asked = [
            q["params"]["toolCall"]["toolCallId"]
            for q in agent.wire.received("session/request_permission")
        ]
        updates = agent.wire.updates(session.session_id)
    assert asked == ["w1", "r1"]
    assert (project / "b.txt").read_text() == "b"
    final = {
        u["toolCallId"]: u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update"
    }
    assert final == {"w1": "completed", "w2": "completed", "r1": "failed", "r2": "failed"}


async def test_cancel_stops_a_streaming_turn_which_answers_cancelled_and_the_next_prompt_runs(
    setup: Setup, project: Path
) -> None:
    setup.script([{"text": "Thinking about it for a long while", "delay": 60}, {"text": "Next."}])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        turn = asyncio.ensure_future(
            agent.conn.prompt(session_id=session.session_id, prompt=[text_block("think")])
        )
        await until(agent.client.chunk)
        await agent.conn.cancel(session_id=session.session_id)
        answer = await asyncio.wait_for(turn, 20)
        again = await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert (answer.stop_reason, again.stop_reason) == ("cancelled", "end_turn")


async def test_cancel_while_permission_is_pending_answers_cancelled_and_runs_nothing(
    setup: Setup, project: Path
) -> None:
    setup.script([{"toolCalls": [tool_call("write_file", "w1", path="x.txt", content="x")]}])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        turn = asyncio.ensure_future(
            agent.conn.prompt(session_id=session.session_id, prompt=[text_block("w")])
        )
        await until(agent.client.asked)
        await agent.conn.cancel(session_id=session.session_id)
        answer = await asyncio.wait_for(turn, 20)
        agent.client.release.set()  # the editor answers the withdrawn question "cancelled"
        updates = agent.wire.updates(session.session_id)
    assert answer.stop_reason == "cancelled"
    assert not (project / "x.txt").exists()
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    assert last["toolCallId"] == "w1" and last["status"] == "failed"


async def test_read_only_mode_offers_only_reading_tools(setup: Setup, project: Path) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="x.txt", content="x")]},
            {"text": "I cannot write."},
        ],
        approval="auto",
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        assert session.modes is not None and session.modes.current_mode_id == "ask"
        await agent.conn.set_session_mode(session_id=session.session_id, mode_id="read_only")
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("w")])
        updates = agent.wire.updates(session.session_id)
    assert not (project / "x.txt").exists()
    last = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1]
    assert last["status"] == "failed" and "not available" in last["rawOutput"]


async def test_accept_edits_mode_writes_without_asking(setup: Setup, project: Path) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "w1", path="x.txt", content="x")]},
            {"text": "Written."},
        ]
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.set_session_mode(session_id=session.session_id, mode_id="accept_edits")
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("w")])
        asked = agent.wire.received("session/request_permission")
    assert asked == []
    assert (project / "x.txt").read_text() == "x"


async def test_read_file_reads_the_editors_buffer_when_the_client_offers_it(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {
                "toolCalls": [
                    tool_call("read_file", "r1", path="src/app.py"),
                    tool_call("read_file", "r2", path="README.md"),
                    tool_call("read_file", "r3", path="../outside.txt"),
                    tool_call("read_file", "r4", path="notes.txt"),
                ]
            },
            {"text": "Read."},
        ]
    )
    (project / "notes.txt").write_text("on disk only\n")
    app, readme = str(project / "src" / "app.py"), str(project / "README.md")
    buffers = {app: "def main():\n    return 43  # unsaved\n", readme: "# Demo\nA small project.\n"}
    async with setup.agent(buffers=buffers) as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("read")])
        updates = agent.wire.updates(session.session_id)
        reads = agent.client.reads
    results = {
        u["toolCallId"]: (u["status"], u["rawOutput"])
        for u in updates
        if u["sessionUpdate"] == "tool_call_update" and "rawOutput" in u
    }
    assert results["r1"][0] == "completed"
    assert results["r1"][1].startswith("1\tdef main():\n2\t    return 43  # unsaved\n[")
    assert "unsaved changes" in results["r1"][1]
    assert results["r2"] == ("completed", "1\t# Demo\n2\tA small project.")  # as saved
    assert results["r3"][0] == "failed"
    assert results["r4"] == ("completed", "1\ton disk only")  # no buffer: the disk
    assert sorted(reads) == sorted([app, readme, str(project / "notes.txt")])  # nothing outside


async def test_a_protected_write_is_asked_about_with_its_reason_even_under_auto(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {"toolCalls": [tool_call("write_file", "p1", path=".git/hooks/x", content="x")]},
            {"text": "Done."},
        ],
        approval="auto",
    )
    async with setup.agent() as agent:
        agent.client.answers = ["reject_once"]
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("w")])
        [question] = agent.wire.received("session/request_permission")
    [content, diff] = question["params"]["toolCall"]["content"]
    assert content["content"]["text"].startswith("Needs your approval: ")
    assert diff == {"type": "diff", "path": str(project / ".git/hooks/x"), "newText": "x"}
    assert not (project / ".git" / "hooks" / "x").exists()


async def test_a_broken_workspace_config_is_reported_in_the_turn(
    setup: Setup, project: Path
) -> None:
    setup.script([{"text": "Hello."}])
    (project / ".tether").mkdir()
    (project / ".tether" / "config.toml").write_text("this is not toml [")
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("hi")])
        updates = agent.wire.updates(session.session_id)
        [notice] = agent.wire.received("_tether/notice")
    assert answer.stop_reason == "end_turn"
    text = "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text == "Hello."  # the warning is no part of the answer
    params = notice["params"]
    assert (params["sessionId"], params["level"]) == (session.session_id, "warning")
    assert params["message"].startswith("the workspace config file was left out")


async def test_a_turn_reports_the_tokens_it_used_and_the_context_size(
    setup: Setup, project: Path
) -> None:
    setup.script(
        [
            {
                "toolCalls": [tool_call("read_file", "c1", path="src/app.py")],
                "usage": {"inputTokens": 100, "outputTokens": 20},
            },
            {"text": "done", "usage": {"inputTokens": 150, "outputTokens": 30}},
        ],
        more="[context]\nmax_tokens = 8000\n",
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Read it")])
        updates = agent.wire.updates(session.session_id)
    [usage] = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert usage == {"sessionUpdate": "usage_update", "used": 300, "size": 8000}


async def test_no_usage_update_is_sent_without_a_context_size(setup: Setup, project: Path) -> None:
    setup.script([{"text": "done", "usage": {"inputTokens": 10, "outputTokens": 2}}])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("Hi")])
        updates = agent.wire.updates(session.session_id)
    assert all(u["sessionUpdate"] != "usage_update" for u in updates)


async def test_a_session_follows_the_config_of_its_own_cwd_not_the_agents(
    setup: Setup, project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    (other / "src").mkdir(parents=True)
    (other / "src" / "app.py").write_text("def main():\n    return 7\n")
    (other / ".tether").mkdir()
    (other / ".tether" / "config.toml").write_text('[tools]\nenabled = ["list_files"]\n')
    read = {"toolCalls": [tool_call("read_file", "c1", path="src/app.py")]}
    setup.script([read, {"text": "one"}, read, {"text": "two"}])
    outputs = []
    async with setup.agent() as agent:  # started in project, whose config enables everything
        for cwd in (other, project):
            session = await agent.conn.new_session(cwd=str(cwd), mcp_servers=[])
            await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("read")])
            updates = agent.wire.updates(session.session_id)
            [last] = [u for u in updates if u["sessionUpdate"] == "tool_call_update"][-1:]
            outputs.append((last["status"], last["rawOutput"]))
    assert outputs[0][0] == "failed" and "not available" in outputs[0][1]
    assert outputs[1][0] == "completed" and "return 42" in outputs[1][1]
