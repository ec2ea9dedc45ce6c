from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tether.protocol import MessageInput, Role, Session, ToolCall
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import MemoryStore, SessionStore
from tether.sessions.ids import utcnow

WORKSPACE = "file:///work/project"


def user(text: str) -> MessageInput:
    return MessageInput(role=Role.USER, content=text)


def calling(*call_ids: str) -> MessageInput:
    calls = [ToolCall(id=call_id, name="read", arguments="{}") for call_id in call_ids]
    return MessageInput(role=Role.ASSISTANT, tool_calls=calls)


def answering(call_id: str) -> MessageInput:
    return MessageInput(role=Role.TOOL, tool_call_id=call_id, content="result")


class Clock:
    """A clock that moves only when told to (for leases: no test waits for time to pass)."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


STORES = [
    "memory",
    "sqlite",
    "sqlite-core",  # the SQLAlchemy path that other databases take, on SQLite
    "postgres",  # a real server: see tests/postgres.py
]


async def open_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, **options: Any
) -> SessionStore:
    """A store of ``kind``; ``options`` (``clock``, ``holder``) go to its constructor. SQL stores
    opened twice in one test share their database, like two processes."""
    if kind == "memory":
        return MemoryStore(**options)
    from tether.sessions.sql import SqlStore, sqlite_url

    if kind in ("sqlite", "sqlite-core"):
        url = sqlite_url(tmp_path / "sessions.db")
        return await SqlStore.open(url, fast=kind == "sqlite", **options)
    return await SqlStore.open(request.getfixturevalue("postgres_url"), **options)


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = await open_store(request.param, tmp_path, request)
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
