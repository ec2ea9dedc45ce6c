"""The session methods of TetherClient against the real server: typed results, every field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.client import (
    SessionNotFoundError,
    TetherClient,
    workspace_uri,
)
from tether.protocol import InitializeResult, Message, MessageInput, Role, Session, ToolCall
from tether.testing import tool_call

from .conftest import script, uri_of


async def test_spawn_initializes_and_close_shuts_the_server_down(project: Path, tmp_path: Path):
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, [])) as client:
        info = client.initialize_result
        assert isinstance(info, InitializeResult)
        assert info.server_info.name == "tether"
        assert {"session/create", "kernel/run", "kernel/cancel"} <= set(info.capabilities.methods)
        assert client.returncode is None
    assert client.returncode == 0


async def test_spawn_can_be_awaited_and_closed_by_hand(project: Path):
    client = await TetherClient.spawn(workspace=str(project))
    try:
        session = await client.create_session()
    finally:
        assert await client.close() == 0
    assert session.workspace == uri_of(project)


async def test_create_get_and_list_sessions(project: Path, tmp_path: Path):
    other = tmp_path / "other"
    other.mkdir()
    async with TetherClient.spawn(workspace=project) as client:
        created = await client.create_session(
            title="t",
            agent_id="agent-1",
            model="m",
            system_prompt="be brief",
            settings={"thinkingLevel": "low"},
            metadata={"k": [1]},
            tools=["read_file"],
        )
        elsewhere = await client.create_session(workspace=other)
        got = await client.get_session(created.session_id)
        everything = await client.list_sessions()
        first = await client.list_sessions(limit=1)
        second = await client.list_sessions(limit=1, cursor=first.next_cursor)
        in_other = await client.list_sessions(workspace=other)
        by_uri = await client.list_sessions(workspace=workspace_uri(other))

    assert isinstance(created, Session) and got == created
    assert (created.title, created.agent_id, created.model) == ("t", "agent-1", "m")
    assert created.system_prompt == "be brief" and created.tools == ["read_file"]
    assert created.settings == {"thinkingLevel": "low"} and created.metadata == {"k": [1]}
    assert created.workspace == uri_of(project) and created.running is False
    assert elsewhere.workspace == uri_of(other)
    assert [s.session_id for s in everything.sessions] == [
        elsewhere.session_id,
        created.session_id,
    ]
    assert everything.next_cursor is None
    assert [s.session_id for s in first.sessions + second.sessions] == [
        s.session_id for s in everything.sessions
    ]
    assert first.next_cursor is not None and second.next_cursor is None
    assert [s.session_id for s in in_other.sessions] == [elsewhere.session_id]
    assert by_uri == in_other


async def test_append_and_page_through_messages(project: Path):
    async with TetherClient.spawn(workspace=project) as client:
        sid = (await client.create_session()).session_id
        appended = await client.append(
            sid,
            [
                MessageInput(role=Role.USER, content="hello"),
                {
                    "role": "assistant",
                    "toolCalls": [{"id": "c1", "name": "list_files", "arguments": {}}],
                },
                {"role": "tool", "toolCallId": "c1", "content": "README.md"},
                {"role": "assistant", "content": "done", "author": "me"},
            ],
        )
        everything = await client.messages(sid)
        page = await client.messages(sid, limit=3)
        rest = await client.messages(sid, limit=3, cursor=page.next_cursor)
        newest = await client.messages(sid, limit=1, order="desc")
        session = await client.get_session(sid)

    assert all(isinstance(m, Message) for m in appended)
    assert [m.role for m in appended] == ["user", "assistant", "tool", "assistant"]
    assert appended[1].tool_calls == [ToolCall(id="c1", name="list_files", arguments="{}")]
    assert appended[3].author == "me"
    assert everything.messages == appended and everything.total == 4
    assert page.messages + rest.messages == appended and rest.next_cursor is None
    assert newest.messages == [appended[3]]
    assert session.message_count == 4


async def test_configure_leaves_out_what_is_not_given_and_clears_what_is_none(project: Path):
    async with TetherClient.spawn(workspace=project) as client:
        sid = (await client.create_session(title="a", model="m", tools=["read_file"])).session_id
        renamed = await client.configure(sid, title="b", settings={"x": 1})
        cleared = await client.configure(sid, model=None, tools=None, metadata={"m": True})
        untouched = await client.configure(sid)

    assert (renamed.title, renamed.model, renamed.tools) == ("b", "m", ["read_file"])
    assert renamed.settings == {"x": 1}
    assert (cleared.title, cleared.model, cleared.tools) == ("b", None, None)
    assert cleared.metadata == {"m": True} and cleared.settings == {"x": 1}
    assert untouched.model_dump(exclude={"updated_at"}) == cleared.model_dump(
        exclude={"updated_at"}
    )


async def test_clear_keeps_the_session_and_delete_removes_it(project: Path):
    async with TetherClient.spawn(workspace=project) as client:
        sid = (await client.create_session(title="kept")).session_id
        await client.append(sid, [{"role": "user", "content": "hi"}])
        cleared = await client.clear(sid)
        total = (await client.messages(sid)).total
        assert await client.delete(sid) is None
        with pytest.raises(SessionNotFoundError) as raised:
            await client.get_session(sid)

    assert cleared.title == "kept" and cleared.message_count == 0 and total == 0
    assert raised.value.session_id == sid


async def test_fork_makes_a_session_that_shares_the_history(project: Path):
    async with TetherClient.spawn(workspace=project) as client:
        sid = (await client.create_session(title="main")).session_id
        await client.append(sid, [{"role": "user", "content": "hello"}])
        fork = await client.fork(sid, title="branch")
        messages = await client.messages(fork.session_id)
    assert (fork.parent_session_id, fork.title, fork.message_count) == (sid, "branch", 1)
    assert [m.content for m in messages.messages] == ["hello"]


async def test_the_raw_request_escape_hatch_returns_plain_json(project: Path):
    async with TetherClient.spawn(workspace=project) as client:
        created = await client.request("session/create", {"title": "raw"})
        typed = await client.get_session(created["sessionId"])
    assert typed.title == "raw" and created["title"] == "raw"


async def test_checkpoints_and_rewind_put_a_turns_files_back(project: Path, tmp_path: Path):
    turns = [
        {"toolCalls": [tool_call("write_file", "w1", path="made.txt", content="made\n")]},
        {"text": "done"},
    ]
    options = script(tmp_path, turns)
    options["tools"] = {"approval": "auto"}
    options["checkpoints"] = {"path": str(tmp_path / "checkpoints")}
    async with TetherClient.spawn(workspace=project, options=options) as client:
        session = await client.create_session()
        await client.run(session.session_id, "make a file")
        [checkpoint] = await client.checkpoints(session.session_id)
        assert checkpoint.files == ["made.txt"]
        rewound = await client.rewind(session.session_id, checkpoint.message_id, history=True)
        assert (rewound.restored, rewound.removed) == ([], ["made.txt"])
        assert rewound.messages_removed == 4
        assert await client.checkpoints(session.session_id) == []
    assert not (project / "made.txt").exists()
