"""What the provider tests share about streams."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from tether.providers import ModelRequest
from tether.providers.http import HttpProvider


async def cancel_after_first_piece(provider: HttpProvider, request: ModelRequest) -> None:
    """Stream ``request``, cancel the reader once the first piece has come, and check that it
    ends cancelled (within 5 s of starting)."""
    first = asyncio.Event()

    async def consume() -> None:
        async with aclosing(provider.stream(request)) as stream:
            async for _ in stream:
                first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
