"""The SQLite file under a store: still the one the store opened, and safe to use.

SQLite goes on writing to the file it opened, whatever becomes of its path: a file deleted (or
replaced) under a running server takes every write acknowledged after that with it. And it maps
the WAL index (``-shm``) into memory, and writes there in reads too (a reader marks what it
reads): when that file may no longer be written (made immutable) while mapped, the next write to
it kills the process with SIGBUS. So each transaction first checks that the ``-shm`` file may
still be written (when SQLite mapped it so: a store opened while it could not be written maps it
read-only, and only reads), and a write transaction also that the path still names the file the
store opened: one or two system calls (1 and 3 µs here). When not, the transaction is refused
with a ``StoreError`` (``read-only``, ``replaced``) before SQLite touches anything. (A ``-wal``
file that may no longer be written fails the commit with an I/O error: the store then asks
:meth:`SqliteFile.writable`, and tells it ``read-only``.)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tether.sessions.faults import store_error

_SIDECARS = ("-wal", "-shm")


def check_sidecars(database: Path) -> None:
    """Before the store is opened: its ``-wal`` and ``-shm`` files, where they exist, must be
    regular files (SQLite would map a device or wait on a FIFO); else ``StoreError``
    (``corrupt``)."""
    for suffix in _SIDECARS:
        try:
            mode = os.lstat(f"{database}{suffix}").st_mode
        except FileNotFoundError:
            continue
        except OSError:
            raise store_error("unreachable", "sqlite") from None
        if not stat.S_ISREG(mode):
            raise store_error("corrupt", "sqlite")


class SqliteFile:
    """The database file a store opened (its device and inode), and whether SQLite could map
    its ``-shm`` file for writing; both read when the store is made, right after its first
    connection opened the file (the store's connections stay open till it closes)."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        found = os.stat(self.path)
        self._identity = (found.st_dev, found.st_ino)
        self._shm = f"{self.path}-shm"
        self._shm_mapped_writable = _writable(self._shm)

    def check(self, *, write: bool) -> None:
        """Before a transaction: ``StoreError`` (``read-only``) when the ``-shm`` file may not
        be written (for a read: when SQLite mapped it for writing); for a write, also when the
        path names no file or another one (``replaced``)."""
        if (write or self._shm_mapped_writable) and not _writable(self._shm):
            raise store_error("read-only", "sqlite")
        if not write:
            return
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            raise store_error("replaced", "sqlite") from None
        except OSError:
            raise store_error("unreachable", "sqlite") from None
        if (found.st_dev, found.st_ino) != self._identity:
            raise store_error("replaced", "sqlite")

    def writable(self) -> bool:
        """Whether the database file and its ``-wal`` and ``-shm`` files may all be written
        (three system calls: asked when an I/O error happens, not before each transaction)."""
        return all(_writable(f"{self.path}{suffix}") for suffix in ("", *_SIDECARS))

    def shm_at_risk(self) -> bool:
        """Whether SQLite mapped the ``-shm`` file for writing and it may not be written any
        more: a write to the mapping (in any transaction, and when the last connection closes)
        would be SIGBUS."""
        return self._shm_mapped_writable and not _writable(self._shm)


def _writable(path: str) -> bool:
    """Whether ``path`` may be written, or is not there (SQLite then makes it)."""
    return os.access(path, os.W_OK) or not os.path.lexists(path)
