"""The Neovim sections of docs/lsp.md, run as they are written there (their Lua blocks are read
from the file) against the real ``tether serve`` found as ``tether`` on PATH: 0.11's
``vim.lsp.config`` on Neovim 0.11, the ``vim.lsp.start_client`` one on Debian's 0.7. The provider
comes from the user's config.toml (the sections' ``init_options`` leave it alone), a buffer of
the project gets one client, and a buffer outside any project (the transcript tether shows, a
file elsewhere) gets none."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..neovim.conftest import NVIMS

pynvim = pytest.importorskip("pynvim", reason="pynvim is not installed (pip install -e '.[dev]')")

DOC = Path(__file__).resolve().parents[2] / "docs" / "lsp.md"
ANSWER = "Answered with the provider of config.toml."
SHOWING_TRANSCRIPT = "vim.api.nvim_buf_get_name(0):find('/transcript%-[^/]*%.md$')"


def lua_block(heading: str) -> str:
    """The first ```lua block of the section of docs/lsp.md under ``heading``."""
    text = DOC.read_text()
    section = text[text.index(f"\n## {heading}") :]
    match = re.search(r"```lua\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


@pytest.fixture(params=NVIMS)
def nvim(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, str]]:
    binary = request.param
    if binary is None:
        pytest.fail("TETHER_REQUIRE_NVIM_07 is set but `nvim` on PATH is not Neovim 0.7")
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("TETHER_LOG_LEVEL", raising=False)
    # `tether` as the sections name it: the one installed beside this Python.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": ANSWER}]))
    config = tmp_path / "xdg_config_home" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[provider]\ntype = "scripted"\nscript = {json.dumps(str(script))}\n')
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "app.py").write_text("x = 1\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "notes.txt").write_text("not in a project\n")
    session = pynvim.attach(
        "child", argv=[binary, "--embed", "--headless", "--clean", "-n", "--cmd", f"cd {project}"]
    )
    version = session.exec_lua("local v = vim.version() return v.major .. '.' .. v.minor")
    try:
        yield session, version
    finally:
        try:
            session.exec_lua(
                "for _, c in pairs(vim.lsp.get_active_clients()) do c.stop() end"
                " vim.wait(3000, function() return #vim.lsp.get_active_clients() == 0 end)"
            )
            session.quit()
        except Exception:
            pass
        session.close()


def wait(session: Any, condition: str, timeout_ms: int = 20000) -> None:
    ok = session.exec_lua(f"return vim.wait({timeout_ms}, function() return {condition} end, 20)")
    assert ok, f"timed out waiting for {condition}"


def test_the_neovim_011_section(nvim: tuple[Any, str], tmp_path: Path) -> None:
    session, version = nvim
    if version == "0.7":
        pytest.skip("the section for Neovim 0.11 and later")
    session.exec_lua(lua_block("Neovim 0.11+"))
    session.command("edit app.py")
    wait(session, "#vim.lsp.get_clients({ bufnr = 0, name = 'tether' }) == 1")
    session.exec_lua(
        "vim.lsp.get_clients({ name = 'tether' })[1]:exec_cmd({"
        " title = 'Ask tether', command = 'tether.ask', arguments = { 'Hello?' } })"
    )
    wait(session, f"{SHOWING_TRANSCRIPT} and vim.fn.search({json.dumps(ANSWER)}, 'nw') > 0")
    # The transcript is outside the project: no second server for it.
    session.exec_lua("vim.wait(300)")
    assert session.exec_lua("return #vim.lsp.get_clients({ bufnr = 0 })") == 0
    session.command(f"edit {tmp_path / 'elsewhere' / 'notes.txt'}")
    session.exec_lua("vim.wait(300)")
    assert session.exec_lua("return #vim.lsp.get_clients({ bufnr = 0 })") == 0
    assert session.exec_lua("return #vim.lsp.get_clients()") == 1


def test_the_neovim_07_section(nvim: tuple[Any, str], tmp_path: Path) -> None:
    session, version = nvim
    if version != "0.7":
        pytest.skip("the section for Neovim 0.7 to 0.10, run on 0.7")
    session.exec_lua(
        "_G.messages = {}"
        " vim.lsp.handlers['window/showMessage'] = function(_, result)"
        " table.insert(_G.messages, result.message) end"
    )
    session.exec_lua(lua_block("Neovim 0.7 to 0.10"))
    session.command("edit app.py")
    wait(session, "#vim.tbl_keys(vim.lsp.buf_get_clients(0)) == 1")
    wait(session, "vim.lsp.buf_get_clients(0)[next(vim.lsp.buf_get_clients(0))].initialized")
    session.exec_lua(
        "vim.lsp.buf.execute_command({ command = 'tether.ask', arguments = { 'Hello?' } })"
    )
    wait(session, "#_G.messages > 0")
    assert session.exec_lua("return _G.messages") == [ANSWER]
    session.command(f"edit {tmp_path / 'elsewhere' / 'notes.txt'}")
    session.exec_lua("vim.wait(300)")
    assert session.exec_lua("return #vim.tbl_keys(vim.lsp.buf_get_clients(0))") == 0
    assert session.exec_lua("return #vim.lsp.get_active_clients()") == 1
