"""The ignore files of a walk (``.gitignore``, ``.ignore``, ``.git/info/exclude``): reading them as
a repository's files, and deciding with their rules what a walk leaves out.

An ignore file is read as git reads it since 2.32: never through a symlink. It must also be a
regular file (a FIFO named ``.gitignore`` would block the walk, ``/dev/stdin`` would read
tether's own protocol pipe) of at most :data:`MAX_IGNORE_FILE_BYTES`; one that is not is left
out, and the walk says so (:attr:`IgnoreFiles.refused`). See :mod:`tether.repofiles`.

Deciding costs little per path even with many patterns. The patterns are parsed and compiled by
pathspec; then, as ripgrep's globset does, each pattern is filed under what one of its
components needs a path segment to be: a plain name (``build/``, ``/dist``, ``node_modules``),
else the longest literal start or end (``*.log``: segments ending in ``.log``; ``npm-debug*``).
A path is checked against the patterns filed under its segments and those that could not be
filed (``*.py[cod]``, ``*``); so a file of 10,000 names or extensions costs a few lookups per
path, not 10,000 matches. Patterns of the last kind still cost one match each, which the walk's
time budget bounds; and a pattern that could backtrack without end runs with the walk's deadline
(:mod:`tether.tools.timed_regex`).
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tether.repofiles import RepoFileError, read_repo_file
from tether.tools.timed_regex import TimedRegex

if TYPE_CHECKING:
    from pathspec import Pattern

IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")
"""Ignore files a walk reads in every directory, in order of precedence (the last wins), as
ripgrep reads them (``.rgignore`` is ripgrep's own)."""
MAX_IGNORE_FILE_BYTES = 256 * 1024  # of one ignore file: a larger one is left out

_DIR_MARK = "ps_d"  # the group pathspec's patterns name when they match through a directory
_GLOB_CHARS = frozenset("*?[]")  # a literal start or end stops at any of them


class Rules:
    """The rules of one directory's ignore files (relative to that directory). Parsed and
    compiled by pathspec; checked here with :meth:`GitIgnoreSpec.check_file`'s precedence (the
    last line that matches the path itself wins, else the last that matches a directory above
    it), without its per-call overhead, and only against the patterns that could match."""

    __slots__ = ("_names", "_others", "_patterns", "_prefixes", "_suffixes")

    def __init__(self, lines: Iterable[str]) -> None:
        from pathspec import RegexPattern

        self._patterns: list[tuple[TimedRegex, bool]] = []  # in the file's order
        self._names: dict[str, list[int]] = {}
        self._prefixes = _Literals(ends=False)
        self._suffixes = _Literals(ends=True)
        others: list[int] = []
        for pattern in _parsed(lines):
            if not isinstance(pattern, RegexPattern) or pattern.include is None:
                continue
            if pattern.regex is None or not isinstance(pattern.pattern, str):
                continue
            index = len(self._patterns)
            self._patterns.append((TimedRegex(pattern.regex), pattern.include))
            filed = _filed_under(pattern.pattern)
            if filed is None:
                others.append(index)
            elif filed[0] == "name":
                self._names.setdefault(filed[1], []).append(index)
            else:
                (self._prefixes if filed[0] == "prefix" else self._suffixes).add(filed[1], index)
        self._others = others[::-1]  # last first

    def decide(self, path: str, deadline: float = math.inf) -> bool | None:
        """True: ignored; False: re-included (``!``); None: these rules say nothing.
        :class:`TimeoutError` when ``deadline`` passes first."""
        through_directory: bool | None = None
        for index in self._candidates(path):
            regex, include = self._patterns[index]
            groups = regex.search(path, deadline)
            if groups is None:
                continue
            if groups.get(_DIR_MARK) is None:
                return include
            if through_directory is None:
                through_directory = include
        return through_directory

    def _candidates(self, path: str) -> Iterator[int]:
        """The indexes of the patterns that could match ``path``, last first."""
        filed: set[int] = set()
        names = self._names
        for segment in path.split("/"):
            hit = names.get(segment)
            if hit is not None:
                filed.update(hit)
            self._prefixes.find(segment, filed)
            self._suffixes.find(segment, filed)
        if not filed:
            return iter(self._others)
        return heapq.merge(sorted(filed, reverse=True), self._others, reverse=True)


class _Literals:
    """Patterns filed under a literal start (or end) of one of their components, looked up by
    the starts (ends) of a path's segments of the lengths that are filed."""

    __slots__ = ("_lengths", "_table", "ends")

    def __init__(self, *, ends: bool) -> None:
        self.ends = ends
        self._table: dict[str, list[int]] = {}
        self._lengths: list[int] = []  # ascending

    def add(self, literal: str, index: int) -> None:
        self._table.setdefault(literal, []).append(index)
        if len(literal) not in self._lengths:
            self._lengths = sorted([*self._lengths, len(literal)])

    def find(self, segment: str, found: set[int]) -> None:
        table, size = self._table, len(segment)
        for length in self._lengths:
            if length > size:
                break
            hit = table.get(segment[size - length :] if self.ends else segment[:length])
            if hit is not None:
                found.update(hit)


def _parsed(lines: Iterable[str]) -> list[Pattern]:
    """The patterns of ``lines``; a line pathspec refuses (``!`` alone, say) is left out, as git
    leaves it out, rather than failing the walk."""
    from pathspec import GitIgnoreSpec  # ~13 ms: imported by the first walk

    lines = list(lines)
    try:
        return list(GitIgnoreSpec.from_lines(lines).patterns)
    except ValueError:
        pass
    patterns: list[Pattern] = []
    for line in lines:
        try:
            patterns += GitIgnoreSpec.from_lines([line]).patterns
        except ValueError:
            continue
    return patterns


def _filed_under(line: str) -> tuple[str, str] | None:
    """What a match of the pattern needs a path segment to be: a plain name one of its
    components is (``("name", "build")``), else the longest literal start or end one of them has
    (``("suffix", ".log")`` for ``*.log``, ``("prefix", "npm-debug.log")``); else None. Lines
    with spaces or escapes are not filed: pathspec trims and unescapes them, and filing must
    read them as it does."""
    text = line.removeprefix("!")
    if not text or any(char.isspace() for char in text) or "\\" in text:
        return None
    components = [part for part in text.split("/") if part]
    if any(part in (".", "..") for part in components):
        return None
    best: tuple[str, str] | None = None
    for part in components:
        glob = [index for index, char in enumerate(part) if char in _GLOB_CHARS]
        if not glob:
            return ("name", part)
        for kind, literal in (("prefix", part[: glob[0]]), ("suffix", part[glob[-1] + 1 :])):
            if literal and (best is None or len(literal) > len(best[1])):
                best = (kind, literal)
    return best


@dataclass
class IgnoreFiles:
    """The ignore files one walk reads: each distinct content compiled once (a tree may repeat
    one file in every directory), and the files that were left out, with why."""

    refused: list[str] = field(default_factory=list)  # "path: why", relative to the root
    _compiled: dict[str, Rules] = field(default_factory=dict)

    def rules(self, directory: str, base: str, names: Collection[str]) -> Rules | None:
        """The rules of ``directory``'s ignore files (``base``: its path relative to the root,
        "" for the root itself, whose ``.git/info/exclude`` counts too)."""
        lines: list[str] = []
        if base == "":
            lines += self._lines(directory, os.path.join(".git", "info", "exclude"), base)
        for name in IGNORE_FILES:
            if name in names:
                lines += self._lines(directory, name, base)
        if not lines:
            return None
        key = "\n".join(lines)
        rules = self._compiled.get(key)
        if rules is None:
            rules = self._compiled[key] = Rules(lines)
        return rules

    def _lines(self, directory: str, name: str, base: str) -> list[str]:
        """The lines of the ignore file ``directory/name`` (none when it is missing or refused)."""
        try:
            data = read_repo_file(
                Path(directory, name),
                max_bytes=MAX_IGNORE_FILE_BYTES,
                inside=Path(directory),
                follow_links=False,
            )
        except RepoFileError as exc:
            self.refused.append(f"{base}{Path(name).as_posix()}: {exc.detail}")
            return []
        return [] if data is None else data.decode("utf-8", errors="replace").splitlines()


@dataclass(frozen=True)
class Ignores:
    """The ignore rules in force in one directory, from the root's down to its own: each with
    the path (relative to the root: "" or "a/b/") below which it applies."""

    chain: tuple[tuple[str, Rules], ...] = ()

    def below(
        self, directory: str, base: str, names: Collection[str], files: IgnoreFiles
    ) -> Ignores:
        """The rules in force in ``directory`` (``base`` relative to the root), whose entries
        include ``names``: these, and those of its ignore files."""
        rules = files.rules(directory, base, names)
        return self if rules is None else Ignores((*self.chain, (base, rules)))

    def ignored(self, rel: str, *, is_dir: bool, deadline: float = math.inf) -> bool:
        """Whether ``rel`` (relative to the root) is excluded: the deepest rules that say
        anything about it decide. :class:`TimeoutError` when ``deadline`` passes first."""
        for base, rules in reversed(self.chain):
            if not rel.startswith(base):
                continue
            decision = rules.decide(rel[len(base) :] + ("/" if is_dir else ""), deadline)
            if decision is not None:
                return decision
        return False


def ignores_above(root: Path, start: Path, files: IgnoreFiles) -> Ignores:
    """The rules of the directories from ``root`` down to the parent of ``start``."""
    ignores = Ignores()
    if start == root:
        return ignores
    directory, base = root, ""
    for part in start.relative_to(root).parts:
        ignores = ignores.below(str(directory), base, _names(directory), files)
        directory, base = directory / part, f"{base}{part}/"
    return ignores


def _names(directory: Path) -> set[str]:
    return {name for name in (*IGNORE_FILES, ".git") if os.path.lexists(directory / name)}
