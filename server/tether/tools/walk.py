"""Walking the workspace for the search tools: globs, skipped directories, ignore files,
bounds, stopping on cancel.

A walk never follows symlinks (a symlinked file is not listed, a symlinked directory not entered),
skips :data:`IGNORED_DIRS` below its start, and scans at most ``max_entries`` directory entries
in at most ``budget`` seconds (:data:`WALK_BUDGET_SECONDS`, the reading and matching of ignore
files included); a walk cut short says so (:meth:`Walk.notes`). Unless asked to include them, it
leaves out what ignore files exclude, as ripgrep does (:mod:`tether.tools.ignores`): the
``.gitignore`` and ``.ignore`` of each directory (the latter winning) apply below it, a deeper
file's rules win over a shallower one's, the last matching line of a file wins (``!`` lines
re-include), and nothing below an ignored directory is seen. The rules of the directories from
the workspace root down to the start apply too, as do ``.git/info/exclude``'s at the root. The
blocking work runs in a thread that checks a stop flag between two entries, set when the
awaiting task is cancelled, so a cancelled search does not keep a thread busy.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypeVar

import bracex

from tether.tools.base import ToolError
from tether.tools.ignores import IgnoreFiles, Ignores, ignores_above
from tether.tools.timed_regex import TimedRegex

T = TypeVar("T")

IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".jj",
        ".bzr",
        "node_modules",
        "bower_components",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".eggs",
        ".gradle",
        ".next",
        ".nuxt",
        ".cache",
        ".idea",
        ".vs",
    }
)
"""Directory names no walk enters (version control, dependencies, caches, editor state)."""


async def run_in_thread(work: Callable[[threading.Event], T]) -> T:
    """``work(stop)`` in a worker thread; ``stop`` is set once the caller stops waiting."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(work, stop)
    finally:
        stop.set()


@dataclass(frozen=True)
class Glob:
    """A glob over '/'-separated paths relative to where the walk starts.

    ``*`` and ``?`` stay inside one path segment, ``**`` spans any number of segments, ``[a-z]``
    and ``[!a-z]`` are classes, and a backslash escapes the next character. Braces are expanded
    first, as wcmatch expands them (its ``bracex``): ``{py,pyi}`` alternatives, nested
    (``{a,b{c,d}}``), across '/' (``{src,tests}/**``) and ranges (``{1..3}``), at most
    :data:`MAX_GLOB_EXPANSIONS` patterns. A pattern (or an alternative) without '/' matches the
    file name at any depth (``*.py``).

    Each expansion is translated to one regular expression here, rather than by wcmatch's own
    translation: its expressions (which guard every ``**`` segment against ``.`` and ``..``
    with a lookahead per character) made walks 1.2 to 5.6 times slower (``bench``-style timing of
    ``walk_files`` over a site-packages tree).
    """

    pattern: str
    regexes: tuple[TimedRegex, ...]  # one per alternative: each backtracks as little as it can
    name_only: bool

    @classmethod
    def compile(cls, pattern: str) -> Glob:
        text = pattern.removeprefix("./")
        if not text or "\x00" in text:
            raise ToolError(f"invalid glob {pattern!r}: it is empty or contains a NUL byte")
        alternatives = [alternative.split("/") for alternative in _expand(text, pattern)]
        for segments in alternatives:
            if segments[0] == "" or ".." in segments or "" in segments:
                raise ToolError(
                    f"invalid glob {pattern!r}: it must be relative, without '..' or empty segments"
                )
        name_only = all(len(segments) == 1 for segments in alternatives)
        parts = [
            ("" if name_only or len(segments) > 1 else "(?:[^/]+/)*")
            + _translate(segments, pattern)
            for segments in alternatives
        ]
        try:
            regexes = tuple(TimedRegex(re.compile(part)) for part in parts)
        except re.error as exc:
            raise ToolError(f"invalid glob {pattern!r}: {exc}") from None
        return cls(pattern=pattern, regexes=regexes, name_only=name_only)

    def matches(self, rel: str, deadline: float = math.inf) -> bool:
        """Whether ``rel`` matches; :class:`TimeoutError` when ``deadline`` passes first."""
        target = rel.rpartition("/")[2] if self.name_only else rel
        for regex in self.regexes:  # a loop, not any(): a generator costs more than a match
            if regex.fullmatch(target, deadline):
                return True
        return False


MAX_GLOB_EXPANSIONS: Final = 1000
"""The most patterns a glob's braces may expand to (``{a,b}{c,d}`` is four)."""


def _expand(text: str, pattern: str) -> list[str]:
    """``text`` with its braces expanded (escapes kept for the translation); a '{' that does
    not close is refused rather than read as the character (escape it for that)."""
    try:
        expanded = bracex.expand(text, keep_escapes=True, limit=MAX_GLOB_EXPANSIONS)
    except bracex.ExpansionLimitException:
        raise ToolError(
            f"invalid glob {pattern!r}: its braces expand to more than {MAX_GLOB_EXPANSIONS} "
            "patterns"
        ) from None
    return list(dict.fromkeys(expanded))  # {a,a} once


def _translate(segments: list[str], pattern: str) -> str:
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
            continue
        parts.append(_translate_segment(segment, pattern))
        if not last:
            parts.append("/")
    return "".join(parts)


def _translate_segment(segment: str, pattern: str) -> str:
    out: list[str] = []
    in_braces = False
    i, n = 0, len(segment)
    while i < n:
        char = segment[i]
        i += 1
        if char == "*":
            while i < n and segment[i] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            cls, i = _character_class(segment, i, pattern)
            out.append(cls)
        elif char == "{":
            if in_braces:
                raise ToolError(f"invalid glob {pattern!r}: nested '{{' is not supported")
            in_braces = True
            out.append("(?:")
        elif char == "," and in_braces:
            out.append("|")
        elif char == "}" and in_braces:
            in_braces = False
            out.append(")")
        elif char == "\\" and i < n:
            out.append(re.escape(segment[i]))
            i += 1
        else:
            out.append(re.escape(char))
    if in_braces:
        raise ToolError(
            f"invalid glob {pattern!r}: '{{' without '}}' (alternatives cannot contain '/')"
        )
    return "".join(out)


def _character_class(segment: str, start: int, pattern: str) -> tuple[str, int]:
    """The regex class for ``[...]`` whose body starts at ``start``; and the index after it."""
    i = start
    if i < len(segment) and segment[i] in "!^":
        i += 1
    if i < len(segment) and segment[i] == "]":
        i += 1  # a leading ']' is literal
    end = segment.find("]", i)
    if end < 0:
        raise ToolError(f"invalid glob {pattern!r}: '[' without ']'")
    body = segment[start:end]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    body = "".join("\\" + ch if ch in "\\[]^&~|" else ch for ch in body)
    return (f"[^/{body}]" if negate else f"[{body}]"), end + 1


@dataclass(frozen=True, slots=True)
class WalkedFile:
    rel: str  # relative to the workspace root, '/'-separated
    path: str  # absolute
    size: int
    links: int = 1  # st_nlink: hard links (see tether.tools.links)
    key: tuple[int, int] = (0, 0)  # (st_dev, st_ino)

    @classmethod
    def of(cls, rel: str, path: str, info: os.stat_result) -> WalkedFile:
        return cls(rel, path, info.st_size, info.st_nlink, (info.st_dev, info.st_ino))


WALK_BUDGET_SECONDS = 10.0
"""How long one walk may take (reading and matching ignore files included)."""


@dataclass
class Walk:
    files: list[WalkedFile] = field(default_factory=list)
    stopped: Literal["entries", "time"] | None = None  # why the walk was cut short, if it was
    scanned: int = 0
    ignore_files: IgnoreFiles = field(default_factory=IgnoreFiles)
    # the paths (relative to the workspace root, sorted) of a walk that read no file's metadata,
    # in place of ``files``: what ``list_files`` needs, without an object per file
    names: list[str] | None = None

    def paths(self) -> list[str]:
        """The paths of the files walked, relative to the workspace root, sorted."""
        return self.names if self.names is not None else [file.rel for file in self.files]

    @property
    def complete(self) -> bool:
        return self.stopped is None

    def notes(self, *, max_entries: int, budget: float, what: str) -> list[str]:
        """What the model should know of the walk: whether it was cut short (``what`` says what
        is incomplete) and how to narrow it, and the ignore files that were left out."""
        notes: list[str] = []
        if self.stopped == "entries":
            notes.append(
                f"[stopped after scanning {max_entries} entries, so {what}: narrow with path]"
            )
        elif self.stopped == "time":
            notes.append(
                f"[stopped after {budget:g} s of walking ({self.scanned} entries scanned), so "
                f"{what}: narrow with path or glob, or set include_ignored to skip the ignore "
                "files' rules]"
            )
        refused = self.ignore_files.refused
        if refused:
            shown = "; ".join(refused[:3]) + (
                f"; and {len(refused) - 3} more" if len(refused) > 3 else ""
            )
            notes.append(f"[ignore files left out (their rules do not apply): {shown}]")
        return notes


_Pending = tuple[str, str, Ignores | None]  # a directory, its path relative to the start, rules


def walk_files(
    root: Path,
    start: Path,
    *,
    glob: Glob | None,
    max_entries: int,
    stop: threading.Event,
    include_ignored: bool = False,
    budget: float = WALK_BUDGET_SECONDS,
) -> Walk:
    """The regular files under ``start`` (inside ``root``) that ``glob`` matches, sorted by path;
    without ``include_ignored``, those the ignore files leave in only. The walk stops early when
    ``stop`` is set, after ``max_entries`` entries, or after ``budget`` seconds."""
    deadline = time.monotonic() + budget
    prefix = "" if start == root else start.relative_to(root).as_posix() + "/"
    walk = Walk()
    files = walk.ignore_files
    stack: list[_Pending] = [
        (str(start), "", None if include_ignored else ignores_above(root, start, files))
    ]
    while stack and not stop.is_set():
        directory, rel_dir, ignores = stack.pop()
        try:
            with os.scandir(directory) as scanned:  # no more than may still be scanned
                entries = list(itertools.islice(scanned, max_entries - walk.scanned + 1))
        except OSError:  # unreadable or vanished directory: skip it
            continue
        if ignores is not None:
            names = {entry.name for entry in entries}
            ignores = ignores.below(directory, prefix + rel_dir, names, files)
        for entry in entries:
            if stop.is_set():
                break
            if walk.scanned >= max_entries:
                walk.stopped = "entries"
            elif time.monotonic() > deadline:
                walk.stopped = "time"
            else:
                walk.scanned += 1
                try:
                    _visit(
                        entry, rel_dir + entry.name, prefix, glob, walk, stack, ignores, deadline
                    )
                except TimeoutError:  # a pattern that backtracks, stopped at the deadline
                    walk.stopped = "time"
            if walk.stopped is not None:
                stack.clear()
                break
    walk.files.sort(key=lambda file: file.rel)
    return walk


def _visit(
    entry: os.DirEntry[str],
    rel: str,
    prefix: str,
    glob: Glob | None,
    walk: Walk,
    stack: list[_Pending],
    ignores: Ignores | None,
    deadline: float,
) -> None:
    try:
        if entry.is_symlink():
            return
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in IGNORED_DIRS and not (
                ignores is not None
                and ignores.ignored(prefix + rel, is_dir=True, deadline=deadline)
            ):
                stack.append((entry.path, rel + "/", ignores))
        elif (
            entry.is_file(follow_symlinks=False)
            and (glob is None or glob.matches(rel, deadline))
            and not (
                ignores is not None
                and ignores.ignored(prefix + rel, is_dir=False, deadline=deadline)
            )
        ):
            info = entry.stat(follow_symlinks=False)
            walk.files.append(WalkedFile.of(prefix + rel, entry.path, info))
    except TimeoutError:  # an OSError, but a pattern stopped at the deadline: the walk stops
        raise
    except OSError:  # vanished meanwhile
        return
