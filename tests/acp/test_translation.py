"""What the ACP face translates, in-process: tool titles and locations, an edit's diff as the old
and new text, prompt content, MCP server entries, kernel events as updates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.acp.content import prompt_content
from tether.acp.models import (
    EmbeddedResource,
    HttpServer,
    ImageContent,
    NameValue,
    ResourceContents,
    StdioServer,
    TextContent,
)
from tether.acp.servers import mcp_servers
from tether.acp.tool_calls import diff_content, locations, title
from tether.acp.updates import NOTICE, RunUpdates
from tether.protocol import InvalidParams, TextBlock
from tether.protocol.kernel import Notice, ProgressParams, ToolCallStatus, ToolCallUpdate
from tether.tools.writing import unified_diff

from .conftest import validator


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("read_file", {"path": "src/app.py"}, "Read src/app.py"),
        ("read_file", {"path": "a.py", "startLine": 3, "endLine": 9}, "Read a.py (lines 3-9)"),
        ("list_files", {"glob": "*.py"}, "List . (*.py)"),
        ("search_text", {"pattern": "TODO", "path": "src"}, "Search 'TODO' in src"),
        ("write_file", {"path": "n.txt", "content": "x"}, "Write n.txt"),
        ("edit_file", {"path": "n.txt"}, "Edit n.txt"),
        ("run_command", {"command": ["pytest", "-q"]}, "Run pytest -q"),
        ("run_command", {"command": "make  test\n"}, "Run make test"),
        ("github__create_issue", {}, "github: create_issue"),
        ("mystery", "not an object", "mystery"),
    ],
)
def test_a_tool_call_has_a_title_a_person_reads(
    name: str, arguments: object, expected: str
) -> None:
    assert title(name, arguments) == expected


def test_file_tools_locate_their_file_in_the_workspace(tmp_path: Path) -> None:
    [read] = locations("read_file", {"path": "a.py", "startLine": 7}, tmp_path) or []
    assert (read.path, read.line) == (str(tmp_path / "a.py"), 7)
    assert locations("run_command", {"command": "ls"}, tmp_path) is None
    assert locations("read_file", {"path": "a.py"}, None) is None


lines = st.lists(st.sampled_from(["a", "b", "c", "", "d\r", "é"]), max_size=12)


@given(old=lines, new=lines, old_end=st.booleans(), new_end=st.booleans())
def test_an_edits_diff_gives_back_the_whole_old_and_new_file(
    tmp_path_factory: pytest.TempPathFactory,
    old: list[str],
    new: list[str],
    old_end: bool,
    new_end: bool,
) -> None:
    before = "\n".join(old) + ("\n" if old_end and old else "")
    after = "\n".join(new) + ("\n" if new_end and new else "")
    diff = unified_diff("dir/f.txt", before.encode(), after.encode())
    if diff is None:
        return
    workspace = tmp_path_factory.mktemp("ws")
    (workspace / "dir").mkdir()
    (workspace / "dir" / "f.txt").write_bytes(after.encode())
    content = diff_content(diff, workspace)
    assert content is not None
    assert (content.path, content.old_text, content.new_text) == (
        str(workspace / "dir" / "f.txt"),
        before,
        after,
    )


def test_a_new_file_has_no_old_text_and_a_changed_file_shows_the_hunks(tmp_path: Path) -> None:
    created = unified_diff("n.txt", None, b"one\ntwo\n")
    assert created is not None
    (tmp_path / "n.txt").write_text("one\ntwo\n")
    content = diff_content(created, tmp_path)
    assert content is not None and content.old_text is None and content.new_text == "one\ntwo\n"
    changed = unified_diff("n.txt", b"one\ntwo\n", b"one\n2\n")
    assert changed is not None
    (tmp_path / "n.txt").write_text("something else entirely\n")  # changed again since
    content = diff_content(changed, tmp_path)
    assert content is not None
    assert (content.old_text, content.new_text) == ("one\ntwo\n", "one\n2\n")


def test_a_diff_of_a_file_that_became_a_fifo_shows_the_hunks_without_opening_it(
    tmp_path: Path,
) -> None:
    changed = unified_diff("n.txt", b"one\ntwo\n", b"one\n2\n")
    assert changed is not None
    os.mkfifo(tmp_path / "n.txt")  # reading it would wait for a writer forever
    content = diff_content(changed, tmp_path)
    assert content is not None
    assert (content.old_text, content.new_text) == ("one\ntwo\n", "one\n2\n")


def test_prompt_blocks_become_tether_content() -> None:
    blocks = prompt_content(
        [
            TextContent(type="text", text="hi"),
            EmbeddedResource(
                type="resource", resource=ResourceContents(uri="file:///a.txt", text="body")
            ),
            EmbeddedResource(
                type="resource",
                resource=ResourceContents(uri="file:///b.bin", blob="AAAA", mime_type="x/y"),
            ),
        ]
    )
    assert blocks[0] == TextBlock(text="hi")
    assert isinstance(blocks[1], TextBlock) and "body" in blocks[1].text
    assert isinstance(blocks[2], TextBlock) and "not shown" in blocks[2].text
    with pytest.raises(InvalidParams) as bad:
        prompt_content([ImageContent(type="image", mime_type="image/png", data="not base64!")])
    assert bad.value.data["fields"][0]["field"] == "prompt.0"


def test_acp_mcp_servers_of_each_type_become_tether_servers_with_names_that_fit() -> None:
    specs = mcp_servers(
        [
            StdioServer(
                name="my server",
                command="srv",
                args=["-v"],
                env=[NameValue(name="A", value="1")],
            ),
            HttpServer(
                type="http",
                name="my server",
                url="https://example.invalid/mcp",
                headers=[NameValue(name="Authorization", value="Bearer x")],
            ),
            HttpServer(type="sse", name="old", url="https://example.invalid/sse"),
        ]
    )
    assert specs is not None
    assert [(s.name, s.command, s.args, s.env) for s in specs[:1]] == [
        ("my_server", "srv", ["-v"], {"A": "1"})
    ]
    assert (specs[1].name, specs[1].url, specs[1].headers, specs[1].transport) == (
        "my_server_2",
        "https://example.invalid/mcp",
        {"Authorization": "Bearer x"},
        None,
    )
    assert (specs[2].name, specs[2].url, specs[2].transport) == (
        "old",
        "https://example.invalid/sse",
        "sse",
    )


def test_a_cancelled_call_is_reported_failed_and_progress_lines_accumulate() -> None:
    sent: list[dict[str, object]] = []
    updates = RunUpdates(send=lambda update: sent.append(update.to_wire()), workspace=None)

    def event(**fields: object) -> None:
        updates(
            ProgressParams(
                session_id="s", run_id="r", seq=1, event=ToolCallUpdate(tool_call_id="c", **fields)
            )
        )

    event(status=ToolCallStatus.IN_PROGRESS, progress="step 1")
    event(status=ToolCallStatus.IN_PROGRESS, progress="step 2")
    event(status=ToolCallStatus.CANCELLED)
    assert [u["content"][0]["content"]["text"] for u in sent] == [
        "step 1",
        "step 1\nstep 2",
        "cancelled",
    ]
    assert sent[-1]["status"] == "failed"


def _compaction_events(compaction: bool) -> list[dict[str, object]]:
    from tether.protocol.kernel import CompactionFinished, CompactionStarted

    sent: list[dict[str, object]] = []
    updates = RunUpdates(
        send=lambda update: sent.append(update.to_wire()), workspace=None, compaction=compaction
    )
    for event in (
        CompactionStarted(messages=40, tokens=900),
        CompactionFinished(message_id="m1", messages=40, summary="They fixed the parser."),
        CompactionStarted(messages=50, tokens=1000),
        CompactionFinished(messages=50, error="overloaded"),
    ):
        updates(ProgressParams(session_id="s", run_id="r", seq=1, event=event))
    return sent


def test_compaction_events_are_compaction_updates_for_a_client_that_takes_them() -> None:
    from .conftest import validator

    sent = _compaction_events(True)
    assert sent == [
        {"sessionUpdate": "compaction_update", "compactionId": "r-1", "status": "in_progress"},
        {
            "sessionUpdate": "compaction_update",
            "compactionId": "r-1",
            "status": "completed",
            "summary": [{"type": "text", "text": "They fixed the parser."}],
        },
        {"sessionUpdate": "compaction_update", "compactionId": "r-2", "status": "in_progress"},
        {
            "sessionUpdate": "compaction_update",
            "compactionId": "r-2",
            "status": "failed",
            "error": "overloaded",
        },
    ]
    for update in sent:
        notification = {"sessionId": "s", "update": update}
        assert not list(validator("SessionNotification").iter_errors(notification))


def test_compaction_events_send_nothing_to_a_client_that_did_not_advertise_them() -> None:
    assert _compaction_events(False) == []


def test_a_replayed_compaction_is_an_update_or_left_out() -> None:
    from tether.acp.updates import replay
    from tether.protocol import CompactedRange, Message, Role
    from tether.sessions.ids import utcnow

    span = CompactedRange(first_id="a", last_id="b", count=2)
    summary = Message(
        id="m1",
        role=Role.USER,
        content="sum",
        kind="compaction",
        replaces=span,
        created_at=utcnow(),
    )
    assert list(replay([summary], None)) == []
    [update] = list(replay([summary], None, compaction=True))
    assert update.to_wire() == {
        "sessionUpdate": "compaction_update",
        "compactionId": "m1",
        "status": "completed",
        "summary": [{"type": "text", "text": "sum"}],
    }


@pytest.mark.parametrize(
    ("capabilities", "takes"),
    [({"session": {"compaction": {}}}, True), ({"session": {}}, False), ({}, False)],
)
def test_a_client_takes_compaction_updates_when_it_advertises_session_compaction(
    capabilities: dict[str, object], takes: bool
) -> None:
    from tether.acp.models import InitializeRequest

    request = InitializeRequest.model_validate(
        {"protocolVersion": 1, "clientCapabilities": capabilities}
    )
    assert request.client_capabilities.compaction is takes


@pytest.mark.parametrize("takes", [True, False])
def test_a_notice_is_a_notice_update_or_an_extension_notification_never_an_agent_message(
    takes: bool,
) -> None:
    sent: list[dict[str, object]] = []
    notified: list[tuple[str, dict[str, object]]] = []
    updates = RunUpdates(
        send=lambda update: sent.append(update.to_wire()),
        workspace=None,
        notices=takes,
        notify=lambda method, params: notified.append((method, params)),
    )
    message = "MCP server 'gh' is not running (it failed to start: gone)"
    notice = Notice(message=message, data={"source": "MCP server 'gh'", "reason": "gone"})
    updates(ProgressParams(session_id="s", run_id="r", seq=2, event=notice))
    if takes:
        assert sent == [{"sessionUpdate": "notice", "severity": "warning", "title": message}]
        assert notified == []
        notification = {"sessionId": "s", "update": sent[0]}
        assert not list(validator("SessionNotification").iter_errors(notification))
    else:
        assert sent == []
        assert notified == [
            (
                "_tether/notice",
                {"sessionId": "s", "level": "warning", "message": message, "data": notice.data},
            )
        ]


@pytest.mark.parametrize("extensions", [False, True], ids=["plain client", "every extension"])
def test_every_kind_of_event_is_translated_into_valid_updates(
    project: Path, extensions: bool
) -> None:
    from tests.events import every_progress

    sent: list[dict[str, object]] = []
    notified: list[tuple[str, dict[str, object]]] = []
    updates = RunUpdates(
        send=lambda update: sent.append(update.to_wire()),
        workspace=project,
        compaction=extensions,
        notices=extensions,
        notify=lambda method, params: notified.append((method, params)),
    )
    for progress in every_progress():
        updates(progress)
    kinds = [update["sessionUpdate"] for update in sent]
    assert {
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
    } <= set(kinds)
    assert ("compaction_update" in kinds) is extensions
    assert ("notice" in kinds) is extensions
    assert [method for method, _ in notified] == ([] if extensions else [NOTICE, NOTICE])
    for update in sent:
        notification = {"sessionId": "s", "update": update}
        assert not list(validator("SessionNotification", unstable=True).iter_errors(notification))


def test_a_replayed_answer_gives_its_kept_reasoning_as_a_thought_first() -> None:
    from tether.acp.updates import replay
    from tether.protocol import Message, Role
    from tether.sessions.ids import utcnow

    from .conftest import validator

    answer = Message(
        id="m2",
        role=Role.ASSISTANT,
        content="Hello.",
        metadata={"reasoning": "They greet me."},
        created_at=utcnow(),
    )
    sent = [update.to_wire() for update in replay([answer], None)]
    assert sent == [
        {
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "They greet me."},
            "messageId": "m2",
        },
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "Hello."},
            "messageId": "m2",
        },
    ]
    for update in sent:
        notification = {"sessionId": "s", "update": update}
        assert not list(validator("SessionNotification").iter_errors(notification))
