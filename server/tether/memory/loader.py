"""Memory entries: Markdown files that are appended to the system prompt.

``memory.paths`` lists files and directories; a relative path is relative to the workspace, an
absolute one (``~`` expanded) may be anywhere. A directory contributes its ``*.md`` files, searched
recursively without entering hidden directories or symlinked ones. Entries come in the order of
``memory.paths``, and within a directory sorted by path; a file reached twice is used once.

A workspace-relative path, and every entry found through it, must stay inside the workspace even
through symlinks, and a file found through it that has several hard links is read only when all
of them are inside the workspace (:mod:`tether.tools.links`): a repository cannot pull files from
elsewhere into the prompt.

The default path (``.tether/memory``) may be missing; any other configured path that is missing is
a :class:`ConfigError`, and a file that cannot be read is a :class:`MemoryLoadError`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from tether.memory.errors import MemoryLoadError, bad_path
from tether.tools.links import LinkCensus

DEFAULT_MEMORY_PATH = ".tether/memory"  # the default of ``MemoryConfig.paths``
DEFAULT_MAX_MEMORY_BYTES = 64 * 1024


@dataclass(frozen=True)
class MemoryEntry:
    name: str  # as headed in the prompt: relative to the workspace when inside it
    path: Path  # the real path of the file
    text: str


def load_memory(
    workspace: Path, paths: Sequence[str], *, max_bytes: int = DEFAULT_MAX_MEMORY_BYTES
) -> str:
    """The text to append to the system prompt ('' when there is no memory)."""
    return render_memory(read_memory(workspace, paths, max_bytes=max_bytes))


def surely_no_memory(workspace: Path, paths: Sequence[str]) -> bool:
    """Whether ``paths`` give no memory, as told without reading or resolving anything: none
    are configured, or only the default, and it does not exist (one ``lstat``, cheap enough for
    the event loop, where a run would otherwise hand :func:`load_memory` to a thread for
    nothing). False means "ask :func:`load_memory`", which decides everything else, errors
    included."""
    default = PurePath(DEFAULT_MEMORY_PATH)
    if any(PurePath(configured) != default for configured in paths):
        return False
    if not paths:
        return True
    try:
        os.lstat(workspace / DEFAULT_MEMORY_PATH)
    except (FileNotFoundError, NotADirectoryError):
        return True  # what load_memory says of an absent default
    except (OSError, ValueError):
        return False  # load_memory reports it
    return False


def render_memory(entries: Sequence[MemoryEntry]) -> str:
    if not entries:
        return ""
    blocks = [f"## {entry.name}\n\n{entry.text.strip()}" for entry in entries]
    return "# Memory\n\n" + "\n\n".join(blocks)


def read_memory(
    workspace: Path, paths: Sequence[str], *, max_bytes: int = DEFAULT_MAX_MEMORY_BYTES
) -> list[MemoryEntry]:
    """The non-empty memory entries under ``paths``, in prompt order."""
    root = Path(os.path.realpath(workspace))
    census = LinkCensus(root)
    entries: list[MemoryEntry] = []
    seen: set[Path] = set()
    remaining = max_bytes
    for configured in paths:
        in_workspace, files = _entry_files(root, configured)
        for real, name in files:
            if real in seen:
                continue
            seen.add(real)
            text, size = _read(real, name, remaining, max_bytes, census if in_workspace else None)
            remaining -= size
            if text.strip():
                entries.append(MemoryEntry(name=name, path=real, text=text))
    return entries


def _entry_files(root: Path, configured: str) -> tuple[bool, list[tuple[Path, str]]]:
    """Whether ``configured`` is workspace-relative, and the (real path, name) of each file it
    contributes, in order."""
    in_workspace, real = _resolve(root, configured)
    if real is None:
        return in_workspace, []
    if real.is_dir():
        found = sorted(_markdown_files(real, configured), key=lambda item: item[0])
        files = [(Path(os.path.realpath(path)), path, rel) for rel, path in found]
    elif real.is_file():
        files = [(real, str(real), "")]
    else:
        raise bad_path(f"memory path {configured!r} is not a file or a directory", configured)
    result: list[tuple[Path, str]] = []
    for target, path, rel in files:
        if in_workspace and not target.is_relative_to(root):
            raise MemoryLoadError(
                f"memory file {path} links outside the workspace ({target}); refused", path
            )
        if Path(path).is_relative_to(root):
            name = Path(path).relative_to(root).as_posix()
        else:
            name = f"{configured.rstrip('/')}/{rel}" if rel else configured
        result.append((target, name))
    return in_workspace, result


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
        raise bad_path(f"memory path {configured!r} does not exist", configured) from None
    except (OSError, RuntimeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise bad_path(f"memory path {configured!r} is not usable: {reason}", configured) from None
    if in_workspace and not real.is_relative_to(root):
        raise bad_path(
            f"memory path {configured!r} resolves outside the workspace ({real}); refused",
            configured,
        )
    return in_workspace, real


def _markdown_files(directory: Path, configured: str) -> Iterator[tuple[str, str]]:
    """(path relative to ``directory``, path) of each ``*.md`` file below it."""

    def fail(exc: OSError) -> None:
        where = exc.filename or str(directory)
        raise MemoryLoadError(f"cannot read memory directory {where}: {exc.strerror}", configured)

    for current, dirs, files in os.walk(directory, onerror=fail):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        for name in files:
            if name.lower().endswith(".md") and not name.startswith("."):
                path = os.path.join(current, name)
                if os.path.isfile(path):
                    yield PurePath(os.path.relpath(path, directory)).as_posix(), path


def _read(
    real: Path, name: str, remaining: int, max_bytes: int, census: LinkCensus | None
) -> tuple[str, int]:
    """The text of a memory file and its size in bytes, within the ``remaining`` budget;
    with ``census``, a file whose hard links are not all inside the workspace is refused."""
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise MemoryLoadError(f"memory file {name} is not a regular file", name)
            if census is not None and not census.all_inside(info):
                raise MemoryLoadError(
                    f"memory file {name} has {info.st_nlink} hard links and only "
                    f"{census.inside(info)} of them are inside the workspace; refused",
                    name,
                )
            data = file.read(remaining + 1)
    except OSError as exc:
        raise MemoryLoadError(f"cannot read memory file {name}: {exc.strerror}", name) from None
    if len(data) > remaining:
        raise MemoryLoadError(
            f"memory is too large: the files under memory.paths pass the limit of {max_bytes} "
            f"bytes at {name}; shorten or remove some of them",
            name,
        )
    try:
        return data.decode("utf-8-sig"), len(data)
    except UnicodeDecodeError as exc:
        raise MemoryLoadError(
            f"memory file {name} is not UTF-8 text (byte {exc.start} is invalid)", name
        ) from None
