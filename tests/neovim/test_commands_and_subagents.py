"""The Neovim plugin's `/` completion of the session's slash commands (session/commands) and its
sub-agents (`task` calls) shown nested under their call: on Neovim 0.11 and 0.7, against the real
``tether serve``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .conftest import Editor

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
