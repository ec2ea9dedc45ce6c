"""The reads and writes of the hot paths: through SQLAlchemy, or on SQLite straight on sqlite3."""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import (
    Connection,
    Dialect,
)

from tether.protocol import (
    Message,
)
from tether.sessions.sql.rows import _message
from tether.sessions.sql.schema import _from_micros, _to_micros
from tether.sessions.sql.statements import _INSERT_CALLS, _INSERT_MESSAGES, _RANGE


class _Exec:
    """The reads and writes of the hot paths, through SQLAlchemy (any database)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def rows(self, statement: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Rows of plain values (strings and integers: no column needs converting)."""
        return [tuple(row) for row in self.connection.execute(statement, params)]

    def messages(self, owner: str, low: int, high: int) -> list[Message]:
        rows = self.connection.execute(_RANGE, {"owner": owner, "low": low, "high": high})
        return [_message(row) for row in rows]

    def insert(self, messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        self.connection.execute(_INSERT_MESSAGES, messages)
        if calls:
            self.connection.execute(_INSERT_CALLS, calls)


class _Compiled:
    """A statement compiled once for SQLite, with the order of its parameters."""

    def __init__(self, statement: Any, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())

    def args(self, params: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(params[name] for name in self.names)


class _SqliteExec(_Exec):
    """The same on the sqlite3 connection under SQLAlchemy's, with the statements SQLAlchemy
    compiled: the hot paths then cost what sqlite3 costs (SQLAlchemy's execution layer would
    take most of the time of a small append)."""

    def __init__(self, connection: Connection, compiled: dict[int, _Compiled]) -> None:
        super().__init__(connection)
        self.raw: Any = connection.connection.driver_connection
        self._compiled = compiled

    def _sql(self, statement: Any) -> _Compiled:
        compiled = self._compiled.get(id(statement))
        if compiled is None:
            compiled = self._compiled[id(statement)] = _Compiled(statement, self.connection.dialect)
        return compiled

    def rows(self, statement: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        compiled = self._sql(statement)
        return list(self.raw.execute(compiled.sql, compiled.args(params)))

    def messages(self, owner: str, low: int, high: int) -> list[Message]:
        compiled = self._sql(_RANGE)
        found = []
        params = {"owner": owner, "low": low, "high": high}
        for row in self.raw.execute(compiled.sql, compiled.args(params)):
            values = list(row)
            # content, tool_calls, metadata, output, replaces: JSON text
            for index in (2, 3, 8, 9, 13):
                if isinstance(values[index], str | bytes):  # SQLite gives a JSON number back
                    values[index] = orjson.loads(values[index])  # as a number (JSON affinity)
            if values[5] is not None:
                values[5] = bool(values[5])
            values[11] = _from_micros(values[11])
            found.append(_message(values))
        return found

    def insert(self, messages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        compiled = self._sql(_INSERT_MESSAGES)
        rows = []
        for message in messages:
            for name in ("content", "tool_calls", "metadata", "output", "replaces"):
                if message[name] is not None:
                    message[name] = orjson.dumps(message[name]).decode()
            message["created_at"] = _to_micros(message["created_at"])
            rows.append(compiled.args(message))
        self.raw.executemany(compiled.sql, rows)
        if calls:
            compiled = self._sql(_INSERT_CALLS)
            self.raw.executemany(compiled.sql, [compiled.args(call) for call in calls])
