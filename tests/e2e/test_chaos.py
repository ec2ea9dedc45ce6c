"""Three real servers on one store, doing random things to the same sessions while being killed.

Each of three slots keeps a ``tether serve`` on the shared store (a SQLite file, a PostgreSQL
database) and, until the time budget is spent, picks random operations on random sessions:
create, append, run (the model calls tools; at most one run per slot at a time, going on while
the slot does other things), fork, clear, delete; one slot also sweeps with a short TTL. Now and
then the server of slot a or b is killed (SIGKILL) and started again; slot c's is never killed,
so that runs finish within any budget (a server killed every second or so rarely lives through a
run). Leases last two seconds, so a killed server's sessions are free again soon.

Afterwards the database is opened directly and must show: every session loads and counts its
messages right; no tool call has two results, and only the last exchange of a session may
still wait for one (its run was killed); every fork still starts with the prefix it was forked
with; no message or tool-call row belongs to nothing; every acknowledged append is there unless a
clear or delete of its session may have run after it. And no run that had started answered
"session not found" (a session deleted or swept under a run), nor did any request fail with an
internal error. Seeded: the seed is printed; ``TETHER_CHAOS_SEED`` replays the choices (not the
timing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from tether.client import Connection, RpcError
from tether.protocol import ErrorCode, Role
from tether.sessions.sql import SqlStore, sqlite_url

from .conftest import SERVER

BUDGET_SECONDS = float(os.environ.get("TETHER_CHAOS_BUDGET", "15"))  # per store
SLOTS = 3
HOT_SESSIONS = 5  # few sessions, so that operations of the slots meet in them
FOREVER = float("inf")


def script(tag: str, runs: int = 300) -> list[dict[str, Any]]:
    """Runs of two turns: a command that takes a moment and a read, then an answer."""
    turns: list[dict[str, Any]] = []
    for run in range(runs):
        calls = [
            {"id": f"{tag}-{run}-a", "name": "run_command", "arguments": {"command": "sleep 0.5"}},
            {"id": f"{tag}-{run}-b", "name": "read_file", "arguments": {"path": "README.md"}},
        ]
        turns += [{"toolCalls": calls}, {"text": f"done {tag} {run}"}]
    return turns


EXPECTED_ERRORS = {
    ErrorCode.SESSION_BUSY,  # a run holds it (or a run lost its lease)
    ErrorCode.SESSION_NOT_FOUND,  # deleted or swept meanwhile
    ErrorCode.INVALID_PARAMS,  # a fork point gone with a clear, or inside a tool exchange
    ErrorCode.PROVIDER_ERROR,  # a script that ran out
}


@dataclass
class Ledger:
    """What the servers acknowledged, with the test's own clock (``time.monotonic``)."""

    sessions: set[str] = field(default_factory=set)
    appended: list[tuple[str, str, float]] = field(default_factory=list)  # sid, id, sent
    wipes: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # sid: sent, end
    forks: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # fork: parent, prefix
    violations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def may_be_wiped_after(self, sid: str, sent: float) -> bool:
        """Whether a clear or delete of ``sid`` may have run after a write sent at ``sent``."""
        return any(end > sent for _, end in self.wipes.get(sid, []))


class Slot:
    def __init__(
        self, name: str, project: Path, env: dict[str, str], rng: random.Random, ledger: Ledger
    ) -> None:
        self.name, self.project, self.env, self.rng, self.ledger = name, project, env, rng, ledger
        self.connection: Connection | None = None
        self.killable = name != "c"  # c's server lives through the test: its runs finish
        self.spawns = 0
        self.run: asyncio.Future[None] | None = None
        self.started_runs: set[str] = set()  # sessions with a run_started on this connection

    async def start(self) -> Connection:
        self.spawns += 1
        tag = f"{self.name}{self.spawns}"
        path = self.project.parent / f"chaos-{tag}.json"
        path.write_text(json.dumps(script(tag)))
        options: dict[str, Any] = {
            "provider": {"type": "scripted", "script": str(path), "model": "m"},
            "tools": {"approval": "auto"},
            "sessions": {"lease": "2s", **({"ttl": "3s"} if self.name == "a" else {})},
        }
        started: set[str] = set()
        self.started_runs = started

        def seen(method: str, params: Any) -> bool:
            if method == "kernel/progress" and params["event"]["kind"] == "run_started":
                started.add(params["sessionId"])
            return True

        connection = await Connection.spawn(SERVER, env=self.env, on_notification=seen)
        await connection.request(
            "initialize",
            {
                "workspaceFolders": [{"uri": self.project.as_uri()}],
                "initializationOptions": options,
            },
        )
        connection.notify("initialized", {})
        self.connection = connection
        return connection

    async def kill(self) -> None:
        if self.connection is not None and self.connection.process.returncode is None:
            self.connection.process.kill()
            await self.connection.process.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.connection._reader, 5)
        if self.run is not None:
            with contextlib.suppress(BaseException):
                await self.run
            self.run = None

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        assert self.connection is not None
        try:
            return await asyncio.wait_for(self.connection.request(method, params), 60)
        except RpcError as error:
            self.ledger.count(f"{method} {error.code}")
            if error.code not in EXPECTED_ERRORS:
                self.ledger.violations.append(f"{method} answered {error.code}: {error.message}")
            raise

    def pick(self) -> str | None:
        """One of the newest sessions (ids sort in creation order)."""
        live = sorted(self.ledger.sessions)[-HOT_SESSIONS:]
        return self.rng.choice(live) if live else None

    # -- operations ----------------------------------------------------------------------------

    async def create(self) -> None:
        created = await self.request("session/create", {"title": self.name})
        self.ledger.sessions.add(created["sessionId"])

    async def append(self, sid: str) -> None:
        sent = time.monotonic()
        message = {"role": "user", "content": f"note from {self.name}"}
        result = await self.request("session/append", {"sessionId": sid, "messages": [message]})
        for stored in result["messages"]:
            self.ledger.appended.append((sid, stored["id"], sent))

    async def fork(self, sid: str) -> None:
        page = await self.request("session/messages", {"sessionId": sid, "limit": 1000})
        ids = [m["id"] for m in page["messages"]]
        params: dict[str, Any] = {"sessionId": sid}
        if ids and self.rng.random() < 0.7:
            params["atMessageId"] = self.rng.choice(ids)
        fork = await self.request("session/fork", params)
        at = fork.get("forkedFromMessageId")
        prefix = ids[: ids.index(at) + 1] if at in ids else None
        if prefix is not None or at is None:
            self.ledger.forks[fork["sessionId"]] = (sid, prefix or [])
        self.ledger.sessions.add(fork["sessionId"])

    async def wipe(self, sid: str, method: str) -> None:
        sent = time.monotonic()
        wipes = self.ledger.wipes.setdefault(sid, [])
        wipes.append((sent, FOREVER))  # until the answer says otherwise
        try:
            await self.request(method, {"sessionId": sid})
        except RpcError:
            wipes.remove((sent, FOREVER))  # refused: it did nothing
            raise
        wipes[wipes.index((sent, FOREVER))] = (sent, time.monotonic())
        if method == "session/delete":
            self.ledger.sessions.discard(sid)

    async def run_in(self, sid: str) -> None:
        try:
            await self.request("kernel/run", {"sessionId": sid, "prompt": f"go {self.name}"})
            self.ledger.count("runs finished")
        except RpcError as error:
            lost = isinstance(error.data, dict) and error.data.get("leaseLost")
            if error.code == ErrorCode.SESSION_NOT_FOUND and sid in self.started_runs:
                self.ledger.violations.append(f"a run in {sid} started, then its session was gone")
            if lost:
                self.ledger.count("runs that lost their lease")
        finally:
            self.started_runs.discard(sid)

    async def step(self) -> None:
        sid = self.pick()
        roll = self.rng.random()
        if sid is None or roll < 0.05:
            await self.create()
        elif roll < 0.3:
            await self.append(sid)
        elif roll < 0.6:
            if self.run is None or self.run.done():
                self.run = asyncio.ensure_future(self.run_in(sid))
            else:
                await self.append(sid)
        elif roll < 0.75:
            await self.fork(sid)
        elif roll < 0.85:
            await self.wipe(sid, "session/clear")
        elif roll < 0.99:
            await self.wipe(sid, "session/delete")
        elif self.killable:
            await self.kill()
            self.ledger.count("kills")
            await self.start()
        else:
            await self.append(sid)

    async def work(self, deadline: float) -> None:
        await self.start()
        while time.monotonic() < deadline:
            with contextlib.suppress(RpcError, ConnectionError, asyncio.TimeoutError):
                await self.step()
                self.ledger.count("operations")
        await self.kill()


async def check(url: str, ledger: Ledger) -> None:
    store = await SqlStore.open(url)
    try:
        listed = await store.list_sessions(workspace=None, cursor=None, limit=1000)
        histories = {}
        for session in listed.sessions:
            sid = session.session_id
            history = await store.history(sid)
            assert (await store.get(sid)).message_count == len(history)
            histories[sid] = history
            check_results(sid, history)
        for fork, (parent, prefix) in ledger.forks.items():
            if fork in histories and not ledger.may_be_wiped_after(fork, 0.0):
                ids = [m.id for m in histories[fork]]
                assert ids[: len(prefix)] == prefix, f"fork {fork} of {parent} lost its prefix"
        for sid, message_id, sent in ledger.appended:
            if sid in histories and not ledger.may_be_wiped_after(sid, sent):
                assert message_id in {m.id for m in histories[sid]}, f"{message_id} lost in {sid}"
        orphans = await store._read(lambda c: c.execute(text(ORPHANS)).all())
        assert orphans == [(0, 0)], f"rows that belong to nothing: {orphans}"
    finally:
        await store.aclose()


ORPHANS = """
SELECT
  (SELECT count(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.owner =
     m.owner) AND NOT EXISTS (SELECT 1 FROM segments g WHERE g.owner = m.owner)),
  (SELECT count(*) FROM tool_calls t WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.owner =
     t.owner) AND NOT EXISTS (SELECT 1 FROM segments g WHERE g.owner = t.owner))
"""


def check_results(sid: str, history: list[Any]) -> None:
    """No call answered twice; only the last exchange may wait for results (a killed run)."""
    results: dict[str, int] = {}
    for message in history:
        if message.role is Role.TOOL and message.tool_call_id is not None:
            results[message.tool_call_id] = results.get(message.tool_call_id, 0) + 1
    assert all(n == 1 for n in results.values()), f"{sid}: a call has two results: {results}"
    exchanges = [m for m in history if m.tool_calls]
    for index, message in enumerate(exchanges):
        open_calls = [c.id for c in message.tool_calls or () if c.id not in results]
        assert not open_calls or index == len(exchanges) - 1, f"{sid}: {open_calls} unanswered"


Prepare = Callable[[], Awaitable[str]]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "chaos.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.mark.timeout(BUDGET_SECONDS + 90)
async def test_three_servers_doing_random_things_to_shared_sessions_keep_them_valid(
    tmp_path: Path, store_url: str
) -> None:
    seed = int(os.environ.get("TETHER_CHAOS_SEED", random.randrange(2**32)))
    print(f"chaos test seed: {seed} (TETHER_CHAOS_SEED={seed} to replay)")
    rng = random.Random(seed)
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# Demo\n")
    # The schema is made before the servers start: three servers creating it at once on
    # PostgreSQL is another matter than leases.
    await (await SqlStore.open(store_url)).aclose()
    env = {"TETHER_SESSIONS_STORE": store_url}
    ledger = Ledger()
    slots = [
        Slot(name, project, env, random.Random(rng.random()), ledger) for name in "abc"[:SLOTS]
    ]
    deadline = time.monotonic() + BUDGET_SECONDS
    await asyncio.gather(*(slot.work(deadline) for slot in slots))
    print(f"counts: {dict(sorted(ledger.counts.items()))}, sessions: {len(ledger.sessions)}")
    assert not ledger.violations, ledger.violations
    assert ledger.counts.get("runs finished", 0) > 0
    await check(store_url, ledger)
