"""What the provider tests share about streams."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from tether.providers.base import ModelRequest, Provider, StreamEvent


async def cancel_after_first_piece(provider: Provider, request: ModelRequest) -> list[StreamEvent]:
    """Stream ``request``, cancel the reader once the first piece has come, and check that it
    ends cancelled (within 5 s of starting); the events it had read by then."""
    first = asyncio.Event()
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async with aclosing(provider.stream(request)) as stream:
            async for event in stream:
                seen.append(event)
                first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    return seen
