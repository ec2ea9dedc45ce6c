"""Memory entries: Markdown files that are appended to the system prompt.

``memory.paths`` lists files and directories; a relative path is relative to the workspace, an
absolute one (``~`` expanded) may be anywhere. A directory contributes its ``*.md`` files, searched
recursively without entering hidden directories or symlinked ones, in a bounded walk
(:data:`MAX_MEMORY_ENTRIES` entries, :data:`MEMORY_WALK_SECONDS`). Entries come in the order of
``memory.paths``, and within a directory sorted by path; a file reached twice is used once.

A workspace-relative path, and every entry found through it, must stay inside the workspace even
through symlinks, and a file found through it that has several hard links is read only when all
of them are inside the workspace (:mod:`tether.tools.links`): a repository cannot pull files from
elsewhere into the prompt. Every file is read as a repository's file
(:func:`tether.repofiles.read_repo_file`): a regular file only, within the size budget.

Nothing here fails a run: a configured path that is missing (but for the default,
``.tether/memory``, which may be), a file that cannot be read or is refused, is a problem
(:mod:`tether.memory.errors`) that :func:`load_memory` reports beside the memory it could read;
the run reports it as a warning. Memory over the size budget keeps the files before the one that
passes it, and the problem names that file.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from tether.memory.errors import MemoryLoadError, bad_path
from tether.protocol import ConfigError
from tether.repofiles import Refusal, RepoFileError, read_repo_file
from tether.tools.links import LinkCensus

DEFAULT_MEMORY_PATH = ".tether/memory"  # the default of ``MemoryConfig.paths``
DEFAULT_MAX_MEMORY_BYTES = 64 * 1024
MAX_MEMORY_ENTRIES = 10_000
"""Directory entries the walk of one memory directory scans at most (a repository could put
millions there; 64 KiB of memory need a few files)."""
MEMORY_WALK_SECONDS = 2.0
"""How long the walk of one memory directory may take (it runs before every run)."""


@dataclass(frozen=True)
class MemoryEntry:
    name: str  # as headed in the prompt: relative to the workspace when inside it
    path: Path  # the real path of the file
    text: str


@dataclass(frozen=True)
class Memory:
    """What a run appends to its system prompt, and what was left out of it and why."""

    text: str = ""
    problems: tuple[ConfigError, ...] = ()


def load_memory(
    workspace: Path, paths: Sequence[str], *, max_bytes: int = DEFAULT_MAX_MEMORY_BYTES
) -> Memory:
    """The text to append to the system prompt ('' when there is no memory), and the problems."""
    entries, problems = read_memory(workspace, paths, max_bytes=max_bytes)
    return Memory(render_memory(entries), tuple(problems))


def surely_no_memory(workspace: Path, paths: Sequence[str]) -> bool:
    """Whether ``paths`` give no memory, as told without reading or resolving anything: none
    are configured, or only the default, and it does not exist (one ``lstat``, cheap enough for
    the event loop, where a run would otherwise hand :func:`load_memory` to a thread for
    nothing). False means "ask :func:`load_memory`", which decides everything else, problems
    included."""
    if any(not _is_default(configured) for configured in paths):
        return False
    if not paths:
        return True
    try:
        os.lstat(os.path.join(workspace, DEFAULT_MEMORY_PATH))
    except (FileNotFoundError, NotADirectoryError):
        return True  # what load_memory says of an absent default
    except (OSError, ValueError):
        return False  # load_memory reports it
    return False


@functools.lru_cache(maxsize=64)
def _is_default(configured: str) -> bool:
    """Whether a configured memory path names the default one (asked by every run)."""
    return PurePath(configured) == PurePath(DEFAULT_MEMORY_PATH)


def render_memory(entries: Sequence[MemoryEntry]) -> str:
    if not entries:
        return ""
    blocks = [f"## {entry.name}\n\n{entry.text.strip()}" for entry in entries]
    return "# Memory\n\n" + "\n\n".join(blocks)


def read_memory(
    workspace: Path, paths: Sequence[str], *, max_bytes: int = DEFAULT_MAX_MEMORY_BYTES
) -> tuple[list[MemoryEntry], list[ConfigError]]:
    """The non-empty memory entries under ``paths``, in prompt order, and the problems of the
    paths and files that were left out."""
    reader = _Reader(Path(os.path.realpath(workspace)), max_bytes)
    for configured in paths:
        try:
            in_workspace, files = reader.entry_files(configured)
        except ConfigError as exc:
            reader.problems.append(exc)
            continue
        if not reader.read_all(files, in_workspace):
            break  # over the budget: what comes after is left out
    return reader.entries, reader.problems


@dataclass
class _Reader:
    root: Path
    max_bytes: int
    entries: list[MemoryEntry] = field(default_factory=list)
    problems: list[ConfigError] = field(default_factory=list)
    seen: set[Path] = field(default_factory=set)
    used: int = 0

    def __post_init__(self) -> None:
        self.census = LinkCensus(self.root)

    def read_all(self, files: list[tuple[Path, str]], in_workspace: bool) -> bool:
        """Read ``files`` (real path, name) into the entries; False once over the budget."""
        for real, name in files:
            if real in self.seen:
                continue
            self.seen.add(real)
            try:
                text = self.read(real, name, in_workspace)
            except MemoryLoadError as exc:
                self.problems.append(exc)
                if exc.reason == Refusal.TOO_LARGE:
                    return False
                continue
            if text.strip():
                self.entries.append(MemoryEntry(name=name, path=real, text=text))
        return True

    def read(self, real: Path, name: str, in_workspace: bool) -> str:
        """The text of a memory file, within what is left of the budget; a file found through
        a workspace-relative path must stay inside the workspace, hard links included."""
        remaining = self.max_bytes - self.used
        try:
            data = read_repo_file(
                real,
                max_bytes=remaining,
                inside=self.root if in_workspace else None,
                check=self._all_links_inside if in_workspace else None,
            )
        except RepoFileError as exc:
            if exc.reason == Refusal.TOO_LARGE:
                raise MemoryLoadError(
                    f"memory is too large: the files under memory.paths pass the limit of "
                    f"{self.max_bytes} bytes at {name}; it and the memory after it were left "
                    "out (shorten or remove some of them)",
                    name,
                    exc.reason,
                ) from None
            raise MemoryLoadError(
                f"memory file {name} was left out: {exc.detail}", name, exc.reason
            ) from None
        if data is None:  # removed meanwhile
            return ""
        self.used += len(data)
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise MemoryLoadError(
                f"memory file {name} was left out: it is not UTF-8 text (byte {exc.start} is "
                "invalid)",
                name,
                "not_utf8",
            ) from None

    def _all_links_inside(self, info: os.stat_result) -> None:
        if not self.census.all_inside(info):
            raise RepoFileError(
                "",
                Refusal.HARD_LINKS,
                f"it has {info.st_nlink} hard links and only {self.census.inside(info)} of them "
                "are inside the workspace; refused",
            )

    def entry_files(self, configured: str) -> tuple[bool, list[tuple[Path, str]]]:
        """Whether ``configured`` is workspace-relative, and the (real path, name) of each file
        it contributes, in order (a file that links outside the workspace is a problem)."""
        in_workspace, real = _resolve(self.root, configured)
        if real is None:
            return in_workspace, []
        if real.is_dir():
            found = sorted(self._markdown_files(real, configured), key=lambda item: item[0])
            files = [(Path(os.path.realpath(path)), path, rel) for rel, path in found]
        elif real.is_file():
            files = [(real, str(real), "")]
        else:
            raise bad_path(
                f"memory path {configured!r} is not a file or a directory; left out",
                configured,
                Refusal.NOT_REGULAR,
            )
        result: list[tuple[Path, str]] = []
        for target, path, rel in files:
            if Path(path).is_relative_to(self.root):
                name = Path(path).relative_to(self.root).as_posix()
            else:
                name = f"{configured.rstrip('/')}/{rel}" if rel else configured
            if in_workspace and not target.is_relative_to(self.root):
                self.problems.append(
                    MemoryLoadError(
                        f"memory file {name} links outside the workspace ({target}); left out",
                        name,
                        Refusal.OUTSIDE,
                    )
                )
                continue
            result.append((target, name))
        return in_workspace, result

    def _markdown_files(self, directory: Path, configured: str) -> Iterator[tuple[str, str]]:
        """(path relative to ``directory``, path) of each ``*.md`` entry below it that is not a
        directory, in a walk of :data:`MAX_MEMORY_ENTRIES` entries and
        :data:`MEMORY_WALK_SECONDS` at most (a repository's tree: cut short, it is a problem,
        and the files found before are kept); a directory that cannot be read is a problem, and
        the walk goes on without it."""
        deadline = time.monotonic() + MEMORY_WALK_SECONDS
        scanned = 0
        stack = [str(directory)]
        while stack:
            current = stack.pop()
            try:
                with os.scandir(current) as listing:  # no more than may still be scanned
                    entries = list(itertools.islice(listing, MAX_MEMORY_ENTRIES - scanned + 1))
            except OSError as exc:
                self.problems.append(_unreadable(exc, current, configured))
                continue
            entries.sort(key=lambda entry: entry.name, reverse=True)  # popped in name order
            for entry in entries:
                if scanned >= MAX_MEMORY_ENTRIES or time.monotonic() > deadline:
                    self.problems.append(_walk_stopped(configured, scanned))
                    return
                scanned += 1
                if _is_directory(entry):
                    if not entry.name.startswith(".") and not entry.is_symlink():
                        stack.append(entry.path)
                elif entry.name.lower().endswith(".md") and not entry.name.startswith("."):
                    # not a regular file: a problem, later
                    yield PurePath(os.path.relpath(entry.path, directory)).as_posix(), entry.path


def _is_directory(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a directory or links to one (which is not entered, nor read)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _unreadable(exc: OSError, directory: str, configured: str) -> MemoryLoadError:
    return MemoryLoadError(
        f"cannot read memory directory {exc.filename or directory} ({exc.strerror}); left out",
        configured,
        Refusal.UNREADABLE,
    )


def _walk_stopped(configured: str, scanned: int) -> MemoryLoadError:
    return MemoryLoadError(
        f"memory directory {configured} is too large to walk: stopped after {scanned} entries "
        f"(at most {MAX_MEMORY_ENTRIES}, in {MEMORY_WALK_SECONDS:g} s); the memory files found "
        "before were read, the others left out (keep memory in a small directory)",
        configured,
        "truncated",
    )


def _resolve(root: Path, configured: str) -> tuple[bool, Path | None]:
    """Whether ``configured`` is workspace-relative, and its real path (None: an absent default)."""
    optional = PurePath(configured) == PurePath(DEFAULT_MEMORY_PATH)
    try:
        if "\x00" in configured or not configured.strip():
            raise ValueError("an empty path or a NUL byte")
        path = Path(configured).expanduser()
        in_workspace = not path.is_absolute()
        real = Path(os.path.realpath(root / path, strict=True))
    except (FileNotFoundError, NotADirectoryError):
        if optional:
            return True, None
        raise bad_path(
            f"memory path {configured!r} does not exist; left out", configured, "missing"
        ) from None
    except (OSError, RuntimeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise bad_path(
            f"memory path {configured!r} is not usable ({reason}); left out",
            configured,
            Refusal.UNREADABLE,
        ) from None
    if in_workspace and not real.is_relative_to(root):
        raise bad_path(
            f"memory path {configured!r} resolves outside the workspace ({real}); left out",
            configured,
            Refusal.OUTSIDE,
        )
    return in_workspace, real
