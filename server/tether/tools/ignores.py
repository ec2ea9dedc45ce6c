"""The ignore files of a walk (``.gitignore``, ``.ignore``, ``.git/info/exclude``): reading them as
a repository's files, and deciding with their rules what a walk leaves out.

An ignore file is read as git reads it since 2.32: never through a symlink. It must also be a
regular file (a FIFO named ``.gitignore`` would block the walk, ``/dev/stdin`` would read
tether's own protocol pipe) of at most :data:`MAX_IGNORE_FILE_BYTES`; one that is not is left
out, and the walk says so (:attr:`IgnoreFiles.refused`). See :mod:`tether.repofiles`.

Deciding costs little per path even with many patterns. The patterns are parsed and compiled by
pathspec; then, as ripgrep's globset does, each pattern with a component that is a plain name
(``build/``, ``/dist``, ``node_modules``) or a plain extension (``*.log``) is filed under it:
such a pattern can only match a path with a segment of that name, or ending in that extension.
A path is checked against the patterns filed under its segments, and those that could not be
filed (``src/*-gen.*``); so a file of 10,000 names costs a few lookups per path, not 10,000
matches. Patterns of the last kind still cost one match each, which the walk's time budget
bounds; and a pattern that could backtrack without end runs with the walk's deadline
(:mod:`tether.tools.timed_regex`).
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tether.repofiles import RepoFileError, read_repo_file
from tether.tools.timed_regex import TimedRegex

IGNORE_FILES = (".gitignore", ".ignore")
"""Ignore files a walk reads in every directory, in order of precedence (the last wins)."""
MAX_IGNORE_FILE_BYTES = 256 * 1024  # of one ignore file: a larger one is left out

_DIR_MARK = "ps_d"  # the group pathspec's patterns name when they match through a directory
_GLOB_CHARS = frozenset("*?[\\")


class Rules:
    """The rules of one directory's ignore files (relative to that directory). Parsed and
    compiled by pathspec; checked here with :meth:`GitIgnoreSpec.check_file`'s precedence (the
    last line that matches the path itself wins, else the last that matches a directory above
    it), without its per-call overhead, and only against the patterns that could match."""

    __slots__ = ("_extensions", "_names", "_others", "_patterns")

    def __init__(self, lines: Iterable[str]) -> None:
        from pathspec import GitIgnoreSpec, RegexPattern  # ~13 ms: imported by the first walk

        self._patterns: list[tuple[TimedRegex, bool]] = []  # in the file's order
        self._names: dict[str, list[int]] = {}
        self._extensions: dict[str, list[int]] = {}
        others: list[int] = []
        for pattern in GitIgnoreSpec.from_lines(lines).patterns:
            if not isinstance(pattern, RegexPattern) or pattern.include is None:
                continue
            if pattern.regex is None or not isinstance(pattern.pattern, str):
                continue
            index = len(self._patterns)
            self._patterns.append((TimedRegex(pattern.regex), pattern.include))
            filed = _filed_under(pattern.pattern)
            if filed is None:
                others.append(index)
            else:
                kind, key = filed
                table = self._names if kind == "name" else self._extensions
                table.setdefault(key, []).append(index)
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
        for segment in path.split("/"):
            filed.update(self._names.get(segment, ()))
            dot = segment.rfind(".")
            if dot >= 0:
                filed.update(self._extensions.get(segment[dot + 1 :], ()))
        if not filed:
            return iter(self._others)
        return heapq.merge(sorted(filed, reverse=True), self._others, reverse=True)


def _filed_under(line: str) -> tuple[str, str] | None:
    """A plain name one of the pattern's components is (``("name", "build")``), else a plain
    extension one of them has (``("ext", "log")`` for ``*.log``), else None. Lines with spaces or
    escapes are not filed: pathspec trims and unescapes them, and filing must match its reading."""
    text = line.removeprefix("!")
    if not text or any(char.isspace() for char in text) or "\\" in text:
        return None
    components = [part for part in text.split("/") if part]
    if any(part in (".", "..") for part in components):
        return None
    for part in reversed(components):
        if not _GLOB_CHARS.intersection(part):
            return ("name", part)
    for part in reversed(components):
        extension = part[2:]
        if (
            part.startswith("*.")
            and extension
            and not _GLOB_CHARS.union(".").intersection(extension)
        ):
            return ("ext", extension)
    return None


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
