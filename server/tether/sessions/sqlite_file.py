"""The SQLite file under a store: still the one the store opened, and safe to use.

SQLite goes on writing to the file it opened, whatever becomes of its path: a file deleted (or
replaced) under a running server takes every write acknowledged after that with it. And it maps
the WAL index (``-shm``) into memory, and writes there in reads too (a reader marks what it
reads): when that file may no longer be written (made immutable) while mapped, the next write to
it kills the process with SIGBUS. So each transaction first checks that the ``-shm`` file may be
written, and a write transaction also that the path still names the file the store opened and
that the ``-wal`` file may be written: a few system calls. When not, the transaction is refused
with a ``StoreError`` (``read-only``, ``replaced``) before SQLite touches anything.
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
    """The database file a store opened (its device and inode, read when the store is made)."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        found = os.stat(self.path)
        self._identity = (found.st_dev, found.st_ino)
        self._wal, self._shm = (f"{self.path}{suffix}" for suffix in _SIDECARS)

    def check(self, *, write: bool) -> None:
        """Before a transaction: ``StoreError`` when a ``-shm`` file that is there may not be
        written (``read-only``); for a write, also when the path names no file or another one
        (``replaced``), or when the ``-wal`` file may not be written (``read-only``)."""
        if not self.mappable():
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
        if not _writable(self._wal):
            raise store_error("read-only", "sqlite")

    def mappable(self) -> bool:
        """Whether SQLite may write to its mapping of the ``-shm`` file (also when it closes
        its last connection: it then checkpoints)."""
        return _writable(self._shm)


def _writable(path: str) -> bool:
    """Whether ``path`` may be written, or is not there (SQLite then makes it)."""
    return os.access(path, os.W_OK) or not os.path.lexists(path)
