"""Walking the workspace for the search tools: globs, skipped directories, ignore files,
stopping on cancel.

A walk never follows symlinks (a symlinked file is not listed, a symlinked directory not entered),
skips :data:`IGNORED_DIRS` below its start, and scans at most ``max_entries`` directory entries.
Unless asked to include them, it leaves out what ignore files exclude, as ripgrep does: the
``.gitignore`` and ``.ignore`` of each directory (the latter winning) apply below it, a deeper
file's rules win over a shallower one's, the last matching line of a file wins (``!`` lines
re-include), and nothing below an ignored directory is seen. The rules of the directories from
the workspace root down to the start apply too, as do ``.git/info/exclude``'s at the root. The
blocking work runs in a thread that checks a stop flag, set when the awaiting task is cancelled,
so a cancelled search does not keep a thread busy.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from tether.tools.base import ToolError

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
    and ``[!a-z]`` are classes, ``{py,pyi}`` alternatives, and a backslash escapes the next
    character. A pattern without '/' matches the file name at any depth (``*.py``).
    """

    pattern: str
    regex: re.Pattern[str]
    name_only: bool

    @classmethod
    def compile(cls, pattern: str) -> Glob:
        text = pattern.removeprefix("./")
        if not text or "\x00" in text:
            raise ToolError(f"invalid glob {pattern!r}: it is empty or contains a NUL byte")
        segments = text.split("/")
        if text.startswith("/") or ".." in segments or "" in segments:
            raise ToolError(
                f"invalid glob {pattern!r}: it must be relative, without '..' or empty segments"
            )
        try:
            regex = re.compile(_translate(segments, pattern))
        except re.error as exc:
            raise ToolError(f"invalid glob {pattern!r}: {exc}") from None
        return cls(pattern=pattern, regex=regex, name_only=len(segments) == 1)

    def matches(self, rel: str) -> bool:
        target = rel.rpartition("/")[2] if self.name_only else rel
        return self.regex.fullmatch(target) is not None


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


IGNORE_FILES = (".gitignore", ".ignore")
"""Ignore files a walk reads in every directory, in order of precedence (the last wins)."""
MAX_IGNORE_FILE_BYTES = 256 * 1024  # of one ignore file: what is over it is not read


_DIR_MARK = "ps_d"  # the group pathspec's patterns name when they match through a directory


class _Rules:
    """The rules of one directory's ignore files, applying below ``base`` (relative to the
    root: "" or "a/b/"). Parsed and compiled by pathspec; checked here with
    :meth:`GitIgnoreSpec.check_file`'s precedence (the last line that matches the path itself
    wins, else the last that matches a directory above it), without its per-call overhead,
    which was most of a walk's time."""

    __slots__ = ("_patterns", "base")

    def __init__(self, base: str, lines: list[str]) -> None:
        from pathspec import GitIgnoreSpec, RegexPattern  # ~13 ms: imported by the first walk

        self.base = base
        spec = GitIgnoreSpec.from_lines(lines)
        self._patterns = [
            (pattern.regex, pattern.include)
            for pattern in reversed(spec.patterns)
            if isinstance(pattern, RegexPattern)
            and pattern.include is not None
            and pattern.regex is not None
        ]

    def decide(self, path: str) -> bool | None:
        """True: ignored; False: re-included (``!``); None: these rules say nothing."""
        through_directory: bool | None = None
        for regex, include in self._patterns:
            match = regex.search(path)
            if match is None:
                continue
            if match.groupdict().get(_DIR_MARK) is None:
                return include
            if through_directory is None:
                through_directory = include
        return through_directory


@dataclass(frozen=True)
class Ignores:
    """The ignore rules in force in one directory, from the root's down to its own."""

    chain: tuple[_Rules, ...] = ()

    def below(self, directory: str, base: str, names: Collection[str]) -> Ignores:
        """The rules in force in ``directory`` (``base`` relative to the root), whose entries
        include ``names``: these, and those of its ignore files."""
        lines: list[str] = []
        if base == "":
            lines += _read_lines(os.path.join(directory, ".git", "info", "exclude"))
        for name in IGNORE_FILES:
            if name in names:
                lines += _read_lines(os.path.join(directory, name))
        if not lines:
            return self
        return Ignores((*self.chain, _Rules(base, lines)))

    def ignored(self, rel: str, *, is_dir: bool) -> bool:
        """Whether ``rel`` (relative to the root) is excluded: the deepest rules that say
        anything about it decide."""
        for rules in reversed(self.chain):
            if not rel.startswith(rules.base):
                continue
            decision = rules.decide(rel[len(rules.base) :] + ("/" if is_dir else ""))
            if decision is not None:
                return decision
        return False


def _read_lines(path: str) -> list[str]:
    """The lines of an ignore file (none when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_IGNORE_FILE_BYTES)
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()


def ignores_above(root: Path, start: Path) -> Ignores:
    """The rules of the directories from ``root`` down to the parent of ``start``."""
    ignores = Ignores()
    if start == root:
        return ignores
    directory, base = root, ""
    for part in start.relative_to(root).parts:
        ignores = ignores.below(str(directory), base, _names(directory))
        directory, base = directory / part, f"{base}{part}/"
    return ignores


def _names(directory: Path) -> set[str]:
    return {name for name in (*IGNORE_FILES, ".git") if (directory / name).exists()}


@dataclass
class Walk:
    files: list[WalkedFile] = field(default_factory=list)
    complete: bool = True  # False: stopped after scanning max_entries entries
    scanned: int = 0


_Pending = tuple[str, str, Ignores | None]  # a directory, its path relative to the start, rules


def walk_files(
    root: Path,
    start: Path,
    *,
    glob: Glob | None,
    max_entries: int,
    stop: threading.Event,
    include_ignored: bool = False,
) -> Walk:
    """The regular files under ``start`` (inside ``root``) that ``glob`` matches, sorted by path;
    without ``include_ignored``, those the ignore files leave in only."""
    prefix = "" if start == root else start.relative_to(root).as_posix() + "/"
    walk = Walk()
    stack: list[_Pending] = [
        (str(start), "", None if include_ignored else ignores_above(root, start))
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
            ignores = ignores.below(directory, prefix + rel_dir, names)
        for entry in entries:
            walk.scanned += 1
            if walk.scanned > max_entries:
                walk.complete = False
                stack.clear()
                break
            _visit(entry, rel_dir + entry.name, prefix, glob, walk, stack, ignores)
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
) -> None:
    try:
        if entry.is_symlink():
            return
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in IGNORED_DIRS and not (
                ignores is not None and ignores.ignored(prefix + rel, is_dir=True)
            ):
                stack.append((entry.path, rel + "/", ignores))
        elif (
            entry.is_file(follow_symlinks=False)
            and (glob is None or glob.matches(rel))
            and not (ignores is not None and ignores.ignored(prefix + rel, is_dir=False))
        ):
            info = entry.stat(follow_symlinks=False)
            walk.files.append(WalkedFile.of(prefix + rel, entry.path, info))
    except OSError:  # vanished meanwhile
        return
