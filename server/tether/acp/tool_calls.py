"""How a tool call looks to an ACP client: a title a person reads, its kind, the files it
touches (``locations``), its input, and an edit's diff as ``{path, oldText, newText}``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from tether.acp.models import AcpToolKind, DiffContent, Location
from tether.protocol.limits import MAX_JSON_DEPTH, nested_deeper_than
from tether.protocol.tools import ProposedChange
from tether.repofiles import RepoFileError, read_repo_file
from tether.tools.titles import title

_KINDS: dict[str, AcpToolKind] = {
    "read": "read",
    "edit": "edit",
    "execute": "execute",
    "search": "search",
    "other": "other",
}
_MAX_FILE_BYTES = 8 * 1024 * 1024
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


_BUILTIN_KINDS = {
    "read_file": "read",
    "list_files": "search",
    "search_text": "search",
    "write_file": "edit",
    "edit_file": "edit",
    "run_command": "execute",
}


def builtin_kind(name: str) -> str:
    """The kind of a built-in tool (``other`` for the rest), for calls replayed from history."""
    return _BUILTIN_KINDS.get(name, "other")


def acp_kind(tool_kind: str) -> AcpToolKind:
    return _KINDS.get(tool_kind, "other")


def raw_input(arguments: str) -> Any:
    """The arguments as the JSON object the model wrote (the text itself when it is not JSON, or
    nests deeper than a session keeps: such a call is refused, and its JSON could not always be
    encoded)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    return arguments if nested_deeper_than(value, MAX_JSON_DEPTH) else value


def starting_call(
    call_id: str, name: str, args: Any, kind: str, workspace: Path | None
) -> dict[str, Any]:
    """What a call says of itself as it starts: in ``tool_call`` and in a permission request."""
    return {
        "tool_call_id": call_id,
        "title": title(name, args),
        "kind": acp_kind(kind),
        "status": "pending",
        "raw_input": args,
        "locations": locations(name, args, workspace),
    }


def locations(name: str, arguments: Any, workspace: Path | None) -> list[Location] | None:
    """The file a file tool works on, as an absolute path (with the first line it reads)."""
    if not isinstance(arguments, dict) or workspace is None:
        return None
    path = arguments.get("path")
    if name not in {"read_file", "write_file", "edit_file", "list_files", "search_text"}:
        return None
    if not isinstance(path, str) or not path:
        return (
            None
            if name in {"read_file", "write_file", "edit_file"}
            else [Location(path=str(workspace))]
        )
    line = arguments.get("startLine") if name == "read_file" else None
    return [Location(path=str(workspace / path), line=line if isinstance(line, int) else None)]


def proposed_content(change: ProposedChange, workspace: Path | None) -> DiffContent:
    """An edit's proposed change as ACP shows it: the path absolute, as ACP requires."""
    path = str(workspace / change.path) if workspace is not None else change.path
    return DiffContent(path=path, old_text=change.old_text, new_text=change.new_text)


def without_diff(text: str, diff: str) -> str:
    """An edit's result text without the unified diff it ends with (shown as a diff instead)."""
    header = diff.split("\n", 1)[0]
    cut = text.find("\n" + header) if header else -1
    return text[:cut] if cut >= 0 else text


def diff_content(
    diff: str, workspace: Path | None, written: Mapping[str, str] | None = None
) -> DiffContent | None:
    """An edit's unified diff (git style, ``a/PATH`` ``b/PATH``) as the old and new text.

    The new text is the file as it is now (as the editor was last asked to write it, when
    ``written`` has its absolute path), and the old one that file with the diff taken back,
    so the editor can show the change in its place; when the file cannot be read or no longer
    matches, both sides hold only the lines of the hunks.
    """
    lines = diff.split("\n")
    old_name = next((line[4:] for line in lines if line.startswith("--- ")), None)
    new_name = next((line[4:] for line in lines if line.startswith("+++ ")), None)
    if new_name is None or not new_name.startswith("b/"):
        return None
    relative = new_name[2:]
    path = str(workspace / relative) if workspace is not None else relative
    created = old_name == "/dev/null"
    hunks = _hunks(lines)
    if not hunks:  # "Binary files … differ"
        return None
    current = (written or {}).get(path)
    if current is None and workspace is not None:
        current = _read(workspace / relative, workspace)
    if current is not None:
        old = _take_back(current, hunks)
        if old is not None:
            return DiffContent(path=path, old_text=None if created else old, new_text=current)
    old_side = "".join(line for hunk in hunks for kind, line in hunk[2] if kind != "+")
    new_side = "".join(line for hunk in hunks for kind, line in hunk[2] if kind != "-")
    return DiffContent(path=path, old_text=None if created else old_side, new_text=new_side)


Hunk = tuple[int, int, list[tuple[str, str]]]  # new start (1-based), new count, lines


def _hunks(lines: list[str]) -> list[Hunk]:
    hunks: list[Hunk] = []
    for line in lines:
        match = _HUNK.match(line)
        if match is not None:
            start, count = int(match[3]), int(match[4]) if match[4] is not None else 1
            hunks.append((start, count, []))
        elif hunks and line[:1] in {" ", "+", "-"}:
            hunks[-1][2].append((line[0], line[1:] + "\n"))
        elif hunks and line.startswith("\\") and hunks[-1][2]:
            kind, text = hunks[-1][2][-1]  # "\ No newline at end of file"
            hunks[-1][2][-1] = (kind, text.removesuffix("\n"))
    return hunks


def _take_back(current: str, hunks: list[Hunk]) -> str | None:
    """``current`` with each hunk's new lines replaced by its old ones; None if they differ."""
    lines = _with_ends(current)
    out: list[str] = []
    position = 0
    for start, count, body in hunks:
        begin = max(start - 1, 0) if count else start
        new = [text for kind, text in body if kind != "-"]
        if begin < position or lines[begin : begin + len(new)] != new:
            return None
        out += lines[position:begin]
        out += [text for kind, text in body if kind != "+"]
        position = begin + len(new)
    return "".join(out + lines[position:])


def _with_ends(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n`` (a ``\\r`` stays part of its line, as in
    the diff)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _read(path: Path, workspace: Path) -> str | None:
    """The text of a workspace file, read as a repository's file (never a FIFO or a device);
    None when it cannot be."""
    try:
        data = read_repo_file(path, max_bytes=_MAX_FILE_BYTES, inside=workspace)
        return None if data is None else data.decode("utf-8")
    except (RepoFileError, UnicodeDecodeError):
        return None
