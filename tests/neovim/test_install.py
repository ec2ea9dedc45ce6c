"""The plugin installed as lazy.nvim installs ``{ 'tether-dev/tether', opts = {...} }``, from a
clean configuration: the repository's root on the runtimepath (``lua/``, ``plugin/``, ``doc/``,
``syntax/``), its help tagged, its ``plugin/`` files sourced, then ``require('tether').setup``.
On Neovim 0.11 and 0.7: the commands, ``:help tether``, the highlight groups and the chat
buffer's own filetype."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, pynvim

SERVER = [sys.executable, "-m", "tether", "serve"]
RUNTIME_DIRS = ("lua", "plugin", "doc", "syntax", "ftplugin", "ftdetect")

# What lazy.nvim does for a plugin spec once it has cloned the repository into its directory.
LAZY_LIKE_INIT = """
local dir, opts = {dir}, vim.json.decode({opts})
vim.go.loadplugins = false -- lazy.nvim sources the plugins' files itself
vim.opt.runtimepath:prepend(dir)
vim.cmd('helptags ' .. vim.fn.fnameescape(dir .. '/doc'))
for _, kind in ipairs({{ 'plugin', 'ftdetect' }}) do
  for _, ext in ipairs({{ 'vim', 'lua' }}) do
    for _, file in ipairs(vim.fn.glob(dir .. '/' .. kind .. '/**/*.' .. ext, false, true)) do
      vim.cmd('source ' .. vim.fn.fnameescape(file))
    end
  end
end
require('tether').setup(opts) -- lazy.nvim's `opts`: the main module's setup
-- Stands for any plugin made for markdown buffers.
vim.api.nvim_create_autocmd('FileType', {{
  pattern = 'markdown',
  callback = function() vim.g.markdown_plugin_attached = true end,
}})
"""


@pytest.fixture
def installed(
    nvim_binary: str, tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    clone = tmp_path / "data" / "nvim" / "lazy" / "tether"
    for name in RUNTIME_DIRS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, clone / name, ignore=shutil.ignore_patterns("tags"))
    script = tmp_path / "script.json"
    script.write_text("[]")
    opts = {"cmd": SERVER, "provider": {"type": "scripted", "script": str(script)}}
    init = tmp_path / "config" / "nvim" / "init.lua"
    init.parent.mkdir(parents=True)
    init.write_text(
        LAZY_LIKE_INIT.format(dir=json.dumps(str(clone)), opts=json.dumps(json.dumps(opts)))
    )
    nvim = pynvim.attach(
        "child",
        argv=[nvim_binary, "--embed", "--headless", "-n", "-i", "NONE", "-u", str(init)],
    )
    nvim.command(f"cd {project}")
    try:
        yield nvim
    finally:
        try:
            nvim.exec_lua(
                "local c = require('tether')._state.client; require('tether').stop()"
                " if c then vim.wait(3000, function() return c.closed end, 20) end"
            )
            nvim.quit()
        except Exception:
            pass
        nvim.close()


def test_the_commands_are_there(installed: Any) -> None:
    for command in ("TetherChat", "TetherAsk", "TetherAdd", "TetherModel", "TetherSessions"):
        assert installed.eval(f"exists(':{command}')") == 2, command


@pytest.mark.parametrize(
    ("topic", "line"),
    [
        ("tether", "*tether* *tether.nvim*"),
        (":TetherAdd", "*:TetherAdd*"),
        ("tether-sessions", "*tether-sessions*"),
        ("tether-highlights", "*tether-highlights*"),
    ],
)
def test_help_opens_at_its_tag(installed: Any, topic: str, line: str) -> None:
    installed.command(f"help {topic}")
    assert installed.eval("&filetype") == "help"
    assert installed.eval("expand('%:t')") == "tether.txt"
    assert line in installed.current.line


def test_the_highlight_groups_are_linked_to_defaults(installed: Any) -> None:
    resolved = installed.exec_lua(
        """
        local groups = {}
        for group, _ in pairs(require('tether.highlights').links) do
          groups[group] = vim.fn.synIDattr(vim.fn.synIDtrans(vim.fn.hlID(group)), 'name')
        end
        return groups
        """
    )
    assert resolved["TetherDiffAdd"] == "DiffAdd"
    assert resolved["TetherHeading"] == "Title"
    assert resolved["TetherReasoning"] == "Comment"
    # A colour scheme clears them; they are linked again.
    installed.command("highlight clear")
    installed.command("doautocmd ColorScheme")
    assert installed.eval("synIDattr(synIDtrans(hlID('TetherPrompt')), 'name')") == "Question"
    # The user's own definition wins over the default link.
    installed.command("highlight TetherPrompt guifg=#ff0000")
    installed.exec_lua("require('tether.highlights').link()")
    assert installed.eval("synIDattr(synIDtrans(hlID('TetherPrompt')), 'name')") == "TetherPrompt"


def test_the_chat_buffer_has_its_own_filetype_with_markdown_syntax_inside(
    installed: Any,
) -> None:
    installed.command("TetherChat")
    installed.exec_lua("vim.wait(15000, function() return require('tether').buffer() ~= nil end)")
    buf = installed.exec_lua("return require('tether').buffer()")
    installed.exec_lua("vim.api.nvim_set_current_win(vim.fn.bufwinid(...))", buf)
    assert installed.eval("&filetype") == "tether-chat"
    assert installed.eval("b:current_syntax") == "tether-chat"
    assert installed.eval("exists('g:markdown_plugin_attached')") == 0
    # Markdown's syntax is there, included, and tether's own on its lines.
    installed.exec_lua(
        "vim.api.nvim_buf_set_lines(0, 1, 1, false, { '> a prompt', 'some **bold** text' })"
    )
    names = installed.exec_lua(
        """
        local function at(row, col)
          return vim.fn.synIDattr(vim.fn.synID(row, col, 1), 'name')
        end
        return { at(1, 1), at(2, 3), at(3, 8) }
        """
    )
    assert names[0] == "TetherHeading"
    assert names[1] == "TetherPrompt"
    assert names[2].startswith("markdownBold")
