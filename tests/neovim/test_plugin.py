"""The Neovim plugin, headless, against the real server with the scripted provider."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .conftest import Editor

StartEditor = Callable[..., Editor]


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


def test_the_buffer_shows_the_streamed_answer_and_tool_lines_reach_completed(
    start_editor: StartEditor,
) -> None:
    editor = start_editor(
        [
            {
                "text": "Let me look.",
                "toolCalls": [call("c1", "list_files"), call("c2", "read_file", path="README.md")],
            },
            {"text": "It is a demo project.\nSecond line."},
        ]
    )
    # Record the tool line of each status update as the buffer shows it.
    editor.lua(
        """
        local ui = require('tether.ui')
        local update = ui.tool_update
        _G.tool_lines = {}
        ui.tool_update = function(view, event)
          update(view, event)
          local row = view.tools[event.toolCallId].row
          table.insert(_G.tool_lines, vim.api.nvim_buf_get_lines(view.buf, row, row + 1, false)[1])
        end
        """
    )
    editor.nvim.command("TetherNew demo")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk What is this?")
    editor.wait_text("-- end_turn")

    lines = editor.lines()
    assert lines[0] == "# tether: demo"
    assert "> What is this?" in lines
    assert "Let me look." in lines
    assert "  [completed] list_files {}" in lines
    assert '  [completed] read_file {"path": "README.md"}' in lines
    assert lines.index("  [completed] list_files {}") > lines.index("Let me look.")
    assert lines[-4:] == ["It is a demo project.", "Second line.", "", "-- end_turn (2 iterations)"]
    tool_lines = editor.lua("return _G.tool_lines")
    for line in ("  [in_progress] list_files {}", "  [completed] list_files {}"):
        assert tool_lines.count(line) == 1
    assert tool_lines.index("  [in_progress] list_files {}") < tool_lines.index(
        "  [completed] list_files {}"
    )
    # The buffer is shown in a window, and is a scratch buffer.
    assert editor.lua("return vim.fn.bufwinid(require('tether').buffer()) ~= -1")
    assert editor.lua("return vim.bo[require('tether').buffer()].buftype") == "nofile"
    notes = editor.lua("return _G.notes")
    assert "tether: iteration 1" in notes
    assert "tether: tool read_file" in notes
    assert "tether: run finished: end_turn" in notes


def test_ask_with_a_range_sends_the_selected_lines_as_context(
    start_editor: StartEditor, project: Any
) -> None:
    editor = start_editor([{"text": "Seen."}])
    editor.nvim.command(f"edit {project / 'src' / 'app.py'}")
    editor.nvim.command("1,2TetherAsk Explain")
    editor.wait_text("-- end_turn")
    text = editor.text()
    assert "> Explain" in text
    assert "> src/app.py lines 1-2:" in text
    assert ">     return 42" in text
    # What the server recorded is the same prompt.
    session_id = editor.lua("return require('tether')._state.session.sessionId")
    editor.lua(
        """
        local sid = ...
        _G.history = nil
        require('tether')._state.client:request('session/messages', { sessionId = sid },
          function(err, result) _G.history = result end)
        """,
        session_id,
    )
    editor.wait("_G.history ~= nil")
    messages = editor.lua("return _G.history.messages")
    assert messages[0]["role"] == "user"
    assert messages[0]["content"].startswith("Explain\n\nsrc/app.py lines 1-2:\n```python\n")
    assert "def main():\n    return 42\n```" in messages[0]["content"]


def test_cancel_stops_a_long_run(start_editor: StartEditor) -> None:
    editor = start_editor([{"text": "never", "delay": 30}])
    editor.nvim.command("TetherAsk Take your time")
    editor.wait("require('tether').running()")
    editor.wait_text("> Take your time")
    editor.nvim.command("TetherAsk again")
    editor.wait(
        "vim.tbl_contains(_G.notes,"
        " 'tether: a run is going in this session (:TetherCancel stops it)')"
    )
    editor.nvim.command("TetherCancel")
    editor.wait_text("-- cancelled", timeout_ms=10000)
    assert not editor.lua("return require('tether').running()")
    assert "never" not in editor.lines()


def test_a_permission_request_is_answered_through_vim_ui_select(start_editor: StartEditor) -> None:
    # The server does not send tool/requestPermission yet: the handler the rpc layer calls for it
    # is invoked directly, in a coroutine as the rpc layer does, with vim.ui.select stubbed.
    editor = start_editor([])
    result = editor.lua(
        """
        local pick = ...
        local tether = require('tether')
        _G.prompts, _G.answers = {}, {}
        vim.ui.select = function(items, opts, on_choice)
          local labels = {}
          for _, item in ipairs(items) do table.insert(labels, opts.format_item(item)) end
          table.insert(_G.prompts, { prompt = opts.prompt, labels = labels })
          vim.schedule(function() on_choice(items[pick]) end)
        end
        local params = { sessionId = 's', runId = 'r',
          toolCall = { id = 'c1', name = 'read_file', arguments = '{"path":"a.txt"}' } }
        for i = 1, 2 do
          coroutine.wrap(function()
            table.insert(_G.answers, tether.request_permission(params))
          end)()
        end
        vim.wait(5000, function() return #_G.answers == 2 end, 10)
        return { prompts = _G.prompts, answers = _G.answers }
        """,
        2,
    )
    assert result["prompts"][0] == {
        "prompt": 'tether: run read_file {"path":"a.txt"}?',
        "labels": ["Allow", "Always", "Reject"],
    }
    assert result["answers"][0] == {"outcome": "allow_always"}
    # The second request was asked before the first answer; once "Always" is given, later
    # requests for that tool are allowed without a prompt.
    later = editor.lua(
        """
        local n = #_G.prompts
        local answer
        coroutine.wrap(function()
          answer = require('tether').request_permission({ toolCall = { name = 'read_file' } })
        end)()
        return { answer = answer, prompted = #_G.prompts - n }
        """
    )
    assert later == {"answer": {"outcome": "allow"}, "prompted": 0}


def test_reject_is_the_answer_when_the_prompt_is_dismissed(start_editor: StartEditor) -> None:
    editor = start_editor([])
    answer = editor.lua(
        """
        vim.ui.select = function(items, opts, on_choice)
          vim.schedule(function() on_choice(nil) end)
        end
        local answer
        coroutine.wrap(function()
          answer = require('tether').request_permission({ toolCall = { name = 'list_files' } })
        end)()
        vim.wait(5000, function() return answer ~= nil end, 10)
        return answer
        """
    )
    assert answer == {"outcome": "reject"}


def test_an_allowed_write_file_shows_its_kind_and_its_diff_under_the_tool_line(
    start_editor: StartEditor, project: Any
) -> None:
    editor = start_editor(
        [
            {
                "text": "Writing.",
                "toolCalls": [
                    call("w1", "write_file", path="notes.txt", content="hello\nworld\n"),
                    call("r1", "list_files"),
                ],
            },
            {"text": "Written."},
        ]
    )
    editor.lua(
        """
        _G.prompts = {}
        vim.ui.select = function(items, opts, on_choice)
          table.insert(_G.prompts, opts.prompt)
          vim.schedule(function() on_choice(items[1]) end)
        end
        """
    )
    editor.nvim.command("TetherAsk Write a note")
    editor.wait_text("-- end_turn")
    assert (project / "notes.txt").read_text() == "hello\nworld\n"
    assert editor.lua("return _G.prompts") == [
        'tether: run write_file {"path": "notes.txt", "content": "hello\\nworld\\n"}?'
    ]
    lines = editor.lines()
    tool = '  [completed] (edit) write_file {"path": "notes.txt", "content": "hello\\nworld\\n"}'
    assert tool in lines
    at = lines.index(tool)
    diff = lines[at + 1 : lines.index("    +world") + 1]
    assert diff[:2] == ["    --- /dev/null", "    +++ b/notes.txt"]
    assert diff[2].startswith("    @@ ")
    assert diff[-2:] == ["    +hello", "    +world"]
    # The other call's line moved down under the diff, unmarked (it only reads).
    assert lines[at + len(diff) + 1] == "  [completed] list_files {}"
    assert lines[-3:] == ["Written.", "", "-- end_turn (2 iterations)"]
    groups = editor.lua(
        """
        local buf = require('tether').buffer()
        local ns = vim.api.nvim_create_namespace('tether_diff')
        local groups = {}
        for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
          local line = vim.api.nvim_buf_get_lines(buf, mark[2], mark[2] + 1, false)[1]
          groups[line] = mark[4].hl_group
        end
        return groups
        """
    )
    assert groups["    +hello"] == "DiffAdd"
    assert groups["    +++ b/notes.txt"] == "DiffText"


def test_progress_lines_update_the_tool_line_in_place(start_editor: StartEditor) -> None:
    # No built-in tool reports progress (MCP tools do): the view is fed the events directly.
    editor = start_editor([])
    lines = editor.lua(
        """
        local ui = require('tether.ui')
        local view = ui.view({ sessionId = 'p1', title = 'progress' }, true)
        ui.tool_call(view, { toolCallId = 'c1', name = 'mcp__build', arguments = '{}',
          toolKind = 'execute', status = 'pending' })
        ui.text(view, 'meanwhile')
        ui.tool_update(view, { toolCallId = 'c1', status = 'in_progress' })
        ui.tool_update(view, { toolCallId = 'c1', status = 'in_progress', progress = '1/3' })
        ui.tool_update(view, { toolCallId = 'c1', status = 'in_progress', progress = '2/3' })
        local seen = vim.api.nvim_buf_get_lines(view.buf, 0, -1, false)
        ui.tool_update(view, { toolCallId = 'c1', status = 'completed', result = 'ok' })
        return { seen, vim.api.nvim_buf_get_lines(view.buf, 0, -1, false) }
        """
    )
    assert lines[0] == [
        "# tether: progress",
        "  [in_progress] (execute) mcp__build {} — 2/3",
        "meanwhile",
    ]
    assert lines[1][1] == "  [completed] (execute) mcp__build {}"


def test_a_permission_request_withdrawn_by_a_cancelled_run_is_dropped(
    start_editor: StartEditor, project: Any
) -> None:
    editor = start_editor(
        [{"toolCalls": [call("w2", "write_file", path="never.txt", content="no\n")]}]
    )
    # A user who has not answered yet: the choice is kept for later.
    editor.lua(
        """
        _G.later = nil
        vim.ui.select = function(items, opts, on_choice)
          _G.later = function() on_choice(items[1]) end
        end
        """
    )
    editor.nvim.command("TetherAsk Write it")
    editor.wait("_G.later ~= nil")
    assert "  [pending] (edit) write_file" in editor.text()
    editor.nvim.command("TetherCancel")
    editor.wait_text("-- cancelled", timeout_ms=10000)
    editor.wait(
        "vim.tbl_contains(_G.notes,"
        " 'tether: the permission request for write_file was withdrawn (the run ended)')"
    )
    assert '  [cancelled] (edit) write_file {"path": "never.txt", "content": "no\\n"}' in (
        editor.lines()
    )
    assert editor.lua("return #require('tether')._state.prompts") == 0
    # Answering the stale prompt now does nothing: no error, nothing written, the editor works on.
    notes = len(editor.lua("return _G.notes"))
    editor.lua("_G.later()")
    editor.lua("vim.wait(200)")
    assert not (project / "never.txt").exists()
    assert editor.lua("return _G.notes")[notes:] == []
    assert not editor.lua("return require('tether').running()")


def test_with_two_questions_open_the_cancelled_call_withdraws_the_right_one(
    start_editor: StartEditor,
) -> None:
    # $/cancelRequest names a request id the handler never sees: with two questions open (runs in
    # two sessions), the progress event that settles a call picks the question to drop.
    editor = start_editor([])
    result = editor.lua(
        """
        local tether = require('tether')
        _G.choose, _G.answers = {}, {}
        vim.ui.select = function(items, opts, on_choice)
          table.insert(_G.choose, function() on_choice(items[1]) end)
        end
        for _, n in ipairs({ '1', '2' }) do
          coroutine.wrap(function()
            local result, err = tether.request_permission({ sessionId = 's' .. n, runId = 'r' .. n,
              toolCall = { id = 'c' .. n, name = 'write_file', arguments = '{}' } })
            _G.answers[n] = { result = result, err = err }
          end)()
        end
        vim.wait(2000, function() return #_G.choose == 2 end, 10)
        tether._on_cancel_request({ id = 'tether-2' })
        local open_after_cancel = #tether._state.prompts
        tether._on_progress({ sessionId = 's2', runId = 'r2', seq = 4,
          event = { kind = 'tool_call_update', toolCallId = 'c2', status = 'cancelled' } })
        local withdrawn = _G.answers['2']
        _G.choose[2]()  -- a late choice on the withdrawn prompt: nothing happens
        _G.choose[1]()
        vim.wait(2000, function() return _G.answers['1'] ~= nil end, 10)
        return { open_after_cancel = open_after_cancel, withdrawn = withdrawn,
          answers = _G.answers, open = #tether._state.prompts }
        """
    )
    assert result["open_after_cancel"] == 2
    assert result["withdrawn"]["err"]["code"] == -32800
    assert result["answers"]["2"] == result["withdrawn"]
    assert result["answers"]["1"] == {"result": {"outcome": "allow"}}
    assert result["open"] == 0


def test_sessions_opens_a_transcript_and_fork_reports_what_the_server_answers(
    start_editor: StartEditor,
) -> None:
    editor = start_editor([{"text": "Hello.", "toolCalls": [call("c1", "list_files")]}, {}])
    editor.nvim.command("TetherNew first")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk hi")
    editor.wait_text("-- end_turn")
    # Forget the view, then pick the session again: its transcript comes from session/messages.
    editor.lua(
        """
        local tether = require('tether')
        local buf = tether.buffer()
        vim.api.nvim_buf_delete(buf, { force = true })
        _G.picked = nil
        vim.ui.select = function(items, opts, on_choice)
          _G.picked = opts.format_item(items[1])
          on_choice(items[1])
        end
        """
    )
    editor.nvim.command("TetherSessions")
    editor.wait("_G.picked ~= nil")
    assert editor.lua("return _G.picked").startswith("first  (4 messages, ")
    editor.wait_text("[completed] list_files {}")
    assert editor.lines()[:4] == ["# tether: first", "", "> hi", ""]
    assert "Hello." in editor.lines()
    # the fork becomes the current session; it shares the history and the title
    first_id = editor.lua("return require('tether')._state.session.sessionId")
    editor.nvim.command("TetherFork")
    editor.wait(
        "#vim.tbl_filter(function(n) return n:find('forked into', 1, true) end, _G.notes) > 0"
    )
    assert editor.lua("return require('tether')._state.session.parentSessionId") == first_id
    assert editor.lua("return require('tether')._state.session.title") == "first"


def test_checkhealth_reports_that_the_server_starts(start_editor: StartEditor) -> None:
    editor = start_editor([])
    editor.nvim.command("checkhealth tether")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "server starts: tether" in text
    assert "ERROR" not in text


def test_checkhealth_reports_a_server_that_does_not_start(start_editor: StartEditor) -> None:
    editor = start_editor([])
    editor.lua("require('tether').setup({ cmd = { 'tether-no-such-binary' } })")
    editor.nvim.command("checkhealth tether")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "ERROR" in text and "not executable" in text


def test_rpc_start_uses_the_argument_form_of_the_running_version(
    start_editor: StartEditor,
) -> None:
    # Neovim 0.7 is not always at hand: check the call each form makes, with rpc.start stubbed.
    editor = start_editor([])
    calls = editor.lua(
        """
        local rpc = require('tether.rpc')
        local real_start, real_has = vim.lsp.rpc.start, vim.fn.has
        local calls = {}
        vim.lsp.rpc.start = function(...) table.insert(calls, { ... }); return {} end
        local d, extra = { tag = 'dispatchers' }, { cwd = '/tmp' }
        for _, old in ipairs({ false, true }) do
          vim.fn.has = function(feature)
            if feature == 'nvim-0.10' then return old and 0 or 1 end
            return real_has(feature)
          end
          rpc._rpc_start({ 'python3', '-m', 'tether', 'serve' }, d, extra)
        end
        vim.lsp.rpc.start, vim.fn.has = real_start, real_has
        return calls
        """
    )
    assert calls == [
        [["python3", "-m", "tether", "serve"], {"tag": "dispatchers"}, {"cwd": "/tmp"}],
        ["python3", ["-m", "tether", "serve"], {"tag": "dispatchers"}, {"cwd": "/tmp"}],
    ]
