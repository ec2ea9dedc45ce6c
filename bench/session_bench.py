"""Session stores: append throughput, tail-page latency by history length, memory.

tether's SQLite store and its PostgreSQL store side by side with the OpenAI Agents SDK's
``SQLiteSession`` on the same data, in the same run:

1. append throughput (messages/s), written as the kernel writes them: one call per step of 1-3
   messages (user; assistant with tool calls; the results; the answer);
2. latency of the newest page (50 messages, newest first) of a session of 1,000, 10,000 and
   100,000 messages (``session/messages`` order desc / ``get_items(limit=50)``);
3. memory of the in-memory store holding 100,000 messages, against their JSON size (tracemalloc).

PostgreSQL: the database at ``--url`` (its tables are created if missing; the bench adds its own
sessions), else a server started from ``pgserver`` (a dev dependency) in a temporary directory,
on a Unix socket. ``--no-postgres`` leaves it out.

It is a report: nothing asserts a timing. ``--quick`` makes it smaller (for a smoke test).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson

from tether.protocol import MessageInput, Role, ToolCall
from tether.protocol.sessions import CreateSessionParams
from tether.sessions import MemoryStore, SessionStore
from tether.sessions.sql import SqlStore, sqlite_url

WORKSPACE = "file:///bench"
USER = "Please look at the parser and tell me why the tests fail on Windows paths. " * 2
ANSWER = "The parser splits on '/' only; Windows paths use '\\'. Use pathlib instead. " * 3
RESULT = "def parse(path):\n    parts = path.split('/')\n    return [p for p in parts if p]\n" * 6


def steps(turns: int) -> Iterator[list[MessageInput]]:
    """The steps of ``turns`` kernel runs: user; assistant + 2 calls; 2 results; answer.

    Every text is its own string, as in a real session (shared strings would flatter memory).
    """
    for turn in range(turns):
        yield [MessageInput(role=Role.USER, content=f"{turn}: {USER}")]
        calls = [
            ToolCall(id=f"t{turn}c{i}", name="read_file", arguments='{"path": "src/parse.py"}')
            for i in range(2)
        ]
        yield [MessageInput(role=Role.ASSISTANT, content="Let me look.", tool_calls=calls)]
        yield [MessageInput(role=Role.TOOL, tool_call_id=call.id, content=RESULT) for call in calls]
        yield [MessageInput(role=Role.ASSISTANT, content=ANSWER)]


def messages_of(count: int) -> list[list[MessageInput]]:
    """Steps holding ``count`` messages in all (the last step cut to fit)."""
    out: list[list[MessageInput]] = []
    total = 0
    for step in steps(count):
        if total + len(step) > count:
            break
        out.append(step)
        total += len(step)
    if total < count:
        out.append([MessageInput(role=Role.USER, content=USER)] * (count - total))
    return out


def sdk_items(step: list[MessageInput]) -> list[dict[str, Any]]:
    """The same messages as the SDK stores items: one JSON object each."""
    return [orjson.loads(m.model_dump_json(by_alias=True, exclude_none=True)) for m in step]


async def tether_store(path: Path) -> SqlStore:
    return await SqlStore.open(sqlite_url(path))


@contextlib.contextmanager
def postgres(url: str | None, directory: Path, wanted: bool) -> Iterator[str | None]:
    """The PostgreSQL URL to bench: ``url``, or a server started here; None without one."""
    if url is not None or not wanted:
        yield url
        return
    import pgserver

    server = pgserver.get_server(directory / "postgres", cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[SqlStore]:
    store = await SqlStore.open(url)
    try:
        yield store
    finally:
        await store.aclose()


async def append_rate(store: SessionStore, work: list[list[MessageInput]], count: int) -> float:
    session = await store.create(CreateSessionParams(), WORKSPACE)
    start = time.perf_counter()
    for step in work:
        await store.append(session.session_id, step)
    return count / (time.perf_counter() - start)


def sdk_session(path: Path, name: str) -> Any:
    from agents import SQLiteSession

    return SQLiteSession(name, str(path))


async def bench_append(directory: Path, count: int, pg_url: str | None) -> dict[str, float]:
    work = messages_of(count)
    items = [sdk_items(step) for step in work]
    rates: dict[str, float] = {}
    async with opened(sqlite_url(directory / "append-tether.db")) as store:
        rates["tether"] = await append_rate(store, work, count)
    if pg_url is not None:
        async with opened(pg_url) as store:
            rates["postgres"] = await append_rate(store, work, count)

    sdk = sdk_session(directory / "append-sdk.db", "append")
    start = time.perf_counter()
    for batch in items:
        await sdk.add_items(batch)
    rates["sdk"] = count / (time.perf_counter() - start)
    sdk.close()
    return rates


async def fill(store: SessionStore, session_id: str, count: int) -> None:
    batch: list[MessageInput] = []
    for step in messages_of(count):
        batch.extend(step)
        if len(batch) >= 1000:
            await store.append(session_id, batch)
            batch = []
    if batch:
        await store.append(session_id, batch)


async def timed(call: Any, reads: int) -> tuple[float, float]:
    """Median and p95 of ``reads`` calls, in milliseconds."""
    for _ in range(5):
        await call()
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


async def tail_latency(store: SqlStore, size: int, reads: int) -> tuple[float, float]:
    """Median and p95 ms of the newest page of a new session of ``size`` messages."""
    session = await store.create(CreateSessionParams(), WORKSPACE)
    await fill(store, session.session_id, size)

    async def newest_page() -> None:
        page = await store.messages(session.session_id, cursor=None, limit=50, order="desc")
        assert len(page.messages) == 50

    return await timed(newest_page, reads)


async def sdk_tail_latency(directory: Path, size: int, reads: int) -> tuple[float, float]:
    sdk = sdk_session(directory / f"tail-sdk-{size}.db", f"tail{size}")
    batch: list[dict[str, Any]] = []
    for step in messages_of(size):
        batch.extend(sdk_items(step))
        if len(batch) >= 1000:
            await sdk.add_items(batch)
            batch = []
    if batch:
        await sdk.add_items(batch)

    async def newest_page() -> None:
        assert len(await sdk.get_items(limit=50)) == 50

    try:
        return await timed(newest_page, reads)
    finally:
        sdk.close()


async def bench_tail(
    directory: Path, sizes: list[int], reads: int, pg_url: str | None
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        row: dict[str, Any] = {"size": size}
        async with opened(sqlite_url(directory / f"tail-{size}.db")) as store:
            row["tether"] = await tail_latency(store, size, reads)
        if pg_url is not None:
            async with opened(pg_url) as store:
                row["postgres"] = await tail_latency(store, size, reads)
        row["sdk"] = await sdk_tail_latency(directory, size, reads)
        rows.append(row)
    return rows


async def bench_memory(count: int) -> tuple[int, int]:
    """Bytes the memory store holds for ``count`` messages, and their JSON size."""
    work = messages_of(count)
    gc.collect()
    tracemalloc.start()
    store = MemoryStore()
    session = await store.create(CreateSessionParams(), WORKSPACE)
    before = tracemalloc.get_traced_memory()[0]
    for step in work:
        await store.append(session.session_id, step)
    del step
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    history = await store.history(session.session_id)
    json_size = sum(len(orjson.dumps(m.to_wire())) for m in history)
    return held, json_size


def report(append: dict[str, float], tail: list[dict[str, Any]], count: int) -> None:
    print(f"append, one call per kernel step (1-3 messages), {count} messages:")
    print(f"  tether SQLite store      {append['tether']:10,.0f} messages/s")
    if "postgres" in append:
        print(f"  tether PostgreSQL store  {append['postgres']:10,.0f} messages/s")
    print(f"  agents SQLiteSession     {append['sdk']:10,.0f} messages/s")
    print(f"  SQLite ratio             {append['tether'] / append['sdk']:10.2f}x")
    print()
    print("newest page (50 messages), median / p95 ms:")
    columns = ["tether", "postgres", "sdk"] if "postgres" in append else ["tether", "sdk"]
    names = {"tether": "tether SQLite", "postgres": "tether PostgreSQL", "sdk": "agents SQLite"}
    print(f"  {'history':>9}" + "".join(f"  {names[c]:>19}" for c in columns))
    for row in tail:
        cells = "".join(f"  {row[c][0]:9.3f} / {row[c][1]:7.3f}" for c in columns)
        print(f"  {row['size']:>9,}{cells}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--append", type=int, default=5000, help="messages appended")
    parser.add_argument("--sizes", default="1000,10000,100000", help="history lengths")
    parser.add_argument("--reads", type=int, default=200, help="tail reads per size")
    parser.add_argument("--memory", type=int, default=100_000, help="messages in memory")
    parser.add_argument("--url", help="the PostgreSQL store's URL (default: start a server)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite stores only")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.append, args.sizes, args.reads, args.memory = 300, "100,1000", 20, 2000
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with postgres(args.url, directory, not args.no_postgres) as pg_url:
            append = await bench_append(directory, args.append, pg_url)
            tail = await bench_tail(directory, sizes, args.reads, pg_url)
        report(append, tail, args.append)
    held, json_size = await bench_memory(args.memory)
    print()
    print(f"memory store, {args.memory:,} messages:")
    held_mib, json_mib = held / 2**20, json_size / 2**20
    print(f"  held {held_mib:8.1f} MiB, JSON {json_mib:8.1f} MiB, ratio {held / json_size:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
