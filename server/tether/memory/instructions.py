"""Project instructions: the ``AGENTS.md`` files a run's system prompt starts with.

The files looked for are named by ``instructions.files`` (default ``["AGENTS.md"]``), in order,
in these places, in this order:

1. the user's configuration directory (``<config>/tether/``, beside ``config.toml``);
2. the session's workspace root;
3. each directory below the root down to the directory the turn works in, when the run names
   one (``kernel/run``'s ``directory``): the nested files come after the root's, the deepest
   last, so the closest instructions are read last.

A workspace's files are a repository's: each is read through
:func:`tether.repofiles.read_repo_file` (a regular file only, never a device, FIFO or socket;
within :data:`MAX_INSTRUCTIONS_BYTES`; a symlink must stay inside the workspace; a file with
several hard links is read only when all of them are inside). A file that cannot be used is a
problem (:class:`~tether.memory.errors.InstructionsLoadError`) reported beside the instructions
that could be read, which the run reports as a warning: never a failed run. All of them together
are capped at :data:`MAX_INSTRUCTIONS_BYTES` too: a file that would pass the cap is left out.

Every run asks for its instructions, so :class:`InstructionLoader` keeps what it read of each
file (its text, or why it was left out) with the file's identity (device, inode, size, mtime):
while no file changed, a run costs one ``stat`` per place looked in (:meth:`~InstructionLoader.
cached`, cheap enough for the event loop); a change, a new file or an error is read again on a
thread (:meth:`~InstructionLoader.load`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tether.memory.errors import InstructionsLoadError
from tether.protocol import ConfigError
from tether.repofiles import Refusal, RepoFileError, read_repo_file
from tether.tools.links import LinkCensus

DEFAULT_INSTRUCTION_FILES = ("AGENTS.md",)
MAX_INSTRUCTIONS_BYTES = 64 * 1024
"""The most one instruction file, and all of them together, may weigh."""

_Identity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


@dataclass(frozen=True)
class InstructionFile:
    name: str  # as headed in the prompt and listed by session/get: relative to the workspace
    text: str


@dataclass(frozen=True)
class Instructions:
    """The instruction files in effect, in prompt order, and those left out and why."""

    files: tuple[InstructionFile, ...] = ()
    problems: tuple[ConfigError, ...] = ()

    @property
    def paths(self) -> list[str]:
        return [file.name for file in self.files]

    @property
    def text(self) -> str:
        """What the system prompt gets ('' without instructions)."""
        if not self.files:
            return ""
        blocks = [f"## {file.name}\n\n{file.text.strip()}" for file in self.files]
        return "# Instructions\n\n" + "\n\n".join(blocks)


@dataclass(frozen=True)
class _Place:
    path: Path  # where the file would be
    name: str  # as the prompt heads it
    inside: Path | None  # the workspace root it must stay in (None: the user's own file)


@dataclass(frozen=True)
class _Read:
    """What a file held when it had ``identity``: its text, or why it was left out."""

    identity: _Identity
    text: str | None
    problem: InstructionsLoadError | None
    size: int = 0  # bytes of the text in UTF-8


_ABSENT = _Read((0, 0, 0, 0), None, None)
_MAX_PLACE_LISTS = 1024  # folders whose places are kept (then they are worked out again)


class InstructionLoader:
    """Finds and reads instruction files, keeping what it read until a file changes."""

    def __init__(self, user_dir: Path | None, *, max_bytes: int = MAX_INSTRUCTIONS_BYTES) -> None:
        """``user_dir``: the user's configuration directory (None: there is none)."""
        self._user_dir = user_dir
        self._max_bytes = max_bytes
        self._reads: dict[Path, _Read] = {}
        self._roots: dict[Path, Path] = {}
        self._place_lists: dict[tuple[Path, Path | None, tuple[str, ...]], list[_Place]] = {}
        self._lock = threading.Lock()  # load runs on threads, cached on the event loop

    def cached(
        self, workspace: Path, directory: Path | None, names: Sequence[str]
    ) -> Instructions | None:
        """The instructions, when none of their files changed since they were read (a
        ``stat`` each); None when some must be read (ask :meth:`load`, on a thread).
        ``directory``: a real path inside the workspace's (:func:`~tether.kernel.kernel.
        turn_directory`)."""
        reads: list[tuple[_Place, _Read]] = []
        for place in self._places(self._root(workspace), directory, names):
            found = self._known(place.path)
            if found is None:
                return None
            reads.append((place, found))
        return self._assemble(reads)

    def load(self, workspace: Path, directory: Path | None, names: Sequence[str]) -> Instructions:
        """The instructions, reading the files that changed (blocking: on a thread)."""
        reads = [
            (place, self._known(place.path) or self._read(place))
            for place in self._places(self._root(workspace), directory, names)
        ]
        return self._assemble(reads)

    def _root(self, workspace: Path) -> Path:
        """The real path of a workspace root, resolved once (its files are checked to stay
        inside it when they are read, through a descriptor of that very directory)."""
        root = self._roots.get(workspace)
        if root is None:
            root = self._roots[workspace] = Path(os.path.realpath(workspace))
        return root

    def _places(
        self, workspace: Path, directory: Path | None, names: Sequence[str]
    ) -> list[_Place]:
        """Where files are looked for, in prompt order, worked out once per workspace, folder
        and names (paths are slow to build: most of what a run's check cost before)."""
        key = (workspace, directory, tuple(names))
        places = self._place_lists.get(key)
        if places is None:
            if len(self._place_lists) >= _MAX_PLACE_LISTS:
                self._place_lists.clear()
            places = self._place_lists[key] = self._find_places(workspace, directory, names)
        return places

    def _find_places(
        self, workspace: Path, directory: Path | None, names: Sequence[str]
    ) -> list[_Place]:
        """Where files are looked for, in prompt order (``directory``: a real path inside the
        real path ``workspace``)."""
        places: list[_Place] = []
        if self._user_dir is not None:
            places += [
                _Place(self._user_dir / name, str(self._user_dir / name), None) for name in names
            ]
        folders = [workspace]
        if directory is not None and directory != workspace:
            parts = directory.relative_to(workspace).parts
            folders += [workspace.joinpath(*parts[: depth + 1]) for depth in range(len(parts))]
        for folder in folders:
            for name in names:
                path = folder / name
                places.append(_Place(path, path.relative_to(workspace).as_posix(), workspace))
        return places

    def _known(self, path: Path) -> _Read | None:
        """What was read of ``path`` while it is unchanged; the absent marker for no file;
        None when it must be read."""
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return _ABSENT
        except (OSError, ValueError):  # a symlink loop, say: read() reports it
            return None
        with self._lock:
            found = self._reads.get(path)
        return found if found is not None and found.identity == _identity(info) else None

    def _read(self, place: _Place) -> _Read:
        try:
            identity = _identity(os.stat(place.path))
        except (FileNotFoundError, NotADirectoryError):
            return _ABSENT
        except (OSError, ValueError):
            identity = None
        try:
            text = self._text(place)
            size = 0 if text is None else len(text.encode())
            read = _Read(identity or (0, 0, 0, 0), text, None, size)
        except InstructionsLoadError as exc:
            read = _Read(identity or (0, 0, 0, 0), None, exc)
        if identity is not None:
            with self._lock:
                self._reads[place.path] = read
        return read

    def _text(self, place: _Place) -> str | None:
        """The file's text (None: gone meanwhile), or :class:`InstructionsLoadError`."""
        census = LinkCensus(place.inside) if place.inside is not None else None

        def all_links_inside(info: os.stat_result) -> None:
            if census is not None and not census.all_inside(info):
                raise RepoFileError(
                    place.path,
                    Refusal.HARD_LINKS,
                    f"it has {info.st_nlink} hard links, not all inside the workspace; refused",
                )

        try:
            data = read_repo_file(
                place.path,
                max_bytes=self._max_bytes,
                inside=place.inside,
                check=all_links_inside,
            )
        except RepoFileError as exc:
            raise InstructionsLoadError(
                f"instruction file {place.name} was left out: {exc.detail}", place.name, exc.reason
            ) from None
        if data is None:
            return None
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InstructionsLoadError(
                f"instruction file {place.name} was left out: it is not UTF-8 text (byte "
                f"{exc.start} is invalid)",
                place.name,
                "not_utf8",
            ) from None

    def _assemble(self, reads: list[tuple[_Place, _Read]]) -> Instructions:
        files: list[InstructionFile] = []
        problems: list[ConfigError] = []
        used = 0
        for place, read in reads:
            if read.problem is not None:
                problems.append(read.problem)
            if not read.text or not read.text.strip():
                continue
            if used + read.size > self._max_bytes:
                problems.append(_over_budget(place.name, self._max_bytes))
                continue
            used += read.size
            files.append(InstructionFile(place.name, read.text))
        return Instructions(tuple(files), tuple(problems))


def _identity(info: os.stat_result) -> _Identity:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _over_budget(name: str, max_bytes: int) -> InstructionsLoadError:
    return InstructionsLoadError(
        f"instruction file {name} was left out: the instruction files pass the limit of "
        f"{max_bytes} bytes together with it (shorten them)",
        name,
        Refusal.TOO_LARGE,
    )
