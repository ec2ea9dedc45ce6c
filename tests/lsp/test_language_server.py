"""tether as a language server, driven by pytest-lsp's client over the real stdio server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from tether.protocol import ErrorCode

from .conftest import Server


async def request(server: Server, method: str, params: Any) -> Any:
    return await server.client.protocol.send_request_async(method, params)


def notify(server: Server, method: str, params: Any) -> None:
    server.client.protocol.notify(method, params)


def open_document(server: Server, path: Path, text: str) -> str:
    uri = path.as_uri()
    server.client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    return uri


async def execute(server: Server, command: str, *arguments: Any) -> Any:
    return await server.client.workspace_execute_command_async(
        lsp.ExecuteCommandParams(command=command, arguments=list(arguments))
    )


async def ask(server: Server, argument: Any) -> Any:
    return await execute(server, "tether.ask", argument)


async def answered(server: Server, argument: Any) -> tuple[dict[str, Any], str]:
    """``tether.ask`` (answered as its turn starts), then the transcript the turn shows at its
    end (with ``window/showDocument``)."""
    answer = await ask(server, argument)
    assert set(answer) == {"sessionId", "runId"}
    name = f"transcript-{answer['runId']}.md"
    shown = server.client.shown_documents
    await until(lambda: any(doc.uri.endswith(name) for doc in shown))
    [uri] = [doc.uri for doc in shown if doc.uri.endswith(name)]
    return answer, await asyncio.to_thread(local(uri).read_text)


def local(uri: str) -> Path:
    assert uri.startswith("file://")
    return Path(uri.removeprefix("file://"))


def last_turn(transcript: str) -> str:
    return transcript.rsplit("\n## ", 1)[-1]


def reports(server: Server) -> list[str]:
    """The messages of every ``$/progress`` the client got, in order."""
    return [
        value.message
        for values in server.client.progress_reports.values()
        for value in values
        if getattr(value, "message", None)
    ]


def ended(server: Server, count: int = 1) -> bool:
    """Whether ``count`` turns have ended their progress."""
    values = server.client.progress_reports.values()
    return sum(getattr(v, "kind", None) == "end" for vs in values for v in vs) >= count


async def until(condition: Any) -> None:
    """Wait (10 s at most) for what the client's handlers record."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110  (pytest-lsp's handlers set no event)
            await asyncio.sleep(0.02)


async def test_initialize_answers_the_standard_capabilities_beside_tethers(
    server: Server,
) -> None:
    capabilities = server.initialized.capabilities
    sync = capabilities.text_document_sync
    assert (sync.open_close, sync.change, sync.save.include_text) == (
        True,
        lsp.TextDocumentSyncKind.Incremental,
        False,
    )
    assert list(capabilities.execute_command_provider.commands) == [
        "tether.ask",
        "tether.cancel",
        "tether.newSession",
        "tether.undo",
    ]
    assert "quickfix" in capabilities.code_action_provider.code_action_kinds
    folders = capabilities.workspace.workspace_folders
    assert folders.supported is True and folders.change_notifications is True
    raw = await request(server, "session/list", {})  # tether's own methods are there too
    assert raw == {"sessions": []}


async def test_standard_notifications_are_taken_quietly(server: Server) -> None:
    path = server.workspace / "app.py"
    path.write_text("x = 1\n")
    uri = open_document(server, path, "x = 1\n")
    client = server.client
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                lsp.TextDocumentContentChangePartial(
                    range=lsp.Range(lsp.Position(0, 4), lsp.Position(0, 5)), text="2"
                )
            ],
        )
    )
    client.text_document_did_save(
        lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings={}))
    client.workspace_did_change_workspace_folders(
        lsp.DidChangeWorkspaceFoldersParams(
            event=lsp.WorkspaceFoldersChangeEvent(
                added=[lsp.WorkspaceFolder(uri=(server.workspace / "sub").as_uri(), name="sub")],
                removed=[],
            )
        )
    )
    client.set_trace(lsp.SetTraceParams(value=lsp.TraceValue.Off))
    notify(server, "custom/unknownNotification", {"a": 1})
    notify(server, "$/someExtension", {})
    client.text_document_did_close(
        lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri))
    )
    await request(server, "session/list", {})  # everything before it was handled
    assert client.log_messages == []
    assert server.log_lines("WARNING", "ERROR", "CRITICAL") == []


async def test_an_unknown_request_is_method_not_found_and_not_logged(server: Server) -> None:
    with pytest.raises(JsonRpcException) as caught:
        await server.client.text_document_hover_async(
            lsp.HoverParams(
                text_document=lsp.TextDocumentIdentifier(uri=(server.workspace / "a.py").as_uri()),
                position=lsp.Position(0, 0),
            )
        )
    assert caught.value.code == ErrorCode.METHOD_NOT_FOUND
    with pytest.raises(JsonRpcException) as caught:
        await request(server, "custom/nothing", {})
    assert caught.value.code == ErrorCode.METHOD_NOT_FOUND
    assert server.log_lines("WARNING", "ERROR", "CRITICAL") == []


async def test_an_unknown_command_is_invalid_params_naming_the_commands(server: Server) -> None:
    with pytest.raises(JsonRpcException) as caught:
        await execute(server, "nope")
    assert caught.value.code == ErrorCode.INVALID_PARAMS
    assert "tether.ask" in caught.value.message


async def test_code_actions_offer_ask_explain_fix_and_a_fix_per_diagnostic(server: Server) -> None:
    uri = (server.workspace / "app.py").as_uri()
    diagnostic = lsp.Diagnostic(
        range=lsp.Range(lsp.Position(1, 0), lsp.Position(1, 3)),
        message="undefined name 'foo'",
        source="pyflakes",
    )
    actions = await server.client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(lsp.Position(0, 0), lsp.Position(2, 0)),
            context=lsp.CodeActionContext(diagnostics=[diagnostic]),
        )
    )
    titles = [a.title for a in actions]
    assert titles == ["Fix: undefined name 'foo'", "Ask tether…", "Explain", "Fix"]
    assert {a.command.command for a in actions} == {"tether.ask"}
    fix = actions[0].command.arguments[0]
    assert fix["action"] == "fix" and fix["diagnostics"][0]["message"] == "undefined name 'foo'"


@pytest.mark.parametrize("script", [[{"text": "Looks fine."}]])
async def test_the_custom_commands_are_code_actions_run_on_the_selection(server: Server) -> None:
    commands = server.workspace / ".tether" / "commands"
    commands.mkdir(parents=True)
    (commands / "review.md").write_text(
        "---\ndescription: Review for bugs\n---\nReview this code: $ARGUMENTS\n"
    )
    path = server.workspace / "app.py"
    path.write_text("import os\nx = 1\n")
    uri = open_document(server, path, "import os\nx = 1\n")
    actions = await server.client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(lsp.Position(1, 0), lsp.Position(2, 0)),
            context=lsp.CodeActionContext(diagnostics=[]),
        )
    )
    [review] = [a for a in actions if a.kind == "source.tether.command"]
    assert review.title == "/review: Review for bugs"
    answer, _ = await answered(server, review.command.arguments[0])
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    [asked] = [m for m in messages["messages"] if m["role"] == "user"]
    assert asked["metadata"]["command"]["name"] == "review"
    text = asked["content"] if isinstance(asked["content"], str) else asked["content"][0]["text"]
    assert text.startswith("Review this code: It is about app.py (line 2).")
    assert "```\nx = 1\n```" in text


@pytest.mark.parametrize(
    "script",
    [
        [
            {
                "text": "Let me look.",
                "toolCalls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
            },
            {"text": "It says 2."},
        ]
    ],
)
async def test_the_file_tools_read_the_open_buffer_not_the_disk(server: Server) -> None:
    path = server.workspace / "app.py"
    path.write_text("on_disk = 1\n")
    open_document(server, path, "in_the_buffer = 2\n")
    answer, _ = await answered(server, {"prompt": "What does app.py say?"})  # the turn has ended
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    results = [m for m in messages["messages"] if m["role"] == "tool"]
    assert "in_the_buffer = 2" in str(results) and "on_disk" not in str(results)


@pytest.mark.parametrize(
    "script",
    [
        [
            {
                "text": "Fixing.",
                "toolCalls": [
                    {
                        "name": "edit_file",
                        "arguments": {"path": "app.py", "oldString": "x = 1", "newString": "x = 2"},
                    }
                ],
            },
            {"text": "Done: x is 2 now."},
        ]
    ],
)
async def test_a_fix_asks_with_show_message_request_and_edits_through_apply_edit(
    server: Server,
) -> None:
    path = server.workspace / "app.py"
    path.write_text("import os\nx = 1\n")
    uri = open_document(server, path, "import os\nx = 1\n")
    selection = {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}}
    answer, text = await answered(server, {"action": "fix", "uri": uri, "range": selection})
    (question,) = server.editor.questions
    assert question["message"] == "tether wants to: Edit app.py"
    assert [a["title"] for a in question["actions"]] == ["Allow", "Always allow", "Reject"]
    (edit,) = server.editor.edits
    assert edit["edit"]["changes"] == {
        uri: [
            {
                "range": {"start": {"line": 1, "character": 0}, "end": {"line": 2, "character": 0}},
                "newText": "x = 2\n",
            }
        ]
    }
    assert path.read_text() == "import os\nx = 1\n"  # the editor's buffer changed, not the disk
    (shown,) = server.client.shown_documents
    folder = server.data / "tether" / "sessions" / answer["sessionId"]
    assert local(shown.uri) == folder / f"transcript-{answer['runId']}.md"
    assert "Fix the code selected in app.py (line 2)" in text
    assert "\n- Edit app.py\n\nDone: x is 2 now.\n" in text
    assert "Stopped" not in text
    await until(lambda: ended(server))
    progress = server.client.progress_reports
    (token,) = progress
    kinds = [getattr(v, "kind", None) for v in progress[token]]
    assert kinds[0] == "begin" and kinds[-1] == "end"


@pytest.mark.parametrize(
    "script",
    [
        [
            {
                "toolCalls": [
                    {
                        "name": "edit_file",
                        "arguments": {"path": "app.py", "oldString": "x = 1", "newString": "x = 2"},
                    }
                ]
            },
            {"text": "Left it."},
        ]
    ],
)
async def test_reject_in_show_message_request_refuses_the_call(server: Server) -> None:
    server.editor.answer = "Reject"
    (server.workspace / "app.py").write_text("x = 1\n")
    answer, text = await answered(server, "change x")
    assert server.editor.edits == []
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    assert "rejected by user" in str(messages)
    assert "\n- Edit app.py — rejected\n\nLeft it.\n" in text
    await until(lambda: ended(server))
    assert "rejected: Edit app.py" in reports(server)


@pytest.mark.parametrize(
    "options", [{"tools": {"mcpServers": [{"name": "github", "command": "/no/such-mcp-server"}]}}]
)
@pytest.mark.parametrize("script", [[{"text": "Hello."}]])
async def test_an_mcp_server_that_did_not_start_is_told_with_show_message(server: Server) -> None:
    _, transcript = await answered(server, "hi")
    [told] = [m for m in server.client.messages if "no/such-mcp-server" in m.message]
    assert told.type == lsp.MessageType.Warning and told.message.startswith("tether: ")
    assert "Hello." in last_turn(transcript) and "such-mcp" not in transcript


@pytest.mark.parametrize("script", [[{"text": "thinking for a long time", "delay": 30}]])
async def test_work_done_progress_cancel_stops_the_turn(server: Server) -> None:
    turn = asyncio.ensure_future(answered(server, "take your time"))
    progress = server.client.progress_reports
    await until(lambda: any(progress.values()))
    (token,) = progress
    server.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    async with asyncio.timeout(10):
        _, text = await turn
    assert last_turn(text).endswith("*Stopped: cancelled.*\n\n")
    assert progress[token][-1].kind == "end"
    assert progress[token][-1].message == "cancelled"


@pytest.mark.parametrize("script", [[{"text": "thinking for a long time", "delay": 30}]])
async def test_work_done_progress_cancel_stops_a_kernel_run_on_the_clients_token(
    server: Server,
) -> None:
    session = await request(server, "session/create", {})
    server.client.progress_reports["mine"] = []
    run = asyncio.ensure_future(
        request(
            server,
            "kernel/run",
            {"sessionId": session["sessionId"], "prompt": "hi", "workDoneToken": "mine"},
        )
    )
    await until(lambda: server.client.progress_reports["mine"])
    server.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token="mine"))
    async with asyncio.timeout(10):
        result = await run
    assert result["stopReason"] == "cancelled"


@pytest.mark.parametrize("script", [[{"text": "thinking for a long time", "delay": 30}]])
async def test_the_cancel_command_stops_the_turn(server: Server) -> None:
    turn = asyncio.ensure_future(answered(server, "take your time"))
    await until(lambda: any(server.client.progress_reports.values()))
    assert await execute(server, "tether.cancel") == {"cancelled": True}
    async with asyncio.timeout(10):
        _, text = await turn
    assert "*Stopped: cancelled.*" in last_turn(text)


@pytest.mark.parametrize("script", [[{"text": "thinking", "delay": 30}, {"text": "next"}]])
async def test_the_session_takes_the_next_ask_as_soon_as_the_cancel_command_answers(
    server: Server,
) -> None:
    first = await ask(server, "take your time")
    await until(lambda: any(server.client.progress_reports.values()))
    assert await execute(server, "tether.cancel") == {"cancelled": True}
    async with asyncio.timeout(10):
        again, text = await answered(server, "and now this")
    assert again["sessionId"] == first["sessionId"]
    first_turn, second_turn = text.split("\n## ")[1:]
    assert "*Stopped: cancelled.*" in first_turn
    assert "next" in second_turn and "Stopped" not in second_turn


async def test_new_session_makes_the_next_turns_run_in_a_new_session(server: Server) -> None:
    first = await execute(server, "tether.newSession")
    second = await execute(server, "tether.newSession")
    assert first["sessionId"] != second["sessionId"]
    listed = await request(server, "session/list", {})
    assert {s["sessionId"] for s in listed["sessions"]} == {first["sessionId"], second["sessionId"]}


async def test_tethers_warnings_reach_the_client_as_log_messages(server: Server) -> None:
    from pygls.protocol import JsonRPCResponseMessage

    stray = JsonRPCResponseMessage(id="nobody-asked", result=None, jsonrpc="2.0")
    server.client.protocol._send_data(stray)  # an answer to no request of the server's
    await until(lambda: server.client.log_messages)
    (message,) = server.client.log_messages
    assert message.type == lsp.MessageType.Warning
    assert "dropped a response to no request of ours" in message.message


@pytest.mark.parametrize("script", [[{"text": "thinking for a long time", "delay": 30}]])
async def test_a_second_ask_while_a_turn_runs_is_session_busy(server: Server) -> None:
    turn = asyncio.ensure_future(answered(server, "take your time"))
    await until(lambda: any(server.client.progress_reports.values()))
    with pytest.raises(JsonRpcException) as caught:
        await ask(server, "and this too")
    assert caught.value.code == ErrorCode.SESSION_BUSY
    assert await execute(server, "tether.cancel") == {"cancelled": True}
    async with asyncio.timeout(10):
        _, text = await turn
    assert "*Stopped: cancelled.*" in last_turn(text)


EDIT_X = {
    "toolCalls": [
        {
            "name": "edit_file",
            "arguments": {"path": "app.py", "oldString": "x = 1", "newString": "x = 2"},
        }
    ]
}


@pytest.mark.parametrize("options", [{"lsp": {"applyEditTimeout": 1}}])
@pytest.mark.parametrize("script", [[EDIT_X, {"text": "The editor did not take it."}]])
async def test_an_edit_the_client_never_answers_fails_the_call_after_the_timeout(
    server: Server,
) -> None:
    server.editor.answers_edits = False
    (server.workspace / "app.py").write_text("x = 1\n")
    async with asyncio.timeout(30):  # a bound on the test: the call gives up after 1 s
        answer, text = await answered(server, "change x")
    assert "Stopped" not in text
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    [result] = [m for m in messages["messages"] if m["role"] == "tool"]
    assert result["isError"]
    assert (
        "did not answer workspace/applyEdit within 1 s (lsp.apply_edit_timeout)"
        in (result["content"])
    )
    await until(lambda: server.editor.withdrawn)  # told with $/cancelRequest
    assert server.editor.withdrawn == server.editor.edits


@pytest.mark.parametrize("script", [[EDIT_X, {"text": "The editor did not take it."}]])
async def test_the_edit_bound_of_a_turn_is_its_session_folders_which_may_shorten_it(
    server: Server, tmp_path: Path
) -> None:
    server.editor.answers_edits = False  # the default folder keeps the 30 s of the default
    second = tmp_path / "second"
    (second / ".tether").mkdir(parents=True)
    (second / ".tether" / "config.toml").write_text("[lsp]\napply_edit_timeout = 1\n")
    (second / "app.py").write_text("x = 1\n")
    server.client.workspace_did_change_workspace_folders(
        lsp.DidChangeWorkspaceFoldersParams(
            event=lsp.WorkspaceFoldersChangeEvent(
                added=[lsp.WorkspaceFolder(uri=second.as_uri(), name="second")], removed=[]
            )
        )
    )
    async with asyncio.timeout(20):  # a bound on the test: the call gives up after 1 s
        answer, _ = await answered(
            server, {"prompt": "change x", "uri": (second / "app.py").as_uri()}
        )
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    [result] = [m for m in messages["messages"] if m["role"] == "tool"]
    assert result["isError"]
    assert "within 1 s (lsp.apply_edit_timeout)" in result["content"]


@pytest.mark.parametrize("script", [[EDIT_X, {"text": "Still here."}]])
async def test_the_cancel_command_ends_a_turn_waiting_for_an_edit_at_once(server: Server) -> None:
    server.editor.answers_edits = False  # and lsp.apply_edit_timeout is its 30 s
    (server.workspace / "app.py").write_text("x = 1\n")
    turn = asyncio.ensure_future(answered(server, "change x"))
    await until(lambda: server.editor.edits)
    assert await execute(server, "tether.cancel") == {"cancelled": True}
    async with asyncio.timeout(10):
        answer, text = await turn
    assert "- Edit app.py — failed" in text and "*Stopped: cancelled.*" in last_turn(text)
    await until(lambda: server.editor.withdrawn)
    messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
    [result] = [m for m in messages["messages"] if m["role"] == "tool"]
    assert result["isError"] and "the call was cancelled while it waited" in result["content"]
    async with asyncio.timeout(10):
        again, text = await answered(server, "are you there?")
    assert again["sessionId"] == answer["sessionId"]
    assert "Still here." in last_turn(text) and "Stopped" not in last_turn(text)


READ_APP = {"toolCalls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}


@pytest.mark.parametrize("script", [[READ_APP, {"text": "one"}, READ_APP, {"text": "two"}]])
async def test_a_turn_on_a_document_of_another_folder_runs_in_that_folder_with_its_config(
    server: Server, tmp_path: Path
) -> None:
    second = tmp_path / "second"
    (second / ".tether").mkdir(parents=True)
    (second / ".tether" / "config.toml").write_text('[tools]\nenabled = ["list_files"]\n')
    for folder in (second, server.workspace):
        (folder / "app.py").write_text("x = 1\n")
    server.client.workspace_did_change_workspace_folders(
        lsp.DidChangeWorkspaceFoldersParams(
            event=lsp.WorkspaceFoldersChangeEvent(
                added=[lsp.WorkspaceFolder(uri=second.as_uri(), name="second")], removed=[]
            )
        )
    )
    results = {}
    for folder in (second, server.workspace):
        answer, _ = await answered(
            server, {"prompt": "read it", "uri": (folder / "app.py").as_uri()}
        )
        session = await request(server, "session/get", {"sessionId": answer["sessionId"]})
        assert session["workspace"] == folder.as_uri()
        messages = await request(server, "session/messages", {"sessionId": answer["sessionId"]})
        [result] = [m for m in messages["messages"] if m["role"] == "tool"]
        results[folder.name] = result
    assert results["second"]["isError"] and "not available" in str(results["second"]["content"])
    assert not results["project"].get("isError") and "x = 1" in str(results["project"]["content"])
    fresh = await execute(server, "tether.newSession", {"uri": (second / "app.py").as_uri()})
    session = await request(server, "session/get", {"sessionId": fresh["sessionId"]})
    assert session["workspace"] == second.as_uri()


@pytest.mark.parametrize("script", [[{"text": "thinking for a long time", "delay": 30}]])
async def test_a_turn_still_running_when_the_editor_leaves_is_stopped_and_recorded(
    server: Server,
) -> None:
    answer = await ask(server, "take your time")
    await until(lambda: any(server.client.progress_reports.values()))
    async with asyncio.timeout(20):  # the server exits without waiting for the model
        await server.client.shutdown_session()
    server.client.capabilities = None  # shut down already: the fixture's teardown skips it
    folder = server.data / "tether" / "sessions" / answer["sessionId"]
    transcript = await asyncio.to_thread((folder / "transcript.md").read_text)
    assert last_turn(transcript).endswith("*Stopped: cancelled.*\n\n")
    assert server.log_lines("WARNING", "ERROR") == []
