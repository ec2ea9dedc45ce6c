from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.protocol import MessageInput, Role, Session, ToolCall
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import MemoryStore, SessionStore

WORKSPACE = "file:///work/project"


def user(text: str) -> MessageInput:
    return MessageInput(role=Role.USER, content=text)


def calling(*call_ids: str) -> MessageInput:
    calls = [ToolCall(id=call_id, name="read", arguments="{}") for call_id in call_ids]
    return MessageInput(role=Role.ASSISTANT, tool_calls=calls)


def answering(call_id: str) -> MessageInput:
    return MessageInput(role=Role.TOOL, tool_call_id=call_id, content="result")


POSTGRES_URL = os.environ.get("TETHER_TEST_POSTGRES_URL")

STORES = [
    "memory",
    "sqlite",
    "sqlite-core",  # the SQLAlchemy path that other databases take, on SQLite
    pytest.param(
        "postgres",
        marks=pytest.mark.skipif(
            not POSTGRES_URL, reason="set TETHER_TEST_POSTGRES_URL to test PostgreSQL"
        ),
    ),
]


async def open_store(kind: str, tmp_path: Path) -> SessionStore:
    if kind == "memory":
        return MemoryStore()
    from tether.sessions.sql import SqlStore, sqlite_url

    if kind in ("sqlite", "sqlite-core"):
        return await SqlStore.open(sqlite_url(tmp_path / "sessions.db"), fast=kind == "sqlite")
    assert POSTGRES_URL
    store = await SqlStore.open(POSTGRES_URL)
    await _empty_postgres(store)
    return store


async def _empty_postgres(store: SessionStore) -> None:
    """Each test starts from empty tables (the database is shared between runs)."""
    from sqlalchemy import Connection, delete

    from tether.sessions.sql import SqlStore, metadata

    assert isinstance(store, SqlStore)

    def empty(connection: Connection) -> None:
        for table in metadata.sorted_tables:
            if table.name != "schema_version":
                connection.execute(delete(table))

    await store._write(empty)


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(request.param, tmp_path)
    yield opened
    await opened.aclose()


@pytest.fixture
async def session(store: SessionStore) -> Session:
    """A fresh session in ``WORKSPACE``, with a title and some configuration."""
    return await store.create(
        CreateSessionParams(
            title="first",
            model="m1",
            system_prompt="be brief",
            settings={"thinkingLevel": "low", "nested": {"depth": 1}},
            metadata={"tags": ["a"]},
            tools=["read"],
        ),
        WORKSPACE,
    )
