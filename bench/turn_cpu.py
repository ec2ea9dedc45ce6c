"""What one streamed model turn costs tether's process, layer by layer, in one process.

The OpenAI provider's ``stream`` against ``model_endpoint.py`` (in a process of its own, no
latency) for a turn that answers in text (59 SSE events, ~10.7 KB), beside the same POST as the
provider sends it with the body read as bytes (its own request, straight to aiohttp's session
as ``Client.post_direct`` sends it, without reading its events), and through aiohttp alone. The
differences are tether's reading (SSE, JSON, the OpenAI reader, the provider's generators) and
what the provider's request adds to aiohttp's (its headers, its read and connect timeouts). CPU of
this process per turn, ``--concurrent`` turns at once, the kinds alternating; min and median
over ``--rounds``. It prints a report and asserts nothing::

    .venv/bin/python bench/turn_cpu.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import aiohttp
import orjson

from served import API_KEY, MODEL, endpoint
from tether.protocol import Message, Role, ToolCall
from tether.providers.base import ModelRequest
from tether.providers.client import make_client
from tether.providers.openai import OpenAIProvider

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# a tool call answered: the endpoint answers with text
HISTORY = [
    Message(id="1", role=Role.USER, content="What is this project?", created_at=NOW),
    Message(
        id="2",
        role=Role.ASSISTANT,
        content="",
        tool_calls=[ToolCall(id="call_1", name="read_file", arguments='{"path": "README.md"}')],
        created_at=NOW,
    ),
    Message(id="3", role=Role.TOOL, content="# tether", tool_call_id="call_1", created_at=NOW),
]
REQUEST = ModelRequest(model=MODEL, system="Keep answers short.", messages=HISTORY)


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    async with endpoint(0.0) as model:
        client = make_client(200, keepalive=300)
        provider = OpenAIProvider(
            base_url=model.openai_url, api_key=API_KEY, client=client, model=MODEL
        )
        body = orjson.dumps(provider.payload(REQUEST))
        connector = aiohttp.TCPConnector(limit=200, keepalive_timeout=300)
        session = aiohttp.ClientSession(connector=connector)
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "authorization": f"Bearer {API_KEY}",
        }

        async def provider_turn() -> None:
            async for _ in provider.stream(REQUEST):
                pass

        async def post_bytes() -> None:
            async with provider._open(provider.url, body) as response:
                async for _ in response.aiter_bytes():
                    pass

        async def aiohttp_bytes() -> None:
            async with session.post(provider.url, data=body, headers=headers) as response:
                async for _ in response.content.iter_any():
                    pass

        kinds: dict[str, Callable[[], Awaitable[None]]] = {
            "provider.stream (all of it)": provider_turn,
            "provider's POST, body as bytes": post_bytes,
            "aiohttp alone, body as bytes": aiohttp_bytes,
        }
        got: dict[str, list[float]] = {name: [] for name in kinds}
        try:
            for turn in kinds.values():  # warm-up: connections, imports
                await asyncio.gather(*(turn() for _ in range(args.concurrent)))
            for _ in range(args.rounds):
                for name, turn in kinds.items():
                    cpu = time.process_time()
                    await asyncio.gather(*(turn() for _ in range(args.concurrent)))
                    got[name].append((time.process_time() - cpu) / args.concurrent)
        finally:
            await client.aclose()
            await session.close()
    return got


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrent", type=int, default=100)
    args = parser.parse_args(argv)
    got = asyncio.run(measure(args))
    print(f"CPU per streamed answer turn (ms), {args.concurrent} at once, {args.rounds} rounds")
    for name, values in got.items():
        low, mid = min(values) * 1e3, statistics.median(values) * 1e3
        print(f"  {name:32} min {low:6.3f}   median {mid:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
