"""Store faults: what a database error means for the client, and how it is logged.

A disk that is full, a file that may not be written, damaged pages, a database server that is
down... are not bugs of tether: the request that met one is answered ``StoreError`` (-32015) with
the fault's reason (:data:`tether.protocol.StoreFault`), and the log says it once per episode
(:class:`FaultLog`), without a traceback. Any other database error (a bug) goes on as it is, and
is answered -32603 with its traceback in the log.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import DBAPIError, OperationalError

from tether.protocol import StoreError, StoreFault

logger = logging.getLogger(__name__)

_SQLITE: dict[int, StoreFault] = {
    sqlite3.SQLITE_FULL: "disk-full",
    sqlite3.SQLITE_READONLY: "read-only",
    sqlite3.SQLITE_PERM: "read-only",
    sqlite3.SQLITE_CORRUPT: "corrupt",
    sqlite3.SQLITE_NOTADB: "corrupt",
    sqlite3.SQLITE_CANTOPEN: "unreachable",
    sqlite3.SQLITE_BUSY: "locked",
    sqlite3.SQLITE_LOCKED: "locked",
    sqlite3.SQLITE_IOERR: "io",
}
"""SQLite's primary result codes (the low byte of an extended one) that are store faults."""

_POSTGRES: dict[str, StoreFault] = {
    "53100": "disk-full",  # disk_full
    "25006": "read-only",  # read_only_sql_transaction (a standby, default_transaction_read_only)
    "XX001": "corrupt",  # data_corrupted
    "XX002": "corrupt",  # index_corrupted
    "57P01": "unreachable",  # admin_shutdown
    "57P02": "unreachable",  # crash_shutdown
    "57P03": "unreachable",  # cannot_connect_now (starting up, shutting down)
    "55P03": "locked",  # lock_not_available
    "58030": "io",  # io_error
}
"""PostgreSQL's SQLSTATEs that are store faults; besides these, class 08 (connection exception)
and a failure to connect at all are ``unreachable``."""

_MESSAGES: dict[StoreFault, str] = {
    "disk-full": "the session store ({kind}) is full: there is no space left for its data",
    "read-only": "the session store ({kind}) cannot be written: its files or database are "
    "read-only",
    "corrupt": "the session store ({kind}) is damaged: its data cannot be read",
    "unreachable": "the session store ({kind}) cannot be reached",
    "replaced": "the session store's file was deleted or replaced while tether had it open: "
    "restart tether to use the file that is there now",
    "locked": "the session store ({kind}) stayed locked by another process for too long",
    "io": "the session store ({kind}) could not read or write its data (an I/O error)",
}


def store_error(reason: StoreFault, kind: str) -> StoreError:
    """The error a request that met the fault ``reason`` is answered with."""
    return StoreError(reason, _MESSAGES[reason].format(kind=kind))


def fault_of(exc: BaseException) -> StoreFault | None:
    """The store fault ``exc`` is (a database error, raised through SQLAlchemy or by sqlite3
    itself), or None when it is none (a bug, or not a database error)."""
    orig: Any = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        return None if code is None else _SQLITE.get(code & 0xFF)
    if not isinstance(exc, DBAPIError) or orig is None:
        return None
    state = getattr(orig, "sqlstate", None)
    if isinstance(state, str):
        return "unreachable" if state.startswith("08") else _POSTGRES.get(state)
    if exc.connection_invalidated or isinstance(exc, OperationalError):
        return "unreachable"  # no SQLSTATE: the connection failed or was lost
    return None


def _detail(exc: BaseException) -> str:
    """What the log says of a fault: the driver's error and its code, never the statement or
    its parameters (SQLAlchemy's own text carries both)."""
    orig: Any = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorname", None) or getattr(orig, "sqlstate", None)
    lines = str(orig).strip().splitlines()
    named = f"{type(orig).__name__} {code}" if code else type(orig).__name__
    return f"{named}: {lines[0][:200]}" if lines else named


class FaultLog:
    """The faults of one store, each logged once per episode.

    An episode of a fault met by a write ends with the next write that succeeds (reads may go on
    succeeding meanwhile: a full disk refuses only writes); one met by a read ends with any call
    that succeeds.

    ``writable`` (for a store in files) tells whether its files may all be written: an I/O error
    met while one may not (SQLite reports a ``-wal`` file made immutable so) is ``read-only``.
    It is asked only when an I/O error happens.
    """

    def __init__(self, kind: str, writable: Callable[[], bool] | None = None) -> None:
        self.kind = kind
        self._writable = writable
        self._reason: StoreFault | None = None
        self._by_write = False

    def error_for(self, exc: BaseException, *, write: bool) -> StoreError | None:
        """The ``StoreError`` to raise for ``exc`` (logged when it starts an episode), or None
        when ``exc`` is no store fault."""
        if isinstance(exc, StoreError):
            error = exc
        else:
            reason = fault_of(exc)
            if reason is None:
                return None
            if reason == "io" and self._writable is not None and not self._writable():
                reason = "read-only"
            error = store_error(reason, self.kind)
        if error.reason != self._reason:
            detail = "" if exc is error else f" ({_detail(exc)})"
            logger.warning("%s%s", error.message, detail)
            self._reason, self._by_write = error.reason, write
        else:
            self._by_write = self._by_write or write
        return error

    def succeeded(self, *, write: bool) -> None:
        """A call succeeded: the episode it ends, if any, is over."""
        if self._reason is not None and (write or not self._by_write):
            logger.info("the session store (%s) works again", self.kind)
            self._reason = None
