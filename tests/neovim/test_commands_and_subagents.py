"""The Neovim plugin's `/` completion of the session's slash commands (session/commands) and its
sub-agents (`task` calls) shown nested under their call: on Neovim 0.11 and 0.7, against the real
``tether serve``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .conftest import Editor
from .test_plugin import call

StartEditor = Callable[..., Editor]

OMNIFUNC = "v:lua.require'tether'.omnifunc"


def open_chat(editor: Editor) -> None:
    editor.nvim.command("TetherChat")
    editor.wait("require('tether').buffer() ~= nil")
    editor.lua(
        "local win = vim.fn.bufwinid(require('tether').buffer()) vim.api.nvim_set_current_win(win)"
    )


def type_keys(editor: Editor, keys: str) -> None:
    """Keys typed by the user, run to their end before this returns."""
    editor.lua(
        "local keys = vim.api.nvim_replace_termcodes(..., true, false, true)"
        " vim.api.nvim_feedkeys(keys, 'xt', false)",
        keys,
    )


def completions(editor: Editor, row: int, typed: str) -> object:
    """What the chat buffer's omnifunc offers, called in insert mode (as <C-x><C-o> does) right
    after `typed` was typed on the line `row` (1-based), which is left empty."""
    editor.lua(
        """
        _G.omni = nil
        vim.keymap.set('i', '<F2>', function()
          local omnifunc = vim.bo.omnifunc
          local start = vim.fn.eval(omnifunc .. '(1, "")')
          local line = vim.api.nvim_get_current_line()
          local base = line:sub(start + 1, vim.api.nvim_win_get_cursor(0)[2])
          local call = omnifunc .. '(0, ' .. vim.fn.string(base) .. ')'
          _G.omni = start < 0 and { start } or { start, vim.fn.eval(call) }
        end, { buffer = 0 })
        vim.api.nvim_win_set_cursor(0, { ..., 0 })
        """,
        row,
    )
    type_keys(editor, "S" + typed + "<F2><Esc>")
    result = editor.lua("vim.api.nvim_set_current_line('') return _G.omni")
    return result[0] if len(result) == 1 else result


def test_slash_completes_the_sessions_commands_at_the_start_of_the_prompt(
    start_editor: StartEditor, project: Path
) -> None:
    commands = project / ".tether" / "commands" / "git"
    commands.mkdir(parents=True)
    (commands / "commit.md").write_text(
        "---\ndescription: Write a commit message\nargument-hint: <scope>\n---\nCommit $ARGUMENTS\n"
    )
    editor = start_editor([{"text": "Answer."}])
    open_chat(editor)
    assert editor.lua("return vim.bo.omnifunc") == OMNIFUNC
    last = editor.lua("return vim.api.nvim_buf_line_count(0)")

    start, items = completions(editor, last, "/")  # type: ignore[misc]
    assert start == 0
    words = [item["word"] for item in items]
    assert words[:3] == ["/compact", "/mode", "/plan"]
    assert "/help" in words
    commit = next(item for item in items if item["word"] == "/git:commit")
    assert commit["kind"] == "workspace"
    assert commit["menu"] == "<scope>  Write a commit message"

    assert completions(editor, last, "  /g") == [2, [commit]]
    # Not a command's place: after other text, on a later line of the prompt, in the transcript.
    assert completions(editor, last, "see /g") == -3
    editor.lua("vim.api.nvim_buf_set_lines(0, -2, -1, false, { 'fix it', '' })")
    assert completions(editor, last + 1, "/g") == -3
    # Blank lines before it are no text: the prompt still starts with the command.
    editor.lua("vim.api.nvim_buf_set_lines(0, -3, -1, false, { '', '' })")
    assert completions(editor, last + 1, "/g") == [0, [commit]]
    editor.lua("vim.api.nvim_buf_set_lines(0, -2, -1, false, {})")
    assert completions(editor, 1, "/g") == -3

    # Typed for real: <C-x><C-o> in insert mode completes the only match.
    type_keys(editor, "Go/gi<C-x><C-o><Esc>")
    assert editor.prompt_area()[-1] == "/git:commit"


def cursor_on(editor: Editor, text: str) -> None:
    """Put the cursor on the first line of the current chat buffer that is `text`."""
    row = editor.lines().index(text) + 1
    editor.lua(
        "local win = vim.fn.bufwinid(require('tether').buffer())"
        " vim.api.nvim_set_current_win(win) vim.api.nvim_win_set_cursor(win, { ..., 0 })",
        row,
    )


TASK = call("t1", "task", prompt="What does main return?", description="Read the app")


def test_a_sub_agent_is_drawn_under_its_task_call_and_opened_from_it(
    start_editor: StartEditor,
) -> None:
    # Each model request takes the next turn: the parent's, the sub-agent's two, the parent's last.
    editor = start_editor(
        [
            {"toolCalls": [TASK]},
            {"text": "Reading it.", "toolCalls": [call("c1", "read_file", path="src/app.py")]},
            {"text": "It returns 42.\nThat is all."},
            {"text": "The sub-agent found 42."},
        ],
        approval="auto",
    )
    editor.nvim.command("TetherNew parent")
    editor.wait("require('tether').buffer() ~= nil")
    parent = editor.lua("return require('tether')._state.session.sessionId")
    editor.nvim.command("TetherAsk Ask a sub-agent")
    editor.wait_text("-- end_turn")

    lines = editor.transcript()
    task = next(i for i, line in enumerate(lines) if line.startswith("  [completed] Task"))
    heading = lines[task + 1]
    assert heading.startswith("    sub-agent ") and heading.endswith(" — end_turn"), lines
    child = heading.removeprefix("    sub-agent ").removesuffix(" — end_turn")
    assert child != parent
    assert lines[task + 2 : task + 7] == [
        "    Reading it.",
        "    [completed] Read src/app.py",
        "    It returns 42.",
        "    That is all.",
        "The sub-agent found 42.",
    ]
    # Nothing of the sub-agent is drawn as the parent's own (no line of its own at the top level).
    assert "  [completed] Read src/app.py" not in lines

    # The open key on a line of the sub-agent opens its session (session/get + session/messages).
    cursor_on(editor, "    [completed] Read src/app.py")
    editor.nvim.input("go")
    editor.wait(f"require('tether')._state.session.sessionId == '{child}'")
    editor.wait_text("It returns 42.")
    child_lines = editor.transcript()
    assert child_lines[0] == "# tether: Read the app"
    assert "> What does main return?" in child_lines
    assert "  [completed] Read src/app.py" in child_lines

    # The parent's buffer made anew from session/messages: its task call still opens the child.
    editor.nvim.command(f"TetherOpen {parent}")
    editor.wait(f"require('tether')._state.session.sessionId == '{parent}'")
    editor.nvim.command("bdelete!")
    editor.nvim.command(f"TetherOpen {parent}")
    editor.wait_text("The sub-agent found 42.")
    task_line = next(line for line in editor.lines() if line.startswith("  [completed] Task"))
    assert task_line == lines[task] == "  [completed] Task: Read the app"
    cursor_on(editor, task_line)
    editor.nvim.command("TetherOpen")
    editor.wait(f"require('tether')._state.session.sessionId == '{child}'")
    assert editor.transcript()[0] == "# tether: Read the app"
