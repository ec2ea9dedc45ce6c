"""Control characters shown as their escapes (``ESC`` as ``\\x1b``), so that text tether did not
write itself (a model's answer, a tool's output, a repository's file names and config keys in a
log line) cannot act on the terminal or log viewer that shows it: no clipboard write with OSC 52,
no link with OSC 8, no clearing or redrawing the screen, no carriage return writing over a line.
Other characters, wide and combined ones included, stay as they are."""

from __future__ import annotations

import re

# C0 controls but tab and line feed, a carriage return that does not start a CRLF, DEL and C1.
_TEXT_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")
# Every C0 control, DEL, C1, the Unicode line breaks and the marks that reorder text (bidi), which
# could make a title read as something else than the call it names.
_LINE_CONTROLS = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode()


def inert(text: str) -> str:
    """``text`` with its control characters shown as their escapes, but for tabs and line
    breaks (LF, CRLF)."""
    return _TEXT_CONTROLS.sub(_escape, text)


def printable(text: str) -> str:
    """``text`` on one line, with every control character (line breaks and tabs too) shown as
    its escape, so what the model wrote cannot redraw the screen or pass for something else."""
    return _LINE_CONTROLS.sub(_escape, text)
