"""Writing one workspace file, race-free and atomic, and the unified diff of what changed.

Everything happens relative to the file's directory, opened by :meth:`Sandbox.open_parent`
without following a symlink: the current entry is inspected with ``lstat`` and read with
``O_NOFOLLOW``; the new content goes to a temporary file created with ``O_EXCL | O_NOFOLLOW``
in that directory, which is then renamed over the entry. ``rename`` replaces a directory entry
and never follows a symlink at its destination, so whatever appears at the path meanwhile, the
write lands in that directory (inside the workspace) and nowhere else; before renaming, the entry
is checked to be what was read, so a concurrent change is reported instead of overwritten.

The work runs in a thread (:func:`finish_once_started`): once it has begun, cancelling the call
does not stop it, so the call waits for it and returns what it did rather than claim it did not
(a wait for an editor's answer inside it is interrupted: see :mod:`tether.tools.editor_requests`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import difflib
import os
import secrets
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

from tether.protocol.tools import ProposedChange
from tether.tools.base import FileAccess, ToolError
from tether.tools.sandbox import Parent, Sandbox, format_size
from tether.tools.text import is_binary

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

T = TypeVar("T")

MAX_DIFF_INPUT_BYTES = 1024 * 1024  # either side larger: no diff (difflib is quadratic at worst)
TEMP_PREFIX = ".tether-"


async def finish_once_started(
    func: Callable[..., T], *args: object, interrupt: Callable[[], None] | None = None
) -> T:
    """``func(*args)`` in a thread. Cancelled before the thread begins it, it never runs and the
    cancellation propagates; cancelled once it has begun (it cannot be stopped), ``interrupt``
    is called (once: it ends the waits of the thread that can end, such as an editor's answer)
    and the call waits for the thread to end and returns its result (or raises its error), so
    the caller reports what was done."""
    lock = threading.Lock()
    begun = abandoned = False

    def work() -> T | None:
        nonlocal begun
        with lock:
            if abandoned:
                return None
            begun = True
        return func(*args)

    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(None, context.run, work)
    while True:
        try:
            return cast(T, await asyncio.shield(future))
        except asyncio.CancelledError:
            with lock:
                if not begun:
                    abandoned = True
                    future.cancel()
                    raise
            if interrupt is not None:
                interrupt()
                interrupt = None
            # begun: wait for it (again, if cancelled again meanwhile)


def inspect(parent: Parent, shown: str) -> os.stat_result | None:
    """The entry's ``lstat``, ``None`` when there is none; anything but a regular file is
    refused (a symlink, a directory, a device, a FIFO, a socket)."""
    try:
        info = os.stat(parent.name, dir_fd=parent.fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ToolError(f"cannot inspect {shown}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise ToolError(f"access denied: {shown} is a symbolic link (it changed while opened)")
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{shown} is not a regular file (a device, FIFO or socket)")
    return info


def read_entry(parent: Parent, info: os.stat_result, shown: str, *, limit: int) -> bytes:
    """The content of the regular file ``info`` describes, refused above ``limit`` bytes or if
    the entry is no longer that file."""
    if info.st_size > limit:
        raise too_large(shown, info.st_size, limit, "read")
    try:
        fd = os.open(parent.name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=parent.fd)
    except OSError as exc:
        raise ToolError(f"cannot open {shown}: {exc.strerror or exc}") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise ToolError(f"{shown} changed while it was opened; try again")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise too_large(shown, size, limit, "read")
    return b"".join(chunks)


def commit(parent: Parent, data: bytes, *, shown: str, expect: os.stat_result | None) -> None:
    """Replace the entry with a file holding ``data``, atomically. ``expect`` is the entry as it
    was inspected (``None``: there was none); if it is no longer so, nothing is written. A
    replaced file keeps its permission bits."""
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    mode = 0o666 if expect is None else 0o600
    try:
        fd = os.open(temp, flags, mode, dir_fd=parent.fd)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if expect is not None:
                os.fchmod(fd, stat.S_IMODE(expect.st_mode))
            os.fsync(fd)
        finally:
            os.close(fd)
        if _signature(_lstat(parent)) != _signature(expect):
            raise ToolError(f"{shown} changed while it was being written; read it and try again")
        os.rename(temp, parent.name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent.fd)
        if isinstance(exc, OSError):
            raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from None
        raise


def _lstat(parent: Parent) -> os.stat_result | None:
    try:
        return os.stat(parent.name, dir_fd=parent.fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _signature(info: os.stat_result | None) -> tuple[int, ...] | None:
    if info is None:
        return None
    return (info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns)


def too_large(shown: str, size: int, limit: int, verb: str) -> ToolError:
    return ToolError(
        f"{shown} is too large to {verb}: {format_size(size)}, over the limit of "
        f"{format_size(limit)}"
    )


def unified_diff(rel: str, old: bytes | None, new: bytes) -> str | None:
    """A git-style unified diff of ``rel`` from ``old`` (``None``: a new file) to ``new``;
    ``None`` when there is no line to show (nothing changed, an empty new file) or either side
    is too large to compare."""
    if old == new:
        return None
    if max(len(old or b""), len(new)) > MAX_DIFF_INPUT_BYTES:
        return None
    before = "/dev/null" if old is None else f"a/{rel}"
    if (old is not None and is_binary(old)) or is_binary(new):
        return f"Binary files {before} and b/{rel} differ\n"
    lines: list[str] = []
    for line in difflib.unified_diff(_lines(old or b""), _lines(new), before, f"b/{rel}", n=3):
        lines.append(line)
        if not line.endswith("\n"):
            lines.append("\n\\ No newline at end of file\n")
    return "".join(lines) or None


def _lines(data: bytes) -> list[str]:
    parts = data.decode("utf-8", errors="replace").split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def count_lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def text_before(sandbox: Sandbox, path: str, real: Path, files: FileAccess | None) -> str:
    """The text an edit of ``path`` (``real``, resolved) would change, for its proposed change:
    the editor's (``files``) or the disk's; a :class:`ToolError` when it is binary, not UTF-8 or
    too large to propose (over :data:`MAX_DIFF_INPUT_BYTES`)."""
    text = files.read_text(real) if files is not None else None
    if text is None:
        data = sandbox.read_bytes(path, max_bytes=MAX_DIFF_INPUT_BYTES)
        if is_binary(data):
            raise ToolError(f"{path} is a binary file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not UTF-8 text") from None
    return proposal_sized(text, path)


def proposal_sized(text: str, shown: str) -> str:
    """``text``, or a :class:`ToolError` when it is too large to carry in a proposed change."""
    if len(text) > MAX_DIFF_INPUT_BYTES or len(text.encode()) > MAX_DIFF_INPUT_BYTES:
        raise ToolError(f"{shown} is too large to propose")
    return text


def proposed(sandbox: Sandbox, real: Path, old: str | None, new: str) -> ProposedChange:
    return ProposedChange(path=sandbox.relative(real), old_text=old, new_text=new)
