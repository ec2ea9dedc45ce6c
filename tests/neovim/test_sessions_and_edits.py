"""The Neovim plugin's sessions that outlive the server (the user's SQLite store by default, and
a session that cannot be resumed said so), buffers reloaded after an applied edit, session titles,
context added with :TetherAdd, :TetherModel, the code-block yank and folded reasoning (live and
reopened): on Neovim 0.11 and 0.7, against the real ``tether serve``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .conftest import Editor
from .test_plugin import call, send_from_prompt_area

StartEditor = Callable[..., Editor]

EDIT_README = call("e1", "edit_file", path="README.md", oldString="small", newString="big")
README_LINE_2 = "vim.api.nvim_buf_get_lines(vim.fn.bufnr('README.md'), 0, -1, false)[2]"
SESSIONS = "require('tether')._state.client.server.capabilities.sessions"


def stop_server(editor: Editor) -> None:
    editor.lua(
        "local c = require('tether')._state.client; require('tether').stop()"
        " vim.wait(5000, function() return c.closed end, 20)"
    )


def test_an_applied_edit_reloads_the_buffer_open_on_the_file(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor([{"toolCalls": [EDIT_README]}, {"text": "Done."}], approval="auto")
    editor.nvim.command("edit README.md")
    assert editor.lua(f"return {README_LINE_2}") == "A small project."
    editor.nvim.command("TetherAsk Make it big")
    editor.wait_text("-- end_turn")
    assert (project / "README.md").read_text() == "# Demo\nA big project.\n"
    # No :checktime of the test's own: the plugin reloaded it when the edit was applied.
    assert editor.lua(f"return {README_LINE_2}") == "A big project."
    assert not editor.lua("return vim.bo[vim.fn.bufnr('README.md')].modified")


def test_sessions_are_kept_in_the_users_sqlite_store_and_go_on_after_a_restart(
    start_editor: StartEditor, tmp_path: Path
) -> None:
    # Each server reads the script from its start: both answer "Answer."
    editor = start_editor([{"text": "Answer."}])
    editor.nvim.command("TetherNew kept")
    editor.wait("require('tether').buffer() ~= nil")
    assert editor.lua(f"return {SESSIONS}") == {"store": "sqlite", "fork": True, "durable": True}
    assert (tmp_path / "data" / "tether" / "sessions.db").exists()
    editor.nvim.command("TetherAsk one")
    editor.wait_text("-- end_turn")
    session_id = editor.lua("return require('tether')._state.session.sessionId")

    stop_server(editor)
    send_from_prompt_area(editor, "two")
    editor.wait("#vim.tbl_filter(function(n) return n:find('finished') end, _G.notes) == 2")
    assert editor.lua("return require('tether')._state.session.sessionId") == session_id
    assert [m["content"] for m in editor.history()] == ["one", "Answer.", "two", "Answer."]


def test_a_store_set_in_config_toml_is_left_to_it_and_a_lost_session_is_said_so(
    start_editor: StartEditor, tmp_path: Path
) -> None:
    config = tmp_path / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[provider]\ntimeout = 60\n\n[sessions]\nstore = "memory"\n')
    editor = start_editor([{"text": "First."}, {"text": "Second."}])
    editor.nvim.command("TetherNew lost")
    editor.wait("require('tether').buffer() ~= nil")
    assert editor.lua(f"return {SESSIONS}.store") == "memory"
    editor.nvim.command("TetherAsk one")
    editor.wait_text("-- end_turn")
    lost = editor.lua("return require('tether').buffer()")

    stop_server(editor)
    send_from_prompt_area(editor, "two")
    said = (
        "session 'lost' cannot be resumed: the server no longer has it (sessions are kept in"
        ' memory: set store = "sqlite" to keep them)'
    )
    editor.wait(f"vim.tbl_contains(_G.notes, {json.dumps('tether: ' + said)})")
    lines = editor.lua(f"return vim.api.nvim_buf_get_lines({lost}, 0, -1, false)")
    assert f"-- {said}; the next prompt starts a new session" in lines
    # The next prompt typed there goes to a new session, in a buffer of its own.
    editor.lua(f"vim.api.nvim_set_current_win(vim.fn.bufwinid({lost}))")
    editor.nvim.input("Gothree<Esc><CR>")
    editor.wait(f"require('tether').buffer() ~= nil and require('tether').buffer() ~= {lost}")
    editor.wait_text("-- end_turn")
    assert [m["content"] for m in editor.history()] == ["three", "First."]


def test_the_store_option_false_leaves_it_to_the_server(start_editor: StartEditor) -> None:
    editor = start_editor([], options={"store": False})
    editor.nvim.command("TetherNew")
    editor.wait("require('tether').buffer() ~= nil")
    assert editor.lua(f"return {SESSIONS}.store") == "memory"


def test_a_session_is_shown_and_listed_by_the_title_its_first_prompt_gave_it(
    start_editor: StartEditor,
) -> None:
    editor = start_editor([{"text": "Built."}])
    editor.nvim.command("TetherNew")
    editor.wait("require('tether').buffer() ~= nil")
    short = editor.lua("return require('tether')._state.session.sessionId:sub(-8)")
    assert editor.lines()[0] == f"# tether: new session {short}"
    editor.nvim.command("TetherAsk Explain the build")
    editor.wait_text("-- end_turn")
    editor.wait(
        "vim.api.nvim_buf_get_lines(require('tether').buffer(), 0, 1, false)[1]"
        " == '# tether: Explain the build'"
    )
    editor.nvim.command("TetherNew")
    editor.wait(f"require('tether')._state.session.sessionId:sub(-8) ~= '{short}'")
    fresh = editor.lua("return require('tether')._state.session.sessionId:sub(-8)")
    editor.lua(
        """
        _G.listed = nil
        vim.ui.select = function(items, opts, on_choice)
          _G.listed = vim.tbl_map(opts.format_item, items)
          on_choice(nil)
        end
        """
    )
    editor.nvim.command("TetherSessions")
    editor.wait("_G.listed ~= nil")
    assert sorted(editor.lua("return _G.listed")) == sorted(
        [
            "Explain the build  (2 messages, just now)",
            f"new session {fresh}  (0 messages, just now)",
        ]
    )


def test_tether_add_puts_buffers_and_files_after_the_next_prompt_only(
    start_editor: StartEditor, project: Path
) -> None:
    editor = start_editor([{"text": "Seen."}, {"text": "Again."}])
    editor.nvim.command("edit src/app.py")
    editor.nvim.command("TetherAdd")
    editor.nvim.command("1TetherAdd")
    editor.nvim.command("TetherAdd README.md")
    assert (
        "tether: context for the next prompt: src/app.py, src/app.py lines 1-1, README.md"
        in editor.lua("return _G.notes")
    )
    editor.nvim.command("TetherAsk Explain")
    editor.wait_text("-- end_turn")
    send_from_prompt_area(editor, "And now?")
    editor.wait("#vim.tbl_filter(function(n) return n:find('finished') end, _G.notes) == 2")
    first, second = [m["content"] for m in editor.history() if m["role"] == "user"]
    assert first.startswith(
        "Explain\n\nsrc/app.py:\n```python\ndef main():\n    return 42\n```\n\n"
        "src/app.py lines 1-1:\n```python\ndef main():\n```\n\nREADME.md:\n```"
    )
    assert first.endswith("\n# Demo\nA small project.\n```")
    assert second == "And now?"
    editor.nvim.command("TetherAdd!")
    assert "tether: no context for the next prompt" in editor.lua("return _G.notes")
    editor.nvim.command("TetherAdd no/such/file.txt")
    assert "tether: cannot read no/such/file.txt" in editor.lua("return _G.notes")


def test_tether_model_sets_the_model_of_the_sessions_next_runs(start_editor: StartEditor) -> None:
    editor = start_editor([])
    editor.nvim.command("TetherNew models")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherModel other-model")
    editor.wait("vim.tbl_contains(_G.notes, 'tether: model other-model')")
    editor.lua(
        """
        _G.got = nil
        require('tether')._state.client:request('session/get',
          { sessionId = require('tether')._state.session.sessionId },
          function(err, session) _G.got = session end)
        """
    )
    editor.wait("_G.got ~= nil")
    assert editor.lua("return _G.got.model") == "other-model"
    assert editor.lua("return vim.fn.getcompletion('TetherModel ', 'cmdline')") == ["other-model"]


def test_gy_yanks_the_code_block_under_the_cursor(start_editor: StartEditor) -> None:
    editor = start_editor([{"text": "Here:\n```python\nprint(1)\nprint(2)\n```\nDone."}])
    editor.nvim.command("TetherAsk Show me")
    editor.wait_text("-- end_turn")
    row = editor.transcript().index("print(2)") + 1
    editor.lua(
        "local win = vim.fn.bufwinid(require('tether').buffer()) vim.api.nvim_set_current_win(win)"
    )
    editor.nvim.command(f"normal! {row}G")
    editor.nvim.input('"ygy')
    editor.wait("vim.tbl_contains(_G.notes, 'tether: yanked 2 lines')")
    assert editor.lua("return vim.fn.getreg('y')") == "print(1)\nprint(2)\n"
    editor.nvim.command("normal! 1G")
    editor.nvim.input("gy")
    editor.wait("(_G.notes[#_G.notes] or ''):find('code block') ~= nil")


def test_reasoning_is_folded_under_its_line_and_the_answer_follows(
    start_editor: StartEditor,
) -> None:
    editor = start_editor([])
    lines = editor.lua(
        """
        local tether, ui = require('tether'), require('tether.ui')
        ui.view({ sessionId = 'r1', title = 'reasoning' }, true)
        local function event(e)
          tether._on_progress({ sessionId = 'r1', runId = 'x', event = e })
        end
        event({ kind = 'thought_delta', messageId = 'm', text = 'The user wants' })
        event({ kind = 'thought_delta', messageId = 'm', text = ' a greeting.\\nSay hello.' })
        event({ kind = 'message_delta', messageId = 'm', text = 'Hello!' })
        local buf = ui.get('r1').buf
        local win = vim.fn.bufwinid(buf)
        local folds = vim.api.nvim_win_call(win, function()
          return { vim.fn.foldclosed(3), vim.fn.foldclosedend(3), vim.fn.foldclosed(5) }
        end)
        return { vim.api.nvim_buf_get_lines(buf, 0, 5, false), folds }
        """
    )
    assert lines[0] == [
        "# tether: reasoning",
        "  [reasoning]",
        "    The user wants a greeting.",
        "    Say hello.",
        "Hello!",
    ]
    assert lines[1] == [3, 4, -1]


CLOSED_FOLDS = """
local win = vim.fn.bufwinid(require('tether').buffer())
return vim.api.nvim_win_call(win, function()
  local closed, lnum = {}, 1
  while lnum <= vim.fn.line('$') do
    local last = vim.fn.foldclosedend(lnum)
    if last ~= -1 then
      table.insert(closed, { lnum, last })
      lnum = last
    end
    lnum = lnum + 1
  end
  return closed
end)
"""


def test_a_reopened_session_folds_each_answers_reasoning_as_the_live_one_did(
    start_editor: StartEditor,
) -> None:
    editor = start_editor(
        [
            {
                "thinking": "The readme will say.",
                "toolCalls": [call("c1", "read_file", path="README.md")],
            },
            {"thinking": "It is a demo.\nSay so.", "text": "A demo project."},
        ]
    )
    editor.nvim.command("TetherNew reasoned")
    editor.wait("require('tether').buffer() ~= nil")
    editor.nvim.command("TetherAsk What is it?")
    editor.wait_text("-- end_turn")
    live, live_folds = editor.transcript(), editor.lua(CLOSED_FOLDS)
    assert live.count("  [reasoning]") == 2
    assert live[live.index("  [reasoning]") + 1] == "    The readme will say."
    second = live.index("    It is a demo.")
    assert live[second - 1 : second + 3] == [
        "  [reasoning]",
        "    It is a demo.",
        "    Say so.",
        "A demo project.",
    ]
    assert [second + 1, second + 2] in live_folds  # folded under its line (1-based rows)
    chat = editor.lua("return require('tether').buffer()")
    editor.nvim.command(f"bdelete {chat}")
    editor.nvim.command("TetherChat")
    editor.wait_text("A demo project.")
    # Rebuilt from session/messages (metadata.reasoning): the same lines, folded the same way.
    assert editor.transcript() == live
    assert editor.lua(CLOSED_FOLDS) == live_folds


def test_a_store_is_seen_however_config_toml_spells_it(
    start_editor: StartEditor, tmp_path: Path
) -> None:
    editor = start_editor([])
    files = {
        "table": '[sessions]\nttl = "30d"\nstore = "sqlite:///x.db"\n',
        "dotted": 'sessions.store = "memory"\n',
        "inline": 'sessions = { store = "memory" }\n',
        "other table": '[provider]\nstore = "x"\n[sessions]\nttl = "1d"\n',
        "sub-table": '[sessions.extra]\nstore = "x"\n',
        "commented": '[sessions]\n# store = "memory"\n',
    }
    seen = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        seen[name] = editor.lua("return require('tether.config').file_sets_store(...)", str(path))
    assert seen == {
        "table": True,
        "dotted": True,
        "inline": True,
        "other table": False,
        "sub-table": False,
        "commented": False,
    }
