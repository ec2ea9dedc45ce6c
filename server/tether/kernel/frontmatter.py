"""The front matter of the Markdown files tether reads: agent profiles and slash commands.

A file may begin with a block between two ``---`` lines of ``key: value`` pairs, the small part
of YAML these files use: a value is a plain or quoted string, an integer, a flow list
``[a, "b"]`` or a block list of ``- item`` lines under a key with no value. Nothing else of YAML
is understood (no anchors, tags, nested maps or multi-line strings). Files may come from a
repository, so the block read is bounded and nothing in it is evaluated.

:func:`parse_document` checks only the block's shape (``key: value`` lines, list items, no
nested lines, no key twice) and keeps each value as written: a key nobody asks for is ignored
whatever its value (Claude Code's own keys, say). The accessors read a value as what the caller
needs, and raise :class:`FrontMatterError` when it is not that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RawValue = str | list[str]
"""An inline value as written (stripped), or the items of a block list."""
MAX_FRONT_MATTER_LINES = 200
_FENCE = "---"
_YAML_ONLY = ("&", "*", "!", "{", "|", ">")  # anchors, aliases, tags, maps, block scalars


class FrontMatterError(ValueError):
    """The front matter cannot be read; the message says where and why."""


@dataclass(frozen=True)
class Document:
    """A Markdown file split into its front matter and its body (as written)."""

    fields: dict[str, RawValue]
    body: str


def parse_document(text: str) -> Document:
    """``text`` split into front matter (none: empty) and the body that follows it."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        return Document({}, text)
    end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == _FENCE), None)
    if end is None:
        raise FrontMatterError("the front matter has no closing `---` line")
    if end > MAX_FRONT_MATTER_LINES:
        raise FrontMatterError(f"the front matter is over {MAX_FRONT_MATTER_LINES} lines")
    return Document(_fields(lines[1:end]), "".join(lines[end + 1 :]))


def _fields(lines: list[str]) -> dict[str, RawValue]:
    fields: dict[str, RawValue] = {}
    open_list: list[str] | None = None  # the block list being read, under its key
    for number, raw in enumerate(lines, 2):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") or stripped == "-":
            if open_list is None:
                raise FrontMatterError(f"line {number}: a list item outside a list")
            open_list.append(_string(stripped[1:].strip(), number))
            continue
        if line[0].isspace():
            raise FrontMatterError(f"line {number}: nested values are not supported")
        key, colon, value = line.partition(":")
        key = key.strip()
        if not colon or not key:
            raise FrontMatterError(f"line {number}: expected `key: value`")
        if key in fields:
            raise FrontMatterError(f"line {number}: `{key}` is given twice")
        open_list = None if value.strip() else []
        fields[key] = value.strip() if open_list is None else open_list
    return fields


def unquoted(text: str) -> str:
    """``text`` without the quotes around it, if it has a pair."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _string(text: str, number: int | None = None) -> str:
    """A plain or quoted string; YAML beyond that is refused (not read some other way)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text.startswith(_YAML_ONLY) or text[:1] in ("'", '"'):
        where = "" if number is None else f"line {number}: "
        raise FrontMatterError(f"{where}unsupported YAML value {text!r}")
    return text


def text_field(fields: dict[str, RawValue], name: str) -> str | None:
    """A value as written, quotes removed (``argument-hint: [file]`` is the text ``[file]``);
    None when not given."""
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return None if value is None else unquoted(value)
    raise FrontMatterError(f"`{name}` must be a single value, not a list")


def string_field(fields: dict[str, RawValue], name: str) -> str | None:
    """A plain or quoted string (None: not given)."""
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, list) or value.startswith("["):
        raise FrontMatterError(f"`{name}` must be a string")
    try:
        return _string(value)
    except FrontMatterError as exc:
        raise FrontMatterError(f"`{name}`: {exc}") from None


def list_field(fields: dict[str, RawValue], name: str) -> list[str] | None:
    """A list of names: a block list, a flow list ``[a, b]``, or ``a, b`` / ``a b`` (Claude
    Code's ``tools: a, b``); None when not given."""
    value = fields.get(name)
    if value is None or isinstance(value, list):
        return value
    inner = value
    if value.startswith("["):
        if not value.endswith("]"):
            raise FrontMatterError(f"`{name}`: a list that does not end with `]`")
        inner = value[1:-1]
    try:
        names = (_string(part) for part in re.split(r"[,\s]+", inner))
        return [item for item in names if item]
    except FrontMatterError as exc:
        raise FrontMatterError(f"`{name}`: {exc}") from None


def int_field(fields: dict[str, RawValue], name: str, low: int, high: int) -> int | None:
    """An integer in ``low..high`` (None: not given)."""
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value):
        number = int(value)
        if low <= number <= high:
            return number
    raise FrontMatterError(f"`{name}` must be a whole number from {low} to {high}")
