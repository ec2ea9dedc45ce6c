"""The front matter of a Markdown file tether reads (an agent profile, a custom command).

A file may begin with a block between two ``---`` lines of ``key: value`` pairs, the small part
of YAML these files use: a value is a plain or quoted string, an integer, ``true``/``false``, a
flow list ``[a, "b c"]``, or a block list of ``- item`` lines under a key with no value. Nothing
else of YAML is understood (no anchors, tags, nested maps or multi-line strings): such a file is
refused with :class:`FrontMatterError` rather than read some other way. Files may come from a
repository, so the parser builds only strings, integers, booleans and lists of strings, and
bounds the block it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

FrontValue = str | int | bool | list[str]
MAX_FRONT_MATTER_LINES = 200
_FENCE = "---"


class FrontMatterError(ValueError):
    """The front matter cannot be read; the message says where and why."""


@dataclass(frozen=True)
class Document:
    """A Markdown file split into its front matter and its body."""

    fields: dict[str, FrontValue]
    body: str


def parse_document(text: str) -> Document:
    """``text`` split into front matter (none: empty) and body (stripped of blank edges)."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines()
    if not lines or lines[0].strip() != _FENCE:
        return Document({}, text.strip())
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == _FENCE)
    except StopIteration:
        raise FrontMatterError("the front matter has no closing `---` line") from None
    if end > MAX_FRONT_MATTER_LINES:
        raise FrontMatterError(f"the front matter is over {MAX_FRONT_MATTER_LINES} lines")
    fields = _fields(lines[1:end])
    return Document(fields, "\n".join(lines[end + 1 :]).strip())


def _fields(lines: list[str]) -> dict[str, FrontValue]:
    fields: dict[str, FrontValue] = {}
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
        value = value.strip()
        if value:
            fields[key] = _value(value, number)
            open_list = None
        else:
            open_list = []
            fields[key] = open_list
    return fields


def _value(text: str, number: int) -> FrontValue:
    if text.startswith("["):
        if not text.endswith("]"):
            raise FrontMatterError(f"line {number}: a list that does not end with `]`")
        inner = text[1:-1].strip()
        return [_string(item.strip(), number) for item in _split(inner, number)] if inner else []
    if text in ("true", "false"):
        return text == "true"
    if text.lstrip("-").isdigit() and len(text) < 19:
        return int(text)
    return _string(text, number)


def _split(text: str, number: int) -> list[str]:
    """The items of a flow list, on commas outside quotes."""
    items: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for char in text:
        if quote is not None:
            current.append(char)
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
            current.append(char)
        elif char == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if quote is not None:
        raise FrontMatterError(f"line {number}: a quote that is not closed")
    items.append("".join(current))
    return items


def _string(text: str, number: int) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if text[:1] in ("&", "*", "!", "{", "|", ">", "[", '"', "'"):
        raise FrontMatterError(f"line {number}: unsupported YAML value {text!r}")
    return text


def string_field(fields: dict[str, FrontValue], name: str) -> str | None:
    """A field that must be a string (None: not given)."""
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value
    raise FrontMatterError(f"`{name}` must be a string")


def list_field(fields: dict[str, FrontValue], name: str) -> list[str] | None:
    """A list of strings; a string is split on commas (Claude Code's ``tools: a, b``)."""
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    raise FrontMatterError(f"`{name}` must be a list of names")


def int_field(fields: dict[str, FrontValue], name: str, low: int, high: int) -> int | None:
    """An integer in ``low..high`` (None: not given)."""
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FrontMatterError(f"`{name}` must be a whole number from {low} to {high}")
    return value
