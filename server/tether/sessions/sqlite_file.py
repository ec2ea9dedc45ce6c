"""The SQLite file under a store: still the one the store opened, and safe to write.

SQLite goes on writing to the file it opened, whatever becomes of its path: a file deleted (or
replaced) under a running server takes every write acknowledged after that with it. And it maps
the WAL index (``-shm``) into memory: when that file may no longer be written (made immutable)
while mapped, the next write to it kills the process with SIGBUS. So each write transaction first
checks, in a few system calls, that the path still names the file the store opened, and that the
``-wal`` and ``-shm`` files may be written; when not, the write is refused with a
``StoreError`` (``replaced``, ``read-only``) before SQLite touches anything.
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
        self._sidecars = [f"{self.path}{suffix}" for suffix in _SIDECARS]

    def check_writable(self) -> None:
        """Before a write transaction: ``StoreError`` when the path names no file or another
        one (``replaced``), or when a ``-wal`` or ``-shm`` file that is there may not be written
        (``read-only``)."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            raise store_error("replaced", "sqlite") from None
        except OSError:
            raise store_error("unreachable", "sqlite") from None
        if (found.st_dev, found.st_ino) != self._identity:
            raise store_error("replaced", "sqlite")
        for sidecar in self._sidecars:
            if not os.access(sidecar, os.W_OK) and os.path.lexists(sidecar):
                raise store_error("read-only", "sqlite")
