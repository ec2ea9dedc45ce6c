"""Linux namespaces for one command, through ``ctypes``: a pid namespace that ends with the
command, and a mount namespace where some paths are read-only.

The command wrapper (:mod:`tether.tools.wrapper`) calls :func:`enter` in its first process, which
then forks the pid 1 of the new pid namespace; that process calls :func:`isolate_filesystem`:

- every mount becomes a slave of its original (``MS_REC | MS_SLAVE``), so nothing mounted here
  propagates back to the system;
- each protected path (``.git``, ``.tether``, tether's own installation, when they lie in a
  writable place) is bind-mounted on itself, read-only, submounts included (``open_tree`` with
  ``OPEN_TREE_CLONE``, ``mount_setattr`` with ``MOUNT_ATTR_RDONLY`` and ``AT_RECURSIVE``,
  ``move_mount``: Linux 5.12, older than any kernel with the Landlock rules the wrapper needs).
  A mount point cannot be renamed nor removed, so the path stays where it is too;
- each directory between a writable path and a protected path inside it is bind-mounted on
  itself too, writable (:func:`pinned`), so that it cannot be renamed or removed either;
- ``/proc`` is mounted anew for the pid namespace, so the command sees its own processes only,
  with the pids it knows them by;
- the working directory is entered again, so that it is seen through the new mounts.

Without privileges the namespaces are made inside a new user namespace that maps the user's own
uid and gid to themselves (``setgroups`` denied, as the kernel requires), so the command keeps its
uid and files it creates belong to the user. Part of the wrapper: standard library only.
"""

from __future__ import annotations

import ctypes
import os
import stat

from tether.tools.linux import check, libc, syscall, within

TYPE_CHECKING = False  # not imported from typing: the wrapper imports nothing it need not
if TYPE_CHECKING:
    from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_SLAVE = 1 << 19
# The new mount API: the same numbers on every architecture (asm-generic), since Linux 5.2/5.12.
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
OPEN_TREE_CLONE = 1
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
MOUNT_ATTR_RDONLY = 0x1


class MountAttr(ctypes.Structure):
    """``struct mount_attr`` (``MOUNT_ATTR_SIZE_VER0``)."""

    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


class NamespaceError(OSError):
    """A namespace could not be made or set up (``errno`` says why)."""


def enter(*, user: bool) -> None:
    """Move this process into new mount and pid namespaces (its children are born in the pid
    namespace, the first one its pid 1), inside a new user namespace with ``user``."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | (CLONE_NEWUSER if user else 0)
    check(libc().unshare(flags), "unshare", NamespaceError)
    if user:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def isolate_filesystem(protect: Sequence[str], write: Sequence[str]) -> None:
    """In the new namespaces (as their pid 1): make ``protect`` read-only and pin the directories
    between them and the ``write`` paths that hold them (:func:`pinned`), mount ``/proc`` for
    the pid namespace, and enter the working directory again. All paths are real."""
    mount = libc().mount
    check(mount(None, b"/", None, MS_REC | MS_SLAVE, None), "making mounts private", NamespaceError)
    binds = [(path, True) for path in protect] + [(path, False) for path in pinned(protect, write)]
    for path, read_only in sorted(binds, key=lambda bind: bind[0].count("/")):  # outer first
        bind(path, read_only=read_only)
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    check(mount(b"proc", b"/proc", b"proc", flags, None), "mounting /proc", NamespaceError)
    os.chdir(os.getcwd())


def pinned(protect: Sequence[str], write: Sequence[str]) -> list[str]:
    """The directories strictly between each ``write`` path and a ``protect`` path inside it,
    but for those inside a protected path. A read-only mount keeps a path from being written,
    renamed or removed, not the directories above it: renaming one of those moves the protected
    path away, and a copy the command controls can take its place (``mv sub sub2 && cp -r sub2
    sub``, where ``.git`` names ``sub/gitdir``). So each of them is bind-mounted on itself,
    writable as before: a mount point cannot be renamed or removed (``EBUSY``), whatever path
    names it, and a command holds no capability to unmount it."""
    found: dict[str, None] = {}
    for path in protect:
        for root in write:
            if path == root or not within(path, root):
                continue
            directory = os.path.dirname(path)
            while directory != root and within(directory, root):
                found[directory] = None
                directory = os.path.dirname(directory)
    return [path for path in found if not any(within(path, other) for other in protect)]


def bind(path: str, *, read_only: bool) -> None:
    """Bind-mount ``path`` (a directory or a file) on itself with its submounts, read-only with
    ``read_only``. A missing path is skipped; one that became a symbolic link is refused."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise NamespaceError(0, f"{path} became a symbolic link")
        flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE
        tree = _call(f"open_tree {path}", SYS_OPEN_TREE, fd, b"", flags)
        try:
            if read_only:
                attr = MountAttr(attr_set=MOUNT_ATTR_RDONLY)
                _call(
                    f"mount_setattr {path}", SYS_MOUNT_SETATTR, tree, b"",
                    AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr),
                )  # fmt: skip
            moved = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
            _call(f"move_mount {path}", SYS_MOVE_MOUNT, tree, b"", fd, b"", moved)
        finally:
            os.close(tree)
    finally:
        os.close(fd)


def _call(what: str, number: int, *args: object) -> int:
    return check(syscall(number, *args), what, NamespaceError)
