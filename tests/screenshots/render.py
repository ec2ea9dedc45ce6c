"""A terminal screen (pyte's, with its colours and attributes) drawn to a PNG with Pillow, in a
monospace font (DejaVu Sans Mono, Debian's fonts-dejavu-core), in a light or a dark palette.

Colours are pyte's: the sixteen ANSI names (``red``, ``brightblue``, ...; pyte calls yellow
``brown``), ``default``, or six hex digits (256-colour and 24-bit colours). A theme gives the
names their look; hex colours are drawn as they are (Neovim picks them for its own background).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyte
from PIL import Image, ImageDraw, ImageFont

FONT_SIZE = 15
PADDING = 12
COLOURS = 256  # of the PNG's palette (its most)
_FONT_DIRS = (
    Path("/usr/share/fonts/truetype/dejavu"),
    Path("/usr/share/fonts/dejavu"),
    Path("/usr/local/share/fonts"),
    Path("/Library/Fonts"),
)
_FACES = {
    (False, False): "DejaVuSansMono.ttf",
    (True, False): "DejaVuSansMono-Bold.ttf",
    (False, True): "DejaVuSansMono-Oblique.ttf",
    (True, True): "DejaVuSansMono-BoldOblique.ttf",
}


@dataclass(frozen=True)
class Theme:
    name: str
    foreground: str
    background: str
    cursor: str
    ansi: tuple[str, ...]  # black red green yellow blue magenta cyan white, then the bright ones


# The palettes of GNOME Terminal's "Tango" (dark) and of a light terminal with darker colours.
DARK = Theme(
    "dark",
    foreground="d3d7cf",
    background="1e1e1e",
    cursor="d3d7cf",
    ansi=(
        "2e3436", "cc0000", "4e9a06", "c4a000", "3465a4", "75507b", "06989a", "d3d7cf",
        "555753", "ef2929", "8ae234", "fce94f", "729fcf", "ad7fa8", "34e2e2", "eeeeec",
    ),
)  # fmt: skip
LIGHT = Theme(
    "light",
    foreground="1e1e1e",
    background="fbfbfb",
    cursor="1e1e1e",
    ansi=(
        "000000", "b3261e", "2e7d32", "8a6d00", "1f5fbf", "8e3fa8", "00798a", "bdbdbd",
        "6b6b6b", "d32f2f", "388e3c", "a07800", "2a6ed6", "9c4dcc", "0097a7", "ffffff",
    ),
)  # fmt: skip
THEMES = {"dark": DARK, "light": LIGHT}
_NAMES = ("black", "red", "green", "brown", "blue", "magenta", "cyan", "white")


class FontMissing(RuntimeError):
    """No DejaVu Sans Mono on this machine (Debian: apt-get install fonts-dejavu-core)."""


def font_path(bold: bool = False, italic: bool = False) -> Path:
    name = _FACES[bold, italic]
    for folder in _FONT_DIRS:
        if (folder / name).exists():
            return folder / name
    if shutil.which("fc-match"):
        found = subprocess.run(
            ["fc-match", "-f", "%{file}", name.removesuffix(".ttf")],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if found.endswith(name):
            return Path(found)
    raise FontMissing(f"{name} not found (Debian: apt-get install fonts-dejavu-core)")


@cache
def font(bold: bool, italic: bool) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(font_path(bold, italic)), FONT_SIZE)


def cell_size() -> tuple[int, int]:
    """The width and height of a cell, in pixels."""
    regular = font(False, False)
    ascent, descent = regular.getmetrics()
    return round(regular.getlength("M")), ascent + descent + 3


def colour(name: str, theme: Theme, *, foreground: bool) -> str:
    """``#rrggbb`` for one of pyte's colours."""
    if name == "default":
        return "#" + (theme.foreground if foreground else theme.background)
    bright = name.startswith("bright")
    base = name.removeprefix("bright")
    if base in _NAMES:
        return "#" + theme.ansi[_NAMES.index(base) + (8 if bright else 0)]
    return "#" + name


def render(screen: pyte.Screen, path: Path, theme: Theme, *, cursor: bool = True) -> None:
    """``screen`` as a PNG at ``path``: every cell's background, then its character."""
    width, height = cell_size()
    margin = backdrop(screen, theme)
    image = Image.new(
        "RGB", (screen.columns * width + 2 * PADDING, screen.lines * height + 2 * PADDING), margin
    )
    draw = ImageDraw.Draw(image)
    show_cursor = cursor and not screen.cursor.hidden
    for row in range(screen.lines):
        line = screen.buffer[row]
        y = PADDING + row * height
        for column in range(screen.columns):
            char = line[column]
            x = PADDING + column * width
            fg = colour(char.fg, theme, foreground=True)
            bg = colour(char.bg, theme, foreground=False)
            if char.reverse:
                fg, bg = bg, fg
            if show_cursor and (row, column) == (screen.cursor.y, screen.cursor.x):
                fg, bg = "#" + theme.background, "#" + theme.cursor
            wide = 2 if len(char.data) == 1 and _wide(line, column, screen.columns) else 1
            if bg != margin:
                draw.rectangle((x, y, x + width * wide - 1, y + height - 1), fill=bg)
            if char.data.strip():
                draw.text((x, y + 1), char.data, font=font(char.bold, char.italics), fill=fg)
            if char.underscore:
                draw.line((x, y + height - 2, x + width * wide - 1, y + height - 2), fill=fg)
            if char.strikethrough:
                draw.line((x, y + height // 2, x + width * wide - 1, y + height // 2), fill=fg)
    path.parent.mkdir(parents=True, exist_ok=True)
    # An adaptive palette: the same look (text on flat colours) in a third of the bytes.
    image.convert("P", palette=Image.Palette.ADAPTIVE, colors=COLOURS).save(path, optimize=True)


def backdrop(screen: pyte.Screen, theme: Theme) -> str:
    """The background most cells have (a program like Neovim paints its own): the margin's."""
    counts = Counter(
        colour(screen.buffer[row][column].bg, theme, foreground=False)
        for row in range(screen.lines)
        for column in range(screen.columns)
        if not screen.buffer[row][column].reverse
    )
    return counts.most_common(1)[0][0] if counts else "#" + theme.background


def _wide(line: dict[int, pyte.screens.Char], column: int, columns: int) -> bool:
    """pyte leaves the cell after a double-width character empty (``""``)."""
    return column + 1 < columns and line[column + 1].data == ""
