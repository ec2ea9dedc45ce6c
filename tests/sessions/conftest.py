from __future__ import annotations

import pytest

from tether.protocol import Session
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import MemoryStore

WORKSPACE = "file:///work/project"


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def session(store: MemoryStore) -> Session:
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
