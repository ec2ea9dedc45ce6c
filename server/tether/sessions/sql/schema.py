"""The tables of the SQL store, their version and the migrations that move a database to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Dialect,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable
from sqlalchemy.types import TypeDecorator

from tether.protocol import (
    ConfigError,
)

SCHEMA_VERSION = 9


class _Micros(TypeDecorator[datetime]):
    """A UTC datetime as integer microseconds since the epoch: exact, portable, sortable."""

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> int | None:
        return None if value is None else _to_micros(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else _from_micros(value)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _to_micros(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


_ID = String(64)

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

sessions_table = Table(
    "sessions",
    metadata,
    Column("id", _ID, primary_key=True),
    Column("workspace", Text, nullable=False),
    Column("title", Text),
    Column("agent_id", Text),
    Column("model", Text),
    Column("system_prompt", Text),
    Column("settings", JSON, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("tools", JSON(none_as_null=True)),
    Column("allowed_models", JSON(none_as_null=True)),
    Column("state", JSON, nullable=False),
    Column("mode", Text),  # version 6: NULL is "ask"
    Column("permissions", JSON(none_as_null=True)),  # version 6: the remembered answers
    Column("plan", JSON(none_as_null=True)),  # version 7: the session's plan (NULL: none)
    Column("agent", Text),  # version 8: the agent profile
    Column("spawned_by", JSON(none_as_null=True)),  # version 8: a sub-agent's task call
    Column("parent_session_id", _ID),
    Column("forked_from_message_id", _ID),
    Column("owner", _ID, nullable=False),
    Column("base_count", Integer, nullable=False),
    Column("own_count", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost", Float),  # version 8: US dollars of the runs whose cost was known (NULL: none)
    Column("created_at", _Micros, nullable=False),
    Column("updated_at", _Micros, nullable=False),
    # the run lease (version 3): the run, its process, until when (all NULL: not leased)
    Column("lease_run_id", _ID),
    Column("lease_holder", Text),
    Column("lease_until", _Micros),
)
_LEASE_COLUMNS = ("lease_run_id", "lease_holder", "lease_until")
_MODE_COLUMNS = ("mode", "permissions")
_AGENT_COLUMNS = ("agent", "spawned_by")

segments_table = Table(
    "segments",
    metadata,
    Column("session_id", _ID, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("owner", _ID, nullable=False),
    Column("upto", Integer, nullable=False),
    PrimaryKeyConstraint("session_id", "seq"),
)

messages_table = Table(
    "messages",
    metadata,
    Column("owner", _ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("id", _ID, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", JSON(none_as_null=True)),
    Column("tool_calls", JSON(none_as_null=True)),
    Column("tool_call_id", Text),
    Column("is_error", Boolean),
    Column("name", Text),
    Column("author", Text),
    Column("metadata", JSON(none_as_null=True)),
    Column("output", JSON(none_as_null=True)),  # a tool result's structured output (v4)
    Column("agent_id", Text),
    Column("run_id", _ID),
    Column("created_at", _Micros, nullable=False),
    Column("kind", Text),
    Column("replaces", JSON(none_as_null=True)),
    PrimaryKeyConstraint("owner", "position"),
)

tool_calls_table = Table(
    "tool_calls",
    metadata,
    Column("owner", _ID, nullable=False),
    Column("position", Integer, nullable=False),
    Column("call_id", Text, nullable=False),
)

_V1_INDEXES = [
    Index("ix_messages_id", messages_table.c.id, unique=True),
    Index(
        "ix_sessions_workspace_updated",
        sessions_table.c.workspace,
        sessions_table.c.updated_at,
        sessions_table.c.id,
    ),
    Index("ix_sessions_updated", sessions_table.c.updated_at, sessions_table.c.id),
    Index("ix_sessions_owner", sessions_table.c.owner),
    Index("ix_segments_owner", segments_table.c.owner),
    Index("ix_tool_calls_call", tool_calls_table.c.call_id),
    Index("ix_tool_calls_owner", tool_calls_table.c.owner, tool_calls_table.c.position),
]
_V2_INDEXES = [Index("ix_messages_run", messages_table.c.run_id)]


# added by the migrations after the first
_LATER_COLUMNS = {
    *(("messages", name) for name in ("kind", "replaces", "output")),
    ("sessions", "plan"),
    *(("sessions", name) for name in _AGENT_COLUMNS),
    ("sessions", "cost"),
}


def _create_v1(connection: Connection) -> None:
    for table in (sessions_table, segments_table, messages_table, tool_calls_table):
        create = CreateTable(table)
        create.columns = [
            c
            for c in create.columns
            if (table.name, c.element.name) not in _LATER_COLUMNS
            and c.element.name not in _LEASE_COLUMNS
            and (table.name, c.element.name) not in {("sessions", n) for n in _MODE_COLUMNS}
        ]
        connection.execute(create)
    for index in _V1_INDEXES:
        connection.execute(CreateIndex(index))


def _add_run_index(connection: Connection) -> None:
    for index in _V2_INDEXES:
        connection.execute(CreateIndex(index))


def _add_columns(connection: Connection, table: Table, names: Sequence[str]) -> None:
    """``ALTER TABLE ... ADD COLUMN`` for each of ``names``, as ``table`` defines them."""
    for name in names:
        column = CreateColumn(table.c[name]).compile(dialect=connection.dialect)
        connection.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {column}")


def _add_run_lease(connection: Connection) -> None:
    _add_columns(connection, sessions_table, _LEASE_COLUMNS)


_COMPACTION_COLUMNS = ("kind", "replaces")


def _add_compaction(connection: Connection) -> None:
    """Messages learn ``kind`` and ``replaces`` (compaction summaries)."""
    _add_columns(connection, messages_table, _COMPACTION_COLUMNS)


def _add_message_output(connection: Connection) -> None:
    """Tool messages learn ``output`` (a structured result beside the text)."""
    _add_columns(connection, messages_table, ["output"])


def _add_mode(connection: Connection) -> None:
    """Sessions learn ``mode`` and ``permissions`` (the remembered always answers)."""
    _add_columns(connection, sessions_table, _MODE_COLUMNS)


def _add_plan(connection: Connection) -> None:
    """Sessions learn ``plan`` (the steps ``update_plan`` last set)."""
    _add_columns(connection, sessions_table, ["plan"])


def _add_agent(connection: Connection) -> None:
    """Sessions learn ``agent`` (their profile) and ``spawned_by`` (a sub-agent's origin)."""
    _add_columns(connection, sessions_table, _AGENT_COLUMNS)


def _add_cost(connection: Connection) -> None:
    """Sessions learn ``cost`` (what their runs cost, when the price table knew the model)."""
    _add_columns(connection, sessions_table, ["cost"])


MIGRATIONS: list[Callable[[Connection], None]] = [
    _create_v1,
    _add_run_index,
    _add_run_lease,
    _add_compaction,
    _add_message_output,
    _add_mode,
    _add_plan,
    _add_agent,
    _add_cost,
]
"""Step ``i`` moves the schema from version ``i`` to ``i + 1`` (0: an empty database)."""

assert len(MIGRATIONS) == SCHEMA_VERSION


# PostgreSQL advisory locks of the store: ``(namespace, key)``, transaction-scoped.
_SCHEMA_LOCK = (0x7E7E, 1)  # held by the transaction that creates or migrates the schema
_OWNER_LOCKS = 0x7E7F  # with a hash of an owner: held while the messages of that owner are freed


def _advisory_lock(connection: Connection, namespace: int, key: int) -> None:
    connection.execute(select(func.pg_advisory_xact_lock(namespace, key)))


def migrate(connection: Connection, target: int = SCHEMA_VERSION) -> int:
    """Run the steps from the database's version up to ``target``; return the version found.

    Any number of processes may start together on an empty or old database: on PostgreSQL the
    first to come holds a lock until it commits, and the others then find the schema made (its
    statements see what was committed before they began); on SQLite the caller's transaction
    holds the write lock (``BEGIN IMMEDIATE``).
    """
    if connection.dialect.name == "postgresql":
        _advisory_lock(connection, *_SCHEMA_LOCK)
    schema_version.create(connection, checkfirst=True)
    found = connection.execute(select(schema_version.c.version)).scalar()
    current = found or 0
    if current > SCHEMA_VERSION:
        raise ConfigError(
            f"the session database has schema version {current}, newer than this tether "
            f"understands ({SCHEMA_VERSION}): upgrade tether",
            {"key": "sessions.store", "source": "sessions database"},
        )
    for step in MIGRATIONS[current:target]:
        step(connection)
    if found is None:
        connection.execute(insert(schema_version).values(version=max(current, target)))
    elif target > current:
        connection.execute(update(schema_version).values(version=target))
    return current


def _schema_is_current(engine: Engine) -> bool:
    """Whether the database has this tether's schema already, read without writing: a store
    that may not be written (a read-only file) still opens, and answers what it holds."""
    with engine.connect() as connection, connection.begin():
        if not inspect(connection).has_table(schema_version.name):
            return False
        return connection.execute(select(schema_version.c.version)).scalar() == SCHEMA_VERSION
