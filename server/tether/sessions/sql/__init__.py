"""The SQL session store: SQLite (a file) or any SQLAlchemy URL (PostgreSQL for a shared store).

Layout (see also :mod:`tether.sessions.forks`):

- ``sessions``: one row per session, with the counters an append needs (``own_count``,
  ``base_count``) so that it never counts messages, and ``owner``, the key its own messages are
  stored under (a new one after ``clear``);
- ``messages``: keyed by ``(owner, position)``; a page is a range scan of that key;
- ``tool_calls``: one row per call an assistant message makes, indexed by call id, so a tool
  result is checked against the calls of the session without reading its history;
- ``segments``: the inherited prefix of each fork, ``(session_id, seq) -> (owner, upto)``,
  indexed by owner so rows that nothing refers to any more can be found and removed;
- ``schema_version``: the version of this layout, moved forward by :data:`MIGRATIONS`.

A session's run lease (:mod:`tether.sessions.lease`) is three columns of its row
(``lease_run_id``, ``lease_holder``, ``lease_until``): it is claimed, renewed and released by
conditional updates of that row, and every write a lease blocks checks it in its own
transaction (an append in the same statement that reserves its positions). A write refused by a
live lease whose holder is gone (a dead process of this host) frees the session by an update
naming that holder, and goes on in the same transaction.

A database error that is a store fault becomes a ``StoreError`` (:mod:`tether.sessions.faults`);
on SQLite, every transaction first checks the file (:mod:`tether.sessions.sqlite_file`).

SQLAlchemy is synchronous: calls run on one worker thread per store, so the event loop never
waits for the database. Each write is one transaction. On SQLite, an append (the kernel's write
per step) first tries on the loop thread with a connection that never waits for a lock: it takes
~0.2 ms there against ~0.5 ms through the worker, and when the file is locked (the worker or
another process is writing) it goes to the worker, which waits its turn.

Several processes share one database. On SQLite a write transaction holds the file's write lock
from its start (``BEGIN IMMEDIATE``), so writes are serial. On PostgreSQL writes run in READ
COMMITTED and lock what they depend on: the session rows they change (``FOR UPDATE``), the
parent of a fork (``FOR KEY SHARE``: appends to it go on), an owner whose messages may be freed
(an advisory lock, see :func:`_collect`), the schema while it is made or migrated; a read is one
REPEATABLE READ snapshot.

The package, by concern:

- :mod:`.schema`: the tables, :data:`SCHEMA_VERSION` and the :data:`MIGRATIONS` that reach it;
- :mod:`.engine`: engines (SQLite's pragmas, the drivers), opening a database, which failed
  transactions run again;
- :mod:`.statements`: the statements of the hot paths, built once;
- :mod:`.fast_path`: the hot paths' reads and writes, on SQLite straight on sqlite3;
- :mod:`.rows`: rows as sessions, leases and messages, and messages as rows;
- :mod:`.history`: a history as segments (reading ranges, tool results, freeing messages);
- :mod:`.store`: :class:`SqlStore`, the store itself.
"""

from tether.sessions.sql.engine import database_url, make_engine, sqlite_url
from tether.sessions.sql.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    messages_table,
    metadata,
    migrate,
    schema_version,
    segments_table,
    sessions_table,
    tool_calls_table,
)
from tether.sessions.sql.store import SqlStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SqlStore",
    "database_url",
    "make_engine",
    "messages_table",
    "metadata",
    "migrate",
    "schema_version",
    "segments_table",
    "sessions_table",
    "sqlite_url",
    "tool_calls_table",
]
