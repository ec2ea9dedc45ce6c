"""Bytes to lines for the file tools: binary detection, lenient decoding, long-line clipping."""

from __future__ import annotations

BINARY_SNIFF_BYTES = 8192


def is_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB marks a file as binary (the heuristic git and grep use)."""
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def decode(data: bytes) -> tuple[str, bool]:
    """The text of ``data`` and whether it was valid UTF-8 (if not, bad bytes become U+FFFD)."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), False


def split_lines(text: str) -> list[str]:
    """Lines as editors number them: split on '\\n' only, a trailing '\\r' dropped, and no empty
    last line for a final newline."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def clip(line: str, max_chars: int) -> str:
    """``line``, cut after ``max_chars`` characters with a note of how long it was."""
    if len(line) <= max_chars:
        return line
    return f"{line[:max_chars]}… [line cut: {len(line)} characters]"
