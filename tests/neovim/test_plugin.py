"""The Neovim plugin, headless, against the real server with the scripted provider, on Neovim 0.11
and on Neovim 0.7 (Debian's): every permission question here is a real ``tool/requestPermission``
from ``tether serve`` answered through the plugin's rpc client."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .conftest import Editor

StartEditor = Callable[..., Editor]


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


# A user who answers every permission question with the button of that label, and what was shown.
ANSWER_WITH = """
local label = ...
_G.questions = {}
vim.ui.select = function(items, opts, on_choice)
  local labels = {}
  for _, item in ipairs(items) do table.insert(labels, opts.format_item(item)) end
  local buf = require('tether').buffer()
  local floats = {}
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    local config = vim.api.nvim_win_get_config(win)
    if config.relative ~= '' then
      local row = config.row
      if type(row) == 'table' then row = row[false] end -- 0.7 reports {[false] = row}
      local fbuf = vim.api.nvim_win_get_buf(win)
      table.insert(floats, { lines = vim.api.nvim_buf_get_lines(fbuf, 0, -1, false),
        row = row, height = config.height, filetype = vim.bo[fbuf].filetype })
    end
  end
  table.insert(_G.questions, { prompt = opts.prompt, labels = labels, kind = opts.kind,
    buffer = vim.api.nvim_buf_get_lines(buf, 0, -1, false), floats = floats, lines = vim.o.lines })
  vim.schedule(function()
    for _, item in ipairs(items) do
      if opts.format_item(item) == label then return on_choice(item) end
    end
    on_choice(nil)
  end)
end
"""

FLOATS = (
    "return #vim.tbl_filter(function(w) return vim.api.nvim_win_get_config(w).relative ~= '' end,"
    " vim.api.nvim_list_wins())"
)

WRITE_NOTES = call("w1", "write_file", path="notes.txt", content="hello\nworld\n")


def send_from_prompt_area(editor: Editor, text: str) -> None:
    """Type into the chat buffer's prompt area (its last line) and press <CR> in normal mode."""
    editor.lua(
        "local win = vim.fn.bufwinid(require('tether').buffer()) vim.api.nvim_set_current_win(win)"
    )
    editor.nvim.input("Go" + text + "<Esc><CR>")


def test_the_chat_buffer_shows_the_streamed_answer_titles_and_folded_tool_output(
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
    editor.nvim.command("TetherNew demo")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk What is this?")
    editor.wait_text("-- end_turn")

    lines = editor.transcript()
    assert lines[:4] == ["# tether: demo", "", "> What is this?", ""]
    assert lines[4] == "Let me look."
    assert lines[5] == "  [completed] List ."
    read = lines.index("  [completed] Read README.md")
    assert lines[read + 1 : read + 3] == ["    1\t# Demo", "    2\tA small project."]
    assert lines[-4:] == ["It is a demo project.", "Second line.", "", "-- end_turn (2 iterations)"]
    assert editor.prompt_area() == [""]
    # Each tool's output is a closed fold under its tool line; the other lines are not folded.
    folds = editor.lua(
        """
        local read = ...
        local win = vim.fn.bufwinid(require('tether').buffer())
        return vim.api.nvim_win_call(win, function()
          return { vim.fn.foldclosed(read + 2), vim.fn.foldclosed(read + 3),
            vim.fn.foldclosed(read + 1), vim.fn.foldclosed(read + 4), vim.fn.foldlevel(read + 2) }
        end)
        """,
        read,
    )
    assert folds == [read + 2, read + 2, -1, -1, 1]
    assert editor.lua("return vim.fn.bufwinid(require('tether').buffer()) ~= -1")
    assert editor.lua("return vim.bo[require('tether').buffer()].buftype") == "nofile"
    notes = editor.lua("return _G.notes")
    assert "tether: iteration 1" in notes
    assert "tether: tool Read README.md" in notes
    assert "tether: run finished: end_turn" in notes


def test_a_follow_up_typed_in_the_prompt_area_is_sent_with_enter(
    start_editor: StartEditor,
) -> None:
    editor = start_editor([{"text": "First answer."}, {"text": "Second answer."}])
    editor.nvim.command("TetherChat")
    editor.wait("require('tether').buffer() ~= nil")
    send_from_prompt_area(editor, "first question")
    editor.wait_text("-- end_turn")
    send_from_prompt_area(editor, "and a follow-up")
    editor.wait(
        "#vim.tbl_filter(function(n) return n == 'tether: run finished: end_turn' end,"
        " _G.notes) == 2"
    )
    lines = editor.transcript()
    assert lines[1:] == [
        "",
        "> first question",
        "",
        "First answer.",
        "",
        "-- end_turn (1 iteration)",
        "",
        "> and a follow-up",
        "",
        "Second answer.",
        "",
        "-- end_turn (1 iteration)",
    ]
    assert editor.prompt_area() == [""]
    users = [m["content"] for m in editor.history() if m["role"] == "user"]
    assert users == ["first question", "and a follow-up"]
    # <CR> with an empty prompt area sends nothing.
    editor.nvim.input("<CR>")
    editor.wait("vim.tbl_contains(_G.notes, 'tether: type a message under the prompt line first')")


def test_ask_with_a_range_sends_the_selected_lines_as_context(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor([{"text": "Seen."}])
    editor.nvim.command(f"edit {project / 'src' / 'app.py'}")
    editor.nvim.command("1,2TetherAsk Explain")
    editor.wait_text("-- end_turn")
    text = "\n".join(editor.transcript())
    assert "> Explain" in text
    assert "> src/app.py lines 1-2:" in text
    assert ">     return 42" in text
    messages = editor.history()
    assert messages[0]["role"] == "user"
    assert messages[0]["content"].startswith("Explain\n\nsrc/app.py lines 1-2:\n```python\n")
    assert "def main():\n    return 42\n```" in messages[0]["content"]


def test_cancel_stops_a_long_run(start_editor: StartEditor) -> None:
    # The first word streams, then the turn waits 30 s: the run is surely going on the server.
    editor = start_editor([{"text": "Thinking slowly", "delay": 30}])
    editor.nvim.command("TetherAsk Take your time")
    editor.wait("require('tether').running()")
    editor.wait_text("Thinking")
    editor.nvim.command("TetherAsk again")
    editor.wait(
        "vim.tbl_contains(_G.notes,"
        " 'tether: a run is going in this session (:TetherCancel stops it)')"
    )
    editor.nvim.command("TetherCancel")
    editor.wait_text("-- cancelled", timeout_ms=10000)
    assert not editor.lua("return require('tether').running()")
    assert "slowly" not in editor.text()


def test_an_allowed_write_is_asked_with_its_title_and_diff_and_then_runs(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(
        [
            {"text": "Writing.", "toolCalls": [WRITE_NOTES, call("r1", "list_files")]},
            {"text": "Written."},
        ]
    )
    editor.lua(ANSWER_WITH, "Allow")
    editor.nvim.command("TetherAsk Write a note")
    editor.wait_text("-- end_turn")
    assert (project / "notes.txt").read_text() == "hello\nworld\n"
    [question] = editor.lua("return _G.questions")
    assert question["prompt"] == "tether: Write notes.txt?"
    assert question["labels"] == ["Allow", "Always allow", "Reject", "Always reject"]
    assert question["kind"] == "tether.permission"
    # While the user decides, the diff the write would make is under its tool line.
    asked = question["buffer"]
    at = asked.index("  [pending] Write notes.txt")
    assert asked[at + 1 : at + 3] == ["    --- /dev/null", "    +++ b/notes.txt"]
    assert asked[at + 3].startswith("    @@ ")
    assert asked[at + 4 : at + 6] == ["    +hello", "    +world"]
    # And in a float at the top, above the rows the question takes at the bottom of the screen.
    [shown] = question["floats"]
    assert shown["lines"][0] == "Write notes.txt — proposed change"
    assert shown["lines"][1:3] == ["--- /dev/null", "+++ b/notes.txt"]
    assert shown["lines"][4:] == ["+hello", "+world"]
    assert shown["filetype"] == "diff"
    # Its border included, it ends above the prompt, the four choices, "Type number" and the
    # command line.
    assert shown["row"] + shown["height"] + 2 <= question["lines"] - 1 - 4 - 2
    # Closed with the answer.
    assert editor.lua(FLOATS) == 0
    # Once it ran, the server's diff is there, highlighted; the other call's line is under it.
    lines = editor.transcript()
    at = lines.index("  [completed] Write notes.txt")
    assert lines[at + 1 : at + 3] == ["    --- /dev/null", "    +++ b/notes.txt"]
    assert lines[at + 4 : at + 7] == ["    +hello", "    +world", "  [completed] List ."]
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
    assert groups["    +hello"] == "TetherDiffAdd"
    assert groups["    +++ b/notes.txt"] == "TetherDiffHeader"


def test_an_edit_is_asked_with_the_diff_of_the_change_it_would_make(
    start_editor: StartEditor, project: Path
) -> None:
    edit = call("e1", "edit_file", path="src/app.py", oldString="return 42", newString="return 7")
    editor = start_editor([{"toolCalls": [edit]}, {"text": "Edited."}])
    editor.lua(ANSWER_WITH, "Allow")
    editor.nvim.command("TetherAsk Change it")
    editor.wait_text("-- end_turn")
    assert (project / "src" / "app.py").read_text() == "def main():\n    return 7\n"
    [question] = editor.lua("return _G.questions")
    assert question["prompt"] == "tether: Edit src/app.py?"
    asked = question["buffer"]
    at = asked.index("  [pending] Edit src/app.py")
    assert asked[at + 1 : at + 3] == ["    --- a/src/app.py", "    +++ b/src/app.py"]
    assert "    -    return 42" in asked[at + 3 : at + 8]
    assert "    +    return 7" in asked[at + 3 : at + 8]
    [shown] = question["floats"]
    assert shown["lines"][:3] == [
        "Edit src/app.py — proposed change",
        "--- a/src/app.py",
        "+++ b/src/app.py",
    ]
    assert "-    return 42" in shown["lines"] and "+    return 7" in shown["lines"]


def test_an_edit_that_will_fail_is_asked_without_a_diff(start_editor: StartEditor) -> None:
    edit = call("e1", "edit_file", path="src/app.py", oldString="not there", newString="x")
    editor = start_editor([{"toolCalls": [edit]}, {"text": "Oh."}])
    editor.lua(ANSWER_WITH, "Allow")
    editor.nvim.command("TetherAsk Change it")
    editor.wait_text("-- end_turn")
    [question] = editor.lua("return _G.questions")
    assert question["floats"] == []
    at = question["buffer"].index("  [pending] Edit src/app.py")
    assert not question["buffer"][at + 1].startswith("    ---")


def test_always_reject_refuses_later_calls_of_the_tool_without_asking(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(
        [
            {"toolCalls": [call("a", "write_file", path="a.txt", content="a\n")]},
            {"toolCalls": [call("b", "write_file", path="b.txt", content="b\n")]},
            {"text": "Neither."},
        ]
    )
    editor.lua(ANSWER_WITH, "Always reject")
    editor.nvim.command("TetherAsk Write two")
    editor.wait_text("-- end_turn")
    assert [q["prompt"] for q in editor.lua("return _G.questions")] == ["tether: Write a.txt?"]
    assert not (project / "a.txt").exists() and not (project / "b.txt").exists()
    failed = [line for line in editor.transcript() if line.startswith("  [failed] Write ")]
    assert len(failed) == 2, editor.transcript()
    assert all("rejected" in line for line in failed)


def test_a_rejected_write_does_not_happen_and_its_line_says_so(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor([{"toolCalls": [WRITE_NOTES]}, {"text": "Fine."}])
    editor.lua(ANSWER_WITH, "Reject")
    editor.nvim.command("TetherAsk Write a note")
    editor.wait_text("-- end_turn")
    assert not (project / "notes.txt").exists()
    lines = editor.transcript()
    [line] = [line for line in lines if "Write notes.txt" in line]
    assert line.startswith("  [failed] Write notes.txt — ")
    assert "rejected by user" in line
    # The diff that was proposed is gone.
    assert "    +hello" not in lines
    tool = [m for m in editor.history() if m["role"] == "tool"]
    assert tool[0]["isError"] is True


def test_always_allow_lets_later_calls_of_the_tool_run_without_asking(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(
        [
            {"toolCalls": [call("a", "write_file", path="a.txt", content="a\n")]},
            {"toolCalls": [call("b", "write_file", path="b.txt", content="b\n")]},
            {"text": "Both."},
        ]
    )
    editor.lua(ANSWER_WITH, "Always allow")
    editor.nvim.command("TetherAsk Write two")
    editor.wait_text("-- end_turn")
    assert (project / "a.txt").read_text() == "a\n"
    assert (project / "b.txt").read_text() == "b\n"
    assert [q["prompt"] for q in editor.lua("return _G.questions")] == ["tether: Write a.txt?"]


def test_a_permission_request_withdrawn_by_a_cancelled_run_is_dropped(
    start_editor: StartEditor, project: Path
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
    assert "  [pending] Write never.txt" in editor.transcript()
    editor.nvim.command("TetherCancel")
    editor.wait_text("-- cancelled", timeout_ms=10000)
    editor.wait(
        "vim.tbl_contains(_G.notes,"
        " 'tether: the permission request for Write never.txt was withdrawn (the run ended)')"
    )
    assert "  [cancelled] Write never.txt" in editor.transcript()
    assert editor.lua("return vim.tbl_count(require('tether')._state.prompts)") == 0
    # Answering the stale prompt now does nothing: no error, nothing written, the editor works on.
    notes = len(editor.lua("return _G.notes"))
    editor.lua("_G.later()")
    editor.lua("vim.wait(200)")
    assert not (project / "never.txt").exists()
    assert editor.lua("return _G.notes")[notes:] == []
    assert not editor.lua("return require('tether').running()")


def test_progress_lines_update_the_tool_line_in_place(start_editor: StartEditor) -> None:
    # No built-in tool reports progress (MCP tools do): the view is fed the events directly.
    editor = start_editor([])
    lines = editor.lua(
        """
        local ui = require('tether.ui')
        local view = ui.view({ sessionId = 'p1', title = 'progress' }, true)
        ui.tool_call(view, { toolCallId = 'c1', name = 'ci__build', arguments = '{}',
          title = 'ci: build', toolKind = 'execute', status = 'pending' })
        ui.text(view, 'meanwhile')
        ui.tool_update(view, { toolCallId = 'c1', status = 'in_progress' })
        ui.tool_update(view, { toolCallId = 'c1', status = 'in_progress', progress = '1/3' })
        ui.tool_update(view, { toolCallId = 'c1', status = 'in_progress', progress = '2/3' })
        local seen = vim.api.nvim_buf_get_lines(view.buf, 0, 3, false)
        ui.tool_update(view, { toolCallId = 'c1', status = 'completed', result = 'ok' })
        return { seen, vim.api.nvim_buf_get_lines(view.buf, 0, 4, false) }
        """
    )
    assert lines[0] == ["# tether: progress", "  [in_progress] ci: build — 2/3", "meanwhile"]
    assert lines[1] == ["# tether: progress", "  [completed] ci: build", "    ok", "meanwhile"]


def test_a_buffer_closed_with_bdelete_reopens_with_its_transcript(
    start_editor: StartEditor,
) -> None:
    editor = start_editor(
        [
            {"text": "Hello.", "toolCalls": [call("c1", "read_file", path="README.md")]},
            {"text": "Bye."},
        ]
    )
    editor.nvim.command("TetherNew first")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk hi")
    editor.wait_text("-- end_turn")
    live = editor.transcript()
    first = editor.lua("return require('tether').buffer()")
    editor.nvim.command(f"bdelete {first}")
    assert editor.lua("return require('tether').buffer()") is None
    editor.nvim.command("TetherChat")
    editor.wait_text("Bye.")
    # The same transcript, rebuilt from session/messages, the run's end line included.
    assert editor.transcript() == live
    session_id = editor.lua("return require('tether')._state.session.sessionId")
    assert editor.lua("return vim.api.nvim_buf_get_name(require('tether').buffer())") == (
        f"tether://{session_id}"
    )
    assert editor.transcript()[:3] == ["# tether: first", "", "> hi"]
    assert "  [completed] Read README.md" in editor.transcript()
    assert "    1\t# Demo" in editor.transcript()
    # :TetherSessions after another :bdelete does the same.
    editor.nvim.command("bdelete")
    editor.lua(
        """
        _G.picked = nil
        vim.ui.select = function(items, opts, on_choice)
          _G.picked = opts.format_item(items[1])
          on_choice(items[1])
        end
        """
    )
    editor.nvim.command("TetherSessions")
    editor.wait("_G.picked ~= nil")
    assert editor.lua("return _G.picked") == "first  (4 messages, just now)"
    editor.wait_text("Bye.")
    assert editor.transcript() == live


def test_a_fork_shows_the_inherited_history_and_takes_follow_ups(
    start_editor: StartEditor,
) -> None:
    editor = start_editor([{"text": "Hello."}, {"text": "In the fork."}])
    editor.nvim.command("TetherNew first")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk hi")
    editor.wait_text("-- end_turn")
    first_id = editor.lua("return require('tether')._state.session.sessionId")
    first_buf = editor.lua("return require('tether').buffer()")
    editor.nvim.command("TetherFork")
    editor.wait(
        "#vim.tbl_filter(function(n) return n:find('forked into', 1, true) end, _G.notes) > 0"
    )
    editor.wait_text("Hello.")
    session = editor.lua("return require('tether')._state.session")
    assert session["parentSessionId"] == first_id
    assert editor.lua("return require('tether').buffer()") != first_buf
    assert editor.transcript() == [
        "# tether: first",
        "",
        "> hi",
        "",
        "Hello.",
        "",
        "-- end_turn (1 iteration)",
    ]
    send_from_prompt_area(editor, "go on")
    editor.wait(
        "#vim.tbl_filter(function(n) return n == 'tether: run finished: end_turn' end,"
        " _G.notes) == 2"
    )
    assert editor.transcript()[-6:] == [
        "",
        "> go on",
        "",
        "In the fork.",
        "",
        "-- end_turn (1 iteration)",
    ]
    assert [m["content"] for m in editor.history()] == ["hi", "Hello.", "go on", "In the fork."]


def test_a_server_that_cannot_start_is_reported_with_its_error(start_editor: StartEditor) -> None:
    editor = start_editor([], cmd=[sys.executable, "-I", "-m", "tether_no_such_module", "serve"])
    editor.nvim.command("TetherNew")
    editor.wait(
        "#vim.tbl_filter(function(n) return n:find('did not start', 1, true) end, _G.notes) > 0"
    )
    [note] = editor.lua("return _G.notes")
    assert note.startswith("tether: the server did not start: the server exited (code 1")
    assert "No module named tether_no_such_module" in note


def test_checkhealth_reports_that_the_server_starts(start_editor: StartEditor) -> None:
    editor = start_editor([])
    editor.nvim.command("checkhealth tether")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "server starts: tether" in text
    assert "ERROR" not in text


def test_checkhealth_reports_why_the_server_does_not_start(start_editor: StartEditor) -> None:
    editor = start_editor([], cmd=[sys.executable, "-I", "-m", "tether_no_such_module", "serve"])
    editor.nvim.command("checkhealth tether")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "ERROR" in text
    assert "No module named tether_no_such_module" in text
    assert "did not answer" not in text


def test_checkhealth_reports_a_command_that_is_not_executable(start_editor: StartEditor) -> None:
    editor = start_editor([], cmd=["tether-no-such-binary"])
    editor.nvim.command("checkhealth tether")
    text = "\n".join(editor.nvim.current.buffer[:])
    assert "ERROR" in text and "not executable" in text


def test_approval_auto_runs_writes_without_asking_and_old_values_still_work(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor([{"toolCalls": [WRITE_NOTES]}, {"text": "Done."}], approval="allow")
    editor.lua(ANSWER_WITH, "Reject")
    editor.nvim.command("TetherAsk Write a note")
    editor.wait_text("-- end_turn")
    assert (project / "notes.txt").read_text() == "hello\nworld\n"
    assert editor.lua("return _G.questions") == []
    assert "tether: approval = 'allow' is deprecated; use 'auto'" in editor.lua("return _G.notes")
    assert editor.lua("return require('tether.config').options.approval") == "auto"


def test_approval_deny_refuses_writes(start_editor: StartEditor, project: Path) -> None:
    editor = start_editor([{"toolCalls": [WRITE_NOTES]}, {"text": "Done."}], approval="deny")
    editor.lua(ANSWER_WITH, "Allow")
    editor.nvim.command("TetherAsk Write a note")
    editor.wait_text("-- end_turn")
    assert not (project / "notes.txt").exists()
    assert editor.lua("return _G.questions") == []
    assert any(line.startswith("  [failed] Write notes.txt — ") for line in editor.transcript())


def test_with_two_questions_open_a_cancelled_run_withdraws_only_its_own(
    start_editor: StartEditor, project: Path
) -> None:
    # Runs in two sessions each wait on a question; cancelling one run withdraws its question
    # (the server names the request), and the other is still answered.
    editor = start_editor(
        [
            {"toolCalls": [call("a", "write_file", path="a.txt", content="a\n")]},
            {"toolCalls": [call("b", "write_file", path="b.txt", content="b\n")]},
            {"text": "A done."},
        ]
    )
    editor.lua(
        """
        _G.choose = {}
        vim.ui.select = function(items, opts, on_choice)
          _G.choose[opts.prompt] = function() on_choice(items[1]) end
        end
        """
    )
    editor.nvim.command("TetherNew A")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk write a")
    editor.wait("_G.choose['tether: Write a.txt?'] ~= nil")
    a_buf = editor.lua("return require('tether').buffer()")
    editor.nvim.command("TetherNew B")
    editor.wait(f"require('tether').buffer() ~= {a_buf}")
    editor.nvim.command("TetherAsk write b")
    editor.wait("_G.choose['tether: Write b.txt?'] ~= nil")
    assert editor.lua("return vim.tbl_count(require('tether')._state.prompts)") == 2
    editor.nvim.command("TetherCancel")
    editor.wait_text("-- cancelled", timeout_ms=10000)
    editor.wait(
        "vim.tbl_contains(_G.notes,"
        " 'tether: the permission request for Write b.txt was withdrawn (the run ended)')"
    )
    assert editor.lua("return vim.tbl_count(require('tether')._state.prompts)") == 1
    editor.lua("_G.choose['tether: Write b.txt?']() _G.choose['tether: Write a.txt?']()")
    editor.wait(
        f"vim.tbl_contains(vim.api.nvim_buf_get_lines({a_buf}, 0, -1, false),"
        " '-- end_turn (2 iterations)')"
    )
    assert (project / "a.txt").read_text() == "a\n"
    assert not (project / "b.txt").exists()
    withdrawn = [n for n in editor.lua("return _G.notes") if "withdrawn" in n]
    assert withdrawn == [
        "tether: the permission request for Write b.txt was withdrawn (the run ended)"
    ]


def test_under_auto_a_write_to_a_protected_path_is_still_asked_with_its_reason(
    start_editor: StartEditor, project: Path
) -> None:
    protected = call("p", "write_file", path=".tether/notes.md", content="x\n")
    editor = start_editor([{"toolCalls": [protected]}, {"text": "Fine."}], approval="auto")
    editor.lua(ANSWER_WITH, "Reject")
    editor.nvim.command("TetherAsk Write there")
    editor.wait_text("-- end_turn")
    [question] = editor.lua("return _G.questions")
    assert question["prompt"].startswith("tether: Write .tether/notes.md — ")
    assert ".tether/" in question["prompt"].split(" — ", 1)[1]
    assert not (project / ".tether" / "notes.md").exists()


def test_a_long_tool_output_is_cut_under_its_line(start_editor: StartEditor, project: Path) -> None:
    # Long enough that the server's message arrives in several pieces on the pipe.
    (project / "big.txt").write_text("".join(f"line {n} " + "x" * 80 + "\n" for n in range(1, 901)))
    editor = start_editor(
        [{"toolCalls": [call("r", "read_file", path="big.txt")]}, {"text": "Long."}]
    )
    editor.nvim.command("TetherAsk Read it")
    editor.wait_text("-- end_turn")
    lines = editor.transcript()
    at = lines.index("  [completed] Read big.txt")
    body = lines[at + 1 : lines.index("Long.")]
    assert len(body) == 201
    assert body[0].split("\t") == ["      1", "line 1 " + "x" * 80]
    assert body[199].split("\t") == ["    200", "line 200 " + "x" * 80]
    assert body[200].startswith("    … ") and body[200].endswith(" more lines")


def test_the_session_list_says_how_long_ago_a_session_changed(start_editor: StartEditor) -> None:
    editor = start_editor([])
    now = editor.lua("return os.time()")
    ago = editor.lua(
        """
        local now = ...
        local function iso(t) return os.date('!%Y-%m-%dT%H:%M:%S', t) .. '.123456Z' end
        local tether = require('tether')
        return { tether.ago(iso(now - 5), now), tether.ago(iso(now - 300), now),
          tether.ago(iso(now - 3 * 3600), now), tether.ago(iso(now - 2 * 86400), now),
          tether.ago('yesterday', now) }
        """,
        now,
    )
    assert ago == ["just now", "5 min ago", "3 h ago", "2 d ago", "yesterday"]


def test_the_end_of_a_run_shows_the_tokens_it_used(start_editor: StartEditor) -> None:
    editor = start_editor(
        [{"text": "Counted.", "usage": {"inputTokens": 1200, "outputTokens": 34}}]
    )
    editor.nvim.command("TetherAsk count")
    editor.wait_text("-- end_turn")
    assert editor.transcript()[-1] == "-- end_turn (1 iteration, 1200 tokens in, 34 out)"


def test_a_file_opened_in_the_chat_window_does_not_inherit_its_folds(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor([])
    editor.nvim.command("TetherChat")
    editor.wait("require('tether').buffer() ~= nil")
    assert editor.lua("return vim.wo.foldmethod") == "expr"
    editor.nvim.command(f"edit {project / 'src' / 'app.py'}")
    assert editor.lua("return { vim.wo.foldmethod, vim.wo.linebreak }") == ["manual", False]


PLAN_SHOWN = ["Plan · 1/2 done", "  [x] Read it", "  [~] Fix it"]


def _plan_shown(editor: Editor) -> list[str]:
    """The plan's virtual lines, then the row they are above (the separator's, 0-based)."""
    shown: list[str] = editor.lua(
        "local ui = require('tether.ui')"
        " return ui.plan_lines(ui.by_buffer(require('tether').buffer()))"
    )
    return shown


def test_the_plan_is_a_checklist_above_the_prompt_and_a_fork_shows_it(
    start_editor: StartEditor,
) -> None:
    plan = [
        {"content": "Read it", "status": "completed"},
        {"content": "Fix\nit", "status": "in_progress", "priority": "high"},
    ]
    editor = start_editor(
        [{"toolCalls": [call("p1", "update_plan", entries=plan)]}, {"text": "Planned."}]
    )
    editor.nvim.command("TetherNew plans")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk plan it")
    editor.wait_text("-- end_turn")
    separator = editor.lua("return require('tether.ui').SEPARATOR")
    assert _plan_shown(editor) == [*PLAN_SHOWN, f"row {editor.lines().index(separator)}"]
    assert not [line for line in editor.transcript() if "Plan ·" in line]  # never in the text

    editor.nvim.command("TetherFork")
    editor.wait(
        "#vim.tbl_filter(function(n) return n:find('forked into', 1, true) end, _G.notes) > 0"
    )
    editor.wait_text("Planned.")
    assert _plan_shown(editor) == [*PLAN_SHOWN, f"row {editor.lines().index(separator)}"]


def test_a_rebuilt_transcript_equals_the_live_one_diffs_tokens_and_a_cancelled_answer(
    start_editor: StartEditor,
) -> None:
    edit = call("e1", "edit_file", path="src/app.py", oldString="return 42", newString="return 7")
    editor = start_editor(
        [
            {
                "text": "Editing.",
                "toolCalls": [edit],
                "usage": {"inputTokens": 90, "outputTokens": 9},
            },
            {"text": "Edited.", "usage": {"inputTokens": 120, "outputTokens": 3}},
            {"text": "Thinking slowly", "delay": 30},
        ]
    )
    editor.lua(ANSWER_WITH, "Allow")
    editor.nvim.command("TetherNew replay")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk Change it")
    editor.wait_text("-- end_turn")
    editor.nvim.command("TetherAsk Take your time")
    editor.wait_text("Thinking")
    editor.nvim.command("TetherCancel")
    editor.wait_text("-- cancelled", timeout_ms=10000)
    live = editor.transcript()
    at = live.index("  [completed] Edit src/app.py")
    assert live[at + 1 : at + 3] == ["    --- a/src/app.py", "    +++ b/src/app.py"]
    assert "-- end_turn (2 iterations, 210 tokens in, 12 out)" in live
    assert live[-4:] == ["", "Thinking ", "", "-- cancelled (1 iteration)"]
    kind = (
        "return require('tether.ui').get(require('tether')._state.session.sessionId).tools.e1.kind"
    )
    assert editor.lua(kind) == "edit"
    chat = editor.lua("return require('tether').buffer()")
    editor.nvim.command(f"bdelete {chat}")
    editor.nvim.command("TetherChat")
    editor.wait_text("-- cancelled")
    assert editor.transcript() == live
    assert editor.lua(kind) == "edit"


def test_a_cut_off_answer_and_a_refusal_are_not_shown_as_a_normal_end(
    start_editor: StartEditor,
) -> None:
    editor = start_editor(
        [
            {"text": "On and on", "finishReason": "length"},
            {"text": "I cannot help with that.", "finishReason": "content_filter"},
        ]
    )
    editor.nvim.command("TetherAsk List everything")
    editor.wait_text("-- max_tokens")
    editor.nvim.command("TetherAsk Something else")
    editor.wait_text("-- refusal")
    lines = editor.transcript()
    assert (
        "-- max_tokens: the answer was cut off at the model's output token limit (1 iteration)"
        in lines
    )
    assert "-- refusal: the model refused to answer (1 iteration)" in lines
    notes = editor.lua("return _G.notes")
    assert "tether: the answer was cut off at the model's output token limit" in notes
    assert "tether: the model refused to answer" in notes


def test_tether_mode_sets_the_session_mode_kept_by_the_server(start_editor: StartEditor) -> None:
    editor = start_editor([])
    editor.nvim.command("TetherNew modes")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherMode read_only")
    editor.wait("vim.tbl_contains(_G.notes, 'tether: mode read_only')")
    editor.lua(
        """
        _G.got = nil
        local sid = require('tether')._state.session.sessionId
        require('tether')._state.client:request('session/get', { sessionId = sid },
          function(err, session) _G.got = session end)
        """
    )
    editor.wait("_G.got ~= nil")
    assert editor.lua("return _G.got.mode") == "read_only"
    assert editor.lua("return vim.fn.getcompletion('TetherMode ', 'cmdline')") == [
        "ask",
        "accept_edits",
        "read_only",
    ]
    editor.nvim.command("TetherMode sideways")
    editor.wait(
        "vim.tbl_contains(_G.notes,"
        " \"tether: unknown mode 'sideways': one of ask, accept_edits, read_only\")"
    )


def test_a_notice_is_notified_not_written_into_the_answer(start_editor: StartEditor) -> None:
    editor = start_editor([{"text": "Answered."}])
    # An MCP server that cannot start: the server reports it with a notice event.
    editor.lua(
        "require('tether.config').options.init_options ="
        " { tools = { mcp_servers = { { name = 'broken', command = 'tether-no-such-mcp' } } } }"
    )
    editor.nvim.command("TetherAsk hello")
    editor.wait_text("-- end_turn")
    notes = [n for n in editor.lua("return _G.notes") if "broken" in n]
    assert notes, editor.lua("return _G.notes")
    assert not any("broken" in line for line in editor.transcript())
    assert "Answered." in editor.transcript()


# A user who answers the questions asked, in turn, with the items of these labels; what was asked.
ANSWER_IN_TURN = """
local labels = {...}
_G.questions = {}
vim.ui.select = function(items, opts, on_choice)
  local shown = {}
  for _, item in ipairs(items) do table.insert(shown, opts.format_item(item)) end
  table.insert(_G.questions, { prompt = opts.prompt, labels = shown, kind = opts.kind })
  local label = table.remove(labels, 1)
  vim.schedule(function()
    for _, item in ipairs(items) do
      if opts.format_item(item) == label then return on_choice(item) end
    end
    on_choice(nil)
  end)
end
"""

EDIT_README = call("e1", "edit_file", path="README.md", old_string="small", new_string="big")


def test_tether_undo_puts_back_the_last_turns_files_and_reloads_their_buffers(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(
        [{"toolCalls": [EDIT_README, WRITE_NOTES]}, {"text": "Done."}], approval="auto"
    )
    editor.nvim.command("edit README.md")
    editor.nvim.command("TetherAsk Make it big")
    editor.wait_text("-- end_turn")
    assert (project / "README.md").read_text() == "# Demo\nA big project.\n"
    editor.nvim.command("checktime")
    readme = "vim.api.nvim_buf_get_lines(vim.fn.bufnr('README.md'), 0, -1, false)[2]"
    assert editor.lua(f"return {readme}") == "A big project."

    editor.nvim.command("TetherUndo")
    editor.wait(f"{readme} == 'A small project.'")

    assert (project / "README.md").read_text() == "# Demo\nA small project.\n"
    assert not (project / "notes.txt").exists()
    assert "tether: restored README.md; removed notes.txt" in editor.lua("return _G.notes")
    assert len(editor.history()) > 0  # files only: the conversation stays


def test_tether_undo_without_a_turn_that_changed_files_says_so(start_editor: StartEditor) -> None:
    editor = start_editor([{"text": "Hello."}])
    editor.nvim.command("TetherAsk hi")
    editor.wait_text("-- end_turn")
    editor.nvim.command("TetherUndo")
    editor.wait("vim.tbl_contains(_G.notes, 'tether: no turn of this session changed files')")


def two_turns(editor: Editor) -> None:
    editor.nvim.command("TetherAsk Write a note")
    editor.wait_text("-- end_turn")
    send_from_prompt_area(editor, "Make it big")
    editor.wait(
        "#vim.tbl_filter(function(l) return l:find('^%-%- end_turn') end,"
        " vim.api.nvim_buf_get_lines(require('tether').buffer(), 0, -1, false)) == 2"
    )


TWO_TURNS = [
    {"toolCalls": [WRITE_NOTES]},
    {"text": "Noted."},
    {"toolCalls": [EDIT_README]},
    {"text": "Bigger."},
]


def restore_at_prompt(editor: Editor, prompt: str) -> None:
    """Put the cursor on the prompt line and press the restore key."""
    row = editor.transcript().index(prompt) + 1
    editor.lua(
        "local win = vim.fn.bufwinid(require('tether').buffer()) vim.api.nvim_set_current_win(win)"
    )
    editor.nvim.command(f"normal! {row}G")
    editor.nvim.input("gR")


def test_the_restore_key_on_a_prompt_puts_back_files_and_conversation_from_there(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(TWO_TURNS, approval="auto")
    editor.lua(ANSWER_IN_TURN, "Files and conversation")
    two_turns(editor)
    assert (project / "notes.txt").exists()

    restore_at_prompt(editor, "> Write a note")
    editor.wait("(_G.notes[#_G.notes] or ''):find('messages removed') ~= nil")
    editor.wait(
        "#vim.tbl_filter(function(l) return l:find('^> ') end,"
        " vim.api.nvim_buf_get_lines(require('tether').buffer(), 0, -1, false)) == 0"
    )

    [question] = editor.lua("return _G.questions")
    assert question["kind"] == "tether.restore"
    assert "files it will change: notes.txt, README.md" in question["prompt"]
    assert question["labels"] == ["Files", "Conversation", "Files and conversation"]
    assert not (project / "notes.txt").exists()
    assert (project / "README.md").read_text() == "# Demo\nA small project.\n"
    assert editor.history() == []
    assert not [line for line in editor.transcript() if line.startswith(("> ", "  ["))]


def test_restoring_a_later_prompts_files_keeps_the_earlier_turn_and_the_conversation(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(TWO_TURNS, approval="auto")
    editor.lua(ANSWER_IN_TURN, "Files")
    two_turns(editor)

    restore_at_prompt(editor, "> Make it big")
    editor.wait("_G.notes[#_G.notes] == 'tether: restored README.md'")

    [question] = editor.lua("return _G.questions")
    assert "files it will change: README.md)" in question["prompt"]
    assert (project / "README.md").read_text() == "# Demo\nA small project.\n"
    assert (project / "notes.txt").read_text() == "hello\nworld\n"
    assert "> Make it big" in editor.transcript()


def test_a_file_changed_by_hand_is_overwritten_only_when_the_user_says_so(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(TWO_TURNS, approval="auto")
    editor.lua(ANSWER_IN_TURN, "Files", "Cancel", "Files", "Overwrite")
    two_turns(editor)
    (project / "README.md").write_text("mine\n")

    restore_at_prompt(editor, "> Make it big")
    editor.wait("#_G.questions == 2")
    assert (project / "README.md").read_text() == "mine\n"
    conflict = editor.lua("return _G.questions")[1]
    assert conflict["kind"] == "tether.rewind_conflict"
    assert "README.md" in conflict["prompt"]
    assert conflict["labels"] == ["Overwrite", "Cancel"]

    restore_at_prompt(editor, "> Make it big")
    editor.wait("_G.notes[#_G.notes] == 'tether: restored README.md'")
    assert (project / "README.md").read_text() == "# Demo\nA small project.\n"


def test_the_restore_key_off_a_prompt_line_says_where_to_put_the_cursor(
    start_editor: StartEditor,
) -> None:
    editor = start_editor([{"text": "Hello."}])
    editor.nvim.command("TetherAsk hi")
    editor.wait_text("-- end_turn")
    editor.lua(
        "local win = vim.fn.bufwinid(require('tether').buffer()) vim.api.nvim_set_current_win(win)"
    )
    editor.nvim.command("normal! 1G")
    editor.nvim.input("gR")
    editor.wait("_G.notes[#_G.notes] ~= nil and _G.notes[#_G.notes]:find('prompt line') ~= nil")


def test_restoring_a_prompt_whose_own_turn_changed_nothing_lists_the_later_turns_files(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor(
        [{"text": "Hello."}, {"toolCalls": [WRITE_NOTES]}, {"text": "Noted."}], approval="auto"
    )
    editor.lua(ANSWER_IN_TURN, "Files")
    editor.nvim.command("TetherAsk hi")
    editor.wait_text("-- end_turn")
    send_from_prompt_area(editor, "Write a note")
    editor.wait(
        "#vim.tbl_filter(function(l) return l:find('^%-%- end_turn') end,"
        " vim.api.nvim_buf_get_lines(require('tether').buffer(), 0, -1, false)) == 2"
    )

    restore_at_prompt(editor, "> hi")
    editor.wait("_G.notes[#_G.notes] == 'tether: removed notes.txt'")

    [question] = editor.lua("return _G.questions")
    assert "files it will change: notes.txt)" in question["prompt"]
    assert not (project / "notes.txt").exists()


def test_without_cmd_the_server_is_tether_on_path_else_the_configured_python(
    start_editor: StartEditor, tmp_path: Path
) -> None:
    editor = start_editor([])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server_cmd = """
        local bin = ...
        vim.env.PATH = bin
        vim.g.python3_host_prog = '/opt/python/bin/python3'
        require('tether').setup({})
        return require('tether.config').server_cmd()
    """
    python = ["/opt/python/bin/python3", "-P", "-m", "tether", "serve"]
    assert editor.lua(server_cmd, str(bin_dir)) == python
    (bin_dir / "tether").write_text("#!/bin/sh\n")
    (bin_dir / "tether").chmod(0o755)
    assert editor.lua(server_cmd, str(bin_dir)) == ["tether", "serve"]
