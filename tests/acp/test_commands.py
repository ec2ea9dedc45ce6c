"""Slash commands through the real ``tether acp``: ``available_commands_update`` after
``session/new`` and ``session/load`` and when the set changes (each valid against the ACP
schema), and a ``/name`` prompt run by the kernel like any prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp import text_block

from tests.acp.conftest import COMMANDS_UPDATE, Agent, Setup, until, validator


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def listed(agent: Agent, session_id: str) -> list[dict[str, Any]]:
    """The commands of the latest ``available_commands_update`` (waited for)."""
    await until(agent.client.commands)
    agent.client.commands.clear()
    [*_, update] = [
        u
        for u in agent.wire.updates(session_id, commands=True)
        if u["sessionUpdate"] == COMMANDS_UPDATE
    ]
    notification = {"sessionId": session_id, "update": update}
    assert list(validator("SessionNotification").iter_errors(notification)) == []
    commands: list[dict[str, Any]] = update["availableCommands"]
    return commands


async def test_commands_are_sent_after_new_and_load_and_again_when_they_change(
    setup: Setup, project: Path
) -> None:
    write(
        setup.home / "config" / "tether" / "commands" / "review.md",
        "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $1.\n",
    )
    setup.script([])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        after_new = await listed(agent, sid)
        await agent.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        after_load = await listed(agent, sid)
        write(project / ".tether" / "commands" / "git" / "commit.md", "Write a commit message.\n")
        await agent.conn.prompt(session_id=sid, prompt=[text_block("/help")])
        changed = await listed(agent, sid)

    assert after_new == after_load
    assert [c["name"] for c in after_new] == [
        "compact",
        "mode",
        "plan",
        "agent",
        "undo",
        "rewind",
        "help",
        "review",
    ]
    review = after_new[-1]
    assert review == {
        "name": "review",
        "description": "Review a file",
        "input": {"hint": "<file>"},
    }
    assert [c["name"] for c in changed] == [
        "compact",
        "mode",
        "plan",
        "agent",
        "undo",
        "rewind",
        "help",
        "git:commit",
        "review",
    ]


async def test_a_mode_command_answers_and_tells_the_client_the_new_mode(
    setup: Setup, project: Path
) -> None:
    setup.script([])  # a model call would fail the turn
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        response = await agent.conn.prompt(session_id=sid, prompt=[text_block("/mode read_only")])
        updates = agent.wire.updates(sid)

    assert response.stop_reason == "end_turn"
    chunks = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert chunks == ["Mode set to read_only."]
    modes = [u["currentModeId"] for u in updates if u["sessionUpdate"] == "current_mode_update"]
    assert modes == ["read_only"]


async def test_a_custom_command_prompt_reaches_the_model_expanded(
    setup: Setup, project: Path
) -> None:
    write(project / ".tether" / "commands" / "explain.md", "Explain $ARGUMENTS in one line.\n")
    setup.script([{"text": "It is a demo."}])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        response = await agent.conn.prompt(
            session_id=sid, prompt=[text_block("/explain README.md")]
        )
        await agent.conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
        updates = agent.wire.updates(sid)

    assert response.stop_reason == "end_turn"
    replayed = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"]
    assert replayed == ["Explain README.md in one line."]


async def test_an_agent_command_lists_the_profiles_and_sets_one(
    setup: Setup, project: Path
) -> None:
    write(
        project / ".tether" / "agents" / "reviewer.md",
        "---\ndescription: Reviews, never edits\n---\nYou review.\n",
    )
    setup.script([])  # a model call would fail the turn
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        shown = await agent.conn.prompt(session_id=sid, prompt=[text_block("/agent")])
        chosen = await agent.conn.prompt(session_id=sid, prompt=[text_block("/agent reviewer")])
        updates = agent.wire.updates(sid)

    assert shown.stop_reason == chosen.stop_reason == "end_turn"
    chunks = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert chunks == [
        "The session runs under none. Agent profiles:\n"
        "- reviewer: Reviews, never edits (workspace)",
        "The session now runs under the agent profile reviewer.",
    ]
