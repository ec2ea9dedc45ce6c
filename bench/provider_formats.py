"""The three HTTP wire formats side by side: one streamed turn per request from the loopback
endpoint (the test suite's ``ModelServer`` on the bench's own event loop), read by the provider.

Each turn is a ~55-word answer streamed word by word with one tool call, optionally preceded by
~30 words of reasoning (``--thinking``). Reported per format: the median wall time of a turn and
the CPU time per turn of the whole process (endpoint included, the same for every format up to
the bytes of its format), over ``--turns`` turns after ``--warmup`` untimed ones::

    .venv/bin/python bench/provider_formats.py --turns 300 --thinking
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.fakes lives in the repository, not in the package

from bench.model_endpoint import ANSWER_TEXT  # noqa: E402
from tests.fakes.model_server import Call, ModelServer, Reply  # noqa: E402

from tether.protocol import Message, Role  # noqa: E402
from tether.providers import Completion, ModelRequest, RetryPolicy  # noqa: E402
from tether.providers.anthropic import AnthropicProvider  # noqa: E402
from tether.providers.gemini import GeminiProvider  # noqa: E402
from tether.providers.http import HttpProvider  # noqa: E402
from tether.providers.openai import OpenAIProvider  # noqa: E402

THINKING = " ".join(["First I look at what the file says, then I answer in a sentence."] * 2)


def provider(kind: str, server: ModelServer, client: httpx.AsyncClient) -> HttpProvider:
    retry = RetryPolicy(max_retries=0)
    if kind == "openai":
        return OpenAIProvider(base_url=server.openai_url, client=client, retry=retry)
    if kind == "anthropic":
        return AnthropicProvider(base_url=server.anthropic_url, client=client, retry=retry)
    return GeminiProvider(base_url=server.gemini_url, client=client, retry=retry)


async def turn(chosen: HttpProvider, request: ModelRequest) -> None:
    async with aclosing(chosen.stream(request)) as events:
        async for event in events:
            if isinstance(event, Completion):
                assert event.tool_calls and event.content
                return
    raise AssertionError("no completion")


async def measure(kind: str, turns: int, warmup: int, thinking: bool) -> tuple[float, float]:
    reply = Reply(
        text=ANSWER_TEXT,
        thinking=THINKING if thinking else "",
        tool_calls=[Call("read_file", {"path": "README.md"}, id="c1")],
    )
    message = Message(id="m1", role=Role.USER, content="What is it?", created_at=datetime.now(UTC))
    settings = {"thinkingLevel": "low"} if thinking else {}
    request = ModelRequest(model="bench-model", messages=[message], settings=settings)
    async with ModelServer(default=reply) as server, httpx.AsyncClient() as client:
        chosen = provider(kind, server, client)
        for _ in range(warmup):
            await turn(chosen, request)
        walls: list[float] = []
        cpu = time.process_time()
        for _ in range(turns):
            start = time.perf_counter()
            await turn(chosen, request)
            walls.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
    return statistics.median(walls), cpu / turns


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--thinking", action="store_true", help="stream reasoning first")
    args = parser.parse_args(argv)
    print(f"{'format':<10} {'median ms/turn':>15} {'CPU ms/turn':>12}")
    for kind in ("openai", "anthropic", "gemini"):
        wall, cpu = asyncio.run(measure(kind, args.turns, args.warmup, args.thinking))
        print(f"{kind:<10} {wall * 1000:>15.2f} {cpu * 1000:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
