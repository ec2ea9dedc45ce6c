"""Reading the files tether reads from a repository on its own: its ``.tether/config.toml``, its
memory files, the ignore files of a walk (and the user's own configuration file the same way).

Whoever wrote a repository chose what these paths are: a symlink to ``/dev/zero`` (which never
ends), to ``/dev/stdin`` (tether's own protocol pipe), a FIFO (whose ``open`` blocks until someone
writes), a file of gigabytes. So every such file goes through :func:`read_repo_file`, which:

- opens only a regular file: its type is checked with ``lstat`` (through a descriptor of its
  directory) *before* it is opened, so a device, FIFO or socket is never opened at all (opening
  some devices does something), and again with ``fstat`` after, comparing device and inode, so a
  file swapped in meanwhile is refused too;
- opens it without following a symlink (``O_NOFOLLOW``), without blocking (``O_NONBLOCK``) and
  without taking a terminal (``O_NOCTTY``);
- reads at most ``max_bytes`` and refuses a file over them whole (never reads it to the end);
- with ``inside``, resolves the path (symlinks followed) and refuses it unless it ends inside that
  directory, then opens it from a descriptor of that directory one component at a time, following
  no link, so a link that appears between the check and the open is refused, not followed;
- with ``follow_links=False``, refuses a path that is itself a symlink (as git does for
  ``.gitignore`` since 2.32; the directories on the way are the caller's business).

A missing file (a path, or a symlink, that leads to nothing) is ``None``; one that leads to what
no path names (``/dev/stdin`` or ``/proc/self/fd/1`` on a pipe) is refused as what it is, like a
device. Every refusal is a :class:`RepoFileError` whose ``reason``
(:class:`Refusal`) says why. This module has its own exception, uses nothing of tether, and is
used below the kernel (memory, tools) and by the configuration alike.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _NOCTTY | _CLOEXEC | _BINARY
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _CLOEXEC
_BENEATH = bool(_NOFOLLOW and _DIRECTORY) and os.open in os.supports_dir_fd


class Refusal(StrEnum):
    """Why a repository's file was not read (``data.reason`` where tether reports it)."""

    NOT_REGULAR = "not_regular"  # a directory, device, FIFO or socket (or swapped for one)
    LINK = "link"  # a symlink where none is followed
    OUTSIDE = "outside"  # resolves outside the directory it must stay in
    TOO_LARGE = "too_large"  # over the size cap
    HARD_LINKS = "hard_links"  # a hard link whose other names are not all inside the workspace
    UNREADABLE = "unreadable"  # the system refused (permissions, I/O error, a symlink loop, ...)


class RepoFileError(Exception):
    """A file that was refused or could not be read; ``detail`` says why, in words."""

    def __init__(self, path: str | os.PathLike[str], reason: Refusal, detail: str) -> None:
        super().__init__(f"{os.fspath(path)}: {detail}")
        self.path = os.fspath(path)
        self.reason = reason
        self.detail = detail


Check = Callable[[os.stat_result], None]
"""Looks at the opened file's ``fstat`` before it is read; raises :class:`RepoFileError` to
refuse it."""


def read_repo_file(
    path: Path,
    *,
    max_bytes: int,
    inside: Path | None = None,
    follow_links: bool = True,
    check: Check | None = None,
) -> bytes | None:
    """The content of the regular file at ``path`` (None when there is none), as described in the
    module's docstring. ``inside`` is a real path (symlinks resolved) or is resolved here."""
    try:
        base, parts = _locate(path, inside, follow_links)
        fd = _open_regular(path, base, parts, max_bytes)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    except ValueError as exc:  # a NUL byte in the path
        raise RepoFileError(path, Refusal.UNREADABLE, str(exc)) from None
    try:
        if check is not None:
            check(os.fstat(fd))
        data = read_at_most(fd, max_bytes + 1)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew since it was looked at
        raise _too_large(path, max_bytes)
    return data


def _locate(path: Path, inside: Path | None, follow_links: bool) -> tuple[Path, tuple[str, ...]]:
    """The directory to open from, and the components below it, of the file ``path`` names."""
    if follow_links:
        try:
            real = Path(os.path.realpath(path, strict=True))
        except FileNotFoundError:  # no file, a link to nothing, or to what no path names (a pipe)
            if inside is None:
                _refuse_unnamed(path)
                raise
            if not os.path.lexists(path):
                raise
            real = Path(os.path.realpath(path))  # refused below if it leads outside
            if real.is_relative_to(os.path.realpath(inside)):
                raise
    else:
        real = Path(os.path.realpath(path.parent, strict=True)) / path.name
    if inside is None:
        return real.parent, (real.name,)
    root = Path(os.path.realpath(inside, strict=True))
    if real == root:
        raise RepoFileError(path, Refusal.NOT_REGULAR, "it is a directory; refused")
    if not real.is_relative_to(root):
        raise RepoFileError(
            path, Refusal.OUTSIDE, f"it resolves to {real}, outside {root}; refused"
        )
    return root, real.relative_to(root).parts


def _refuse_unnamed(path: Path) -> None:
    """A path that leads to something no path names (``/dev/stdin`` or ``/proc/self/fd/1`` on a
    pipe or a socket) is refused as what it is, never taken for a missing file; one that leads
    to nothing is missing. Looked at with ``stat``, never opened."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISREG(info.st_mode):  # a deleted file still open, say
        raise RepoFileError(path, Refusal.NOT_REGULAR, "it leads to a file no path names; refused")
    raise RepoFileError(
        path, Refusal.NOT_REGULAR, f"it is {_kind(info.st_mode)}, not a regular file; refused"
    )


def _open_regular(path: Path, base: Path, parts: tuple[str, ...], max_bytes: int) -> int:
    """A descriptor of the regular file ``base/parts``, checked before and after the open."""
    if not _BENEATH:  # no openat(2): the checks on the path are all there is
        directory, name = None, str(base.joinpath(*parts))
    else:
        directory, name = _open_directory(base, parts[:-1]), parts[-1]
    try:
        before = os.stat(name, dir_fd=directory, follow_symlinks=False)
        _refuse_unusual(path, before, max_bytes)
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=directory)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise _changed(path) from None
            raise
    finally:
        if directory is not None:
            os.close(directory)
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (
        before.st_dev,
        before.st_ino,
    ):
        os.close(fd)
        raise _changed(path)
    return fd


def _open_directory(base: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of ``base/parts``, opened one component at a time without following a link."""
    directory = os.open(base, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK):  # a link appeared on the way
                    raise NotADirectoryError(exc.errno, exc.strerror) from None
                raise
            os.close(directory)
            directory = child
    except BaseException:
        os.close(directory)
        raise
    return directory


def _refuse_unusual(path: Path, info: os.stat_result, max_bytes: int) -> None:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        raise RepoFileError(path, Refusal.LINK, "it is a symbolic link; refused")
    if not stat.S_ISREG(mode):
        raise RepoFileError(
            path, Refusal.NOT_REGULAR, f"it is {_kind(mode)}, not a regular file; refused"
        )
    if info.st_size > max_bytes:
        raise _too_large(path, max_bytes)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def read_at_most(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, read in pieces of a MiB at most."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _too_large(path: Path, max_bytes: int) -> RepoFileError:
    return RepoFileError(path, Refusal.TOO_LARGE, f"it is over {max_bytes} bytes; refused")


def _changed(path: Path) -> RepoFileError:
    return RepoFileError(
        path, Refusal.NOT_REGULAR, "it changed while it was opened (a link or another file)"
    )


def _unreadable(path: Path, exc: OSError) -> RepoFileError:
    return RepoFileError(path, Refusal.UNREADABLE, f"cannot read it ({exc.strerror or exc})")
