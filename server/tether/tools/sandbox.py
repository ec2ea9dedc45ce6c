"""Paths named by the model, confined to one workspace root.

Rules (each refusal is a :class:`ToolError` the model reads):

- a relative path is relative to the root; an absolute path is accepted only inside the root;
- a relative path whose ``..`` climbs above the root is refused as written; then the path is
  resolved with every symlink followed (``os.path.realpath``) and must end inside the root, so
  absolute paths elsewhere and symlinks (or symlinked parents, or chains) pointing out are refused;
- a NUL byte is refused before anything touches the filesystem;
- a file is read only if it is a regular file (never a device, FIFO or socket) no larger than a
  size cap;
- a file with more than one hard link is read or written only if all of its links are inside the
  root (:mod:`tether.tools.links`): a hard link is the same file under another name, which
  resolving symlinks cannot see.

Reading is race-free on POSIX: the resolved path is opened one component at a time from a
descriptor of the root, refusing to follow any symlink, so a path that becomes a symlink between
the check and the read is refused instead of followed. Writing is race-free the same way:
:meth:`Sandbox.resolve_for_write` also refuses a file that is itself a symlink, and
:meth:`Sandbox.open_parent` opens the file's directory by the same walk (making missing
directories with ``mkdir``, which follows no symlink either), so the writing tools create and
rename their files relative to a directory that is known to lie inside the root (see
:mod:`tether.tools.writing`).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tether.repofiles import read_at_most
from tether.tools.base import ToolError
from tether.tools.links import LinkCensus

DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block the open
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)
_OPEN_BENEATH = bool(_NOFOLLOW and _DIRECTORY) and os.open in os.supports_dir_fd


def format_size(size: int) -> str:
    """``size`` bytes for people: ``512 B``, ``1.5 KiB``, ``8.0 MiB``."""
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


class Sandbox:
    """One workspace root and the paths inside it."""

    def __init__(self, root: Path | str, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        try:
            self.root = Path(os.path.realpath(root, strict=True))
        except (OSError, ValueError) as exc:
            raise ToolError(
                f"the workspace root is not available: {root} ({_reason(exc)})"
            ) from None
        if not self.root.is_dir():
            raise ToolError(f"the workspace root is not a directory: {root}")
        self.max_file_bytes = max_file_bytes
        self.links = LinkCensus(self.root)

    def check_links(self, info: os.stat_result, shown: str) -> None:
        """Refuse the regular file ``info`` describes when some of its hard links are not
        inside the root (a single link: nothing to check)."""
        if info.st_nlink <= 1 or not stat.S_ISREG(info.st_mode):
            return
        inside = self.links.inside(info)
        if inside < info.st_nlink:
            raise LinkedFileError(shown, links=info.st_nlink, inside=inside)

    def resolve(self, path: str | os.PathLike[str], *, must_exist: bool = True) -> Path:
        """The real path (symlinks resolved) that ``path`` names inside the root.

        With ``must_exist=False`` the last components may be missing (a file about to be
        created); whatever exists is still resolved, dangling symlinks included.
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise ToolError("invalid path: it contains a NUL byte")
        if not text.strip():
            raise ToolError("invalid path: it is empty (use '.' for the workspace root)")
        candidate = self._candidate(text)
        try:
            real = Path(os.path.realpath(candidate, strict=must_exist))
        except FileNotFoundError:
            raise ToolError(f"no such file or directory: {text}") from None
        except (OSError, ValueError) as exc:
            raise ToolError(f"cannot resolve {text}: {_reason(exc)}") from None
        if not real.is_relative_to(self.root):
            raise ToolError(f"access denied: {text} is outside the workspace")
        return real

    def _candidate(self, text: str) -> Path:
        candidate = Path(text)
        if candidate.is_absolute():
            return candidate
        if os.path.normpath(text).split(os.sep)[0] == "..":
            raise ToolError(f"access denied: {text} is outside the workspace")
        return self.root / candidate

    def resolve_for_write(self, path: str, *, must_exist: bool = False) -> Path:
        """Like :meth:`resolve`, for a file about to be written: a symlink named as the file
        itself is refused (even one pointing inside), so a write never goes through a link;
        symlinked directories on the way are resolved like any path."""
        real = self.resolve(path, must_exist=must_exist)
        candidate = self._candidate(path)
        if os.path.islink(candidate):
            raise ToolError(
                f"{path} is a symbolic link (to {self.relative(real)}): "
                "name the file it points to instead"
            )
        return real

    def relative(self, real: Path) -> str:
        """``real`` (inside the root) as the model should name it: relative, '/'-separated."""
        rel = real.relative_to(self.root).as_posix()
        return rel if rel != "" else "."

    def directory(self, path: str) -> Path:
        """The real path of an existing directory inside the root."""
        real = self.resolve(path)
        if not real.is_dir():
            raise ToolError(f"not a directory: {path}")
        return real

    def read_bytes(self, path: str | os.PathLike[str], *, max_bytes: int | None = None) -> bytes:
        """The content of a regular file inside the root, refused above ``max_bytes``."""
        limit = self.max_file_bytes if max_bytes is None else max_bytes
        shown = os.fspath(path)
        fd = self.open(self.resolve(path), os.O_RDONLY, shown=shown)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{shown} is a directory, not a file")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{shown} is not a regular file (a device, FIFO or socket)")
            if info.st_size > limit:
                raise _too_large(shown, info.st_size, limit)
            self.check_links(info, shown)
            data = read_at_most(fd, limit + 1)  # the file may have grown since fstat
        finally:
            os.close(fd)
        if len(data) > limit:
            raise _too_large(shown, len(data), limit)
        return data

    def open(self, real: Path, flags: int, *, shown: str, mode: int = 0o666) -> int:
        """A descriptor for ``real`` (a result of :meth:`resolve`) opened with ``flags``.

        No symlink is followed on the way: if one appeared since ``real`` was resolved, the open is
        refused. FIFOs open without blocking; the caller checks the file type with ``fstat``.
        """
        flags |= _NONBLOCK | _CLOEXEC | _BINARY
        try:
            if not _OPEN_BENEATH:  # no openat(2): the check above is all there is
                return os.open(real, flags, mode)
            return self._open_beneath(real.relative_to(self.root).parts, flags, mode)
        except FileNotFoundError:
            raise ToolError(f"no such file or directory: {shown}") from None
        except IsADirectoryError:
            raise ToolError(f"{shown} is a directory, not a file") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise ToolError(f"access denied: {shown} changed while it was opened") from None
            raise ToolError(f"cannot open {shown}: {_reason(exc)}") from None

    def _open_beneath(self, parts: tuple[str, ...], flags: int, mode: int) -> int:
        if not parts:
            return os.open(self.root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        directory = self._walk(parts[:-1], created=None)
        try:
            return os.open(parts[-1], flags | _NOFOLLOW, mode, dir_fd=directory)
        finally:
            os.close(directory)

    def _walk(self, parts: tuple[str, ...], *, created: list[Path] | None) -> int:
        """A descriptor of the directory ``root/parts``, opened one component at a time without
        following a symlink; missing directories are made on the way when ``created`` collects
        them (``mkdir`` never follows a symlink either)."""
        directory = os.open(self.root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            for index, part in enumerate(parts):
                flags = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC
                try:
                    child = os.open(part, flags, dir_fd=directory)
                except FileNotFoundError:
                    if created is None:
                        raise
                    try:
                        os.mkdir(part, 0o777, dir_fd=directory)
                        created.append(self.root.joinpath(*parts[: index + 1]))
                    except FileExistsError:
                        pass  # made meanwhile: opened below like any other
                    child = os.open(part, flags, dir_fd=directory)
                os.close(directory)
                directory = child
        except BaseException:
            os.close(directory)
            raise
        return directory

    def open_parent(self, real: Path, *, shown: str, create: bool = False) -> Parent:
        """The directory that holds ``real`` (a result of :meth:`resolve`), opened race-free
        like :meth:`open`, to create, replace or inspect the entry ``real.name`` in it.

        With ``create``, missing directories on the way are made (inside the root, since no
        symlink is followed); :attr:`Parent.created` lists them.
        """
        parts = real.relative_to(self.root).parts
        if not parts:
            raise ToolError(f"{shown} is the workspace root, not a file")
        if not _OPEN_BENEATH:
            raise ToolError("writing files needs a system with openat(2) and O_NOFOLLOW")
        created: list[Path] = []
        try:
            fd = self._walk(parts[:-1], created=created if create else None)
        except FileNotFoundError:
            raise ToolError(f"no such file or directory: {shown}") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                blocking = self._file_on_the_way(real)
                if blocking is not None:
                    raise ToolError(
                        f"cannot write {shown}: {self.relative(blocking)} is a file, "
                        "not a directory"
                    ) from None
                raise ToolError(f"access denied: {shown} changed while it was opened") from None
            raise ToolError(f"cannot open the directory of {shown}: {_reason(exc)}") from None
        return Parent(fd=fd, name=parts[-1], path=real, created=tuple(created))

    def _file_on_the_way(self, real: Path) -> Path | None:
        """The first ancestor of ``real`` below the root that is neither a directory nor a
        symlink (for a message only: the walk has refused the path already)."""
        for ancestor in reversed(real.parents):
            if ancestor == self.root or not ancestor.is_relative_to(self.root):
                continue
            try:
                mode = ancestor.lstat().st_mode
            except OSError:
                return None
            if not stat.S_ISDIR(mode) and not stat.S_ISLNK(mode):
                return ancestor
        return None


class LinkedFileError(ToolError):
    """A file with hard links that were not all found inside the workspace."""

    def __init__(self, shown: str, *, links: int, inside: int) -> None:
        super().__init__(
            f"access denied: {shown} has {links} hard links and only {inside} of them "
            "were found inside the workspace, so it is also a file outside it; the file tools "
            "read and write a file with several links only when all of them are inside"
        )
        self.links = links
        self.inside = inside


@dataclass(frozen=True)
class Parent:
    """An open directory of the workspace and the name of one entry in it (see
    :meth:`Sandbox.open_parent`). Close it with :meth:`close`, or use it as a context manager."""

    fd: int
    name: str
    path: Path  # the entry's real path, for messages
    created: tuple[Path, ...] = ()  # directories made on the way, outermost first

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Parent:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _too_large(shown: str, size: int, limit: int) -> ToolError:
    return ToolError(
        f"{shown} is too large to read: {format_size(size)}, over the limit of {format_size(limit)}"
    )


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
