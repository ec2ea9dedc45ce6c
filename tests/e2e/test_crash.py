"""The real server on a SQLite store, killed with SIGKILL at random points of its runs.

Two workers, each on its own file, start a server, run back-to-back ``kernel/run`` requests whose
model calls tools, and kill the server after a random delay. After each kill the file is opened
by a fresh store and checked: it is intact, every session loads, nothing the client saw
acknowledged is missing, and only the last tool exchange of a session may still wait for its
results. Every few kills a fresh server runs once in each such session, which must answer the
waiting calls "interrupted". Seeded (the seed is printed; ``TETHER_CRASH_SEED`` replays it).

A killed server's runs keep their sessions leased until the lease expires (one second here): a
new server whose run is refused as busy goes on in a new session, and the fresh-server check
asks again until the lease has expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError, SessionBusyError
from tether.protocol import Message, Role
from tether.sessions.sql import SqlStore, sqlite_url

from .conftest import SERVER

BUDGET_SECONDS = float(os.environ.get("TETHER_CRASH_BUDGET", "150"))
KILLS = 100  # in all; on an idle machine a kill takes well under a second per worker
MIN_KILLS = KILLS  # the budget leaves a loaded machine room (an idle one needs ~60 s)
FRESH_SERVER_EVERY = 5


@dataclass
class Acknowledged:
    """What the client saw that the server must have written, per session."""

    messages: dict[str, set[str]] = field(default_factory=dict)  # session -> message ids
    calls: dict[str, set[str]] = field(default_factory=dict)  # session -> assistant call ids
    results: dict[str, set[str]] = field(default_factory=dict)  # session -> answered call ids

    def add(self, table: dict[str, set[str]], session_id: str, *values: str) -> None:
        table.setdefault(session_id, set()).update(values)


def script(tag: str, turns: int = 300) -> list[dict[str, Any]]:
    """Runs of three model turns: two with tool calls, then an answer. Call ids are unique."""
    out: list[dict[str, Any]] = []
    for turn in range(turns):
        kind = turn % 3
        if kind == 2:
            out.append({"text": f"done {tag} {turn}"})
            continue
        calls = [
            {"id": f"{tag}-{turn}-a", "name": "list_files", "arguments": {}},
            {"id": f"{tag}-{turn}-b", "name": "read_file", "arguments": {"path": "README.md"}},
        ][: 2 - kind]
        out.append({"text": f"looking {tag} {turn}", "toolCalls": calls})
    return out


async def spawn(project: Path, db: Path, turns: list[dict[str, Any]], seen: Any) -> Connection:
    path = project.parent / f"script-{os.getpid()}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(turns))
    connection = await Connection.spawn(
        SERVER,
        env={"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(db)},
        on_notification=seen,
    )
    options = {
        "provider": {"type": "scripted", "script": str(path), "model": "m"},
        "sessions": {"lease": "1s"},
    }
    await connection.request(
        "initialize",
        {"workspaceFolders": [{"uri": project.as_uri()}], "initializationOptions": options},
    )
    connection.notify("initialized", {})
    return connection


class Worker:
    def __init__(self, name: str, project: Path, db: Path, rng: random.Random) -> None:
        self.name, self.project, self.db, self.rng = name, project, db, rng
        self.ack = Acknowledged()
        self.sessions: list[str] = []
        self.kills = self.checks_with_server = self.runs_finished = 0
        self._deltas: dict[str, str] = {}  # run id -> id of the message being streamed

    def seen(self, method: str, params: Any) -> bool:
        if method != "kernel/progress":
            return False
        sid, event = params["sessionId"], params["event"]
        kind = event["kind"]
        if kind == "run_started":
            self.ack.add(self.ack.messages, sid, event["userMessageId"])
        elif kind == "message_delta":
            self._deltas[params["runId"]] = event["messageId"]
        elif kind == "tool_call":
            self.ack.add(self.ack.calls, sid, event["toolCallId"])
            if (message_id := self._deltas.get(params["runId"])) is not None:
                self.ack.add(self.ack.messages, sid, message_id)
        elif kind == "iteration_finished":
            if (message_id := self._deltas.pop(params["runId"], None)) is not None:
                self.ack.add(self.ack.messages, sid, message_id)
        return True

    async def cycle(self, spawn_number: int) -> None:
        """One server: runs back to back, killed after a random delay once they are going."""
        tag = f"{self.name}{spawn_number}"
        connection = await spawn(self.project, self.db, script(tag), self.seen)
        try:
            if not self.sessions or self.rng.random() < 0.25:
                created = await connection.request("session/create", {"title": tag})
                self.sessions.append(created["sessionId"])
            sid = self.rng.choice(self.sessions)

            async def runs() -> None:
                nonlocal sid
                while True:
                    try:
                        result = await connection.request(
                            "kernel/run", {"sessionId": sid, "prompt": f"go {tag}"}
                        )
                    except SessionBusyError:  # the killed server's lease: go on elsewhere
                        sid = (await connection.request("session/create", {"title": tag}))[
                            "sessionId"
                        ]
                        self.sessions.append(sid)
                        continue
                    self.runs_finished += 1
                    for record in result["toolCalls"]:
                        self.ack.add(self.ack.results, sid, record["id"])

            running = asyncio.ensure_future(runs())
            await asyncio.sleep(self.rng.uniform(0.0, 0.4))
            connection.process.kill()
            await connection.process.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection._reader, 5)
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError, RpcError, ConnectionError):
                await running
            self.kills += 1
        finally:
            if connection.process.returncode is None:
                connection.process.kill()
                await connection.process.wait()

    async def check(self) -> list[tuple[str, list[str]]]:
        """The file after a kill; the sessions whose last exchange waits for results."""
        with contextlib.closing(sqlite3.connect(self.db)) as db:
            assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)], self.db
        store = await SqlStore.open(sqlite_url(self.db))
        waiting: list[tuple[str, list[str]]] = []
        try:
            listed = await store.list_sessions(workspace=None, cursor=None, limit=1000)
            stored = {s.session_id: s for s in listed.sessions}
            assert set(self.sessions) <= stored.keys()
            for sid in stored.keys() - set(self.sessions):  # created, killed before the answer
                assert stored[sid].message_count == 0, f"{sid}: no one could have run in it"
            for sid in self.sessions:
                session = await store.get(sid)
                history = await store.history(sid)
                assert session.message_count == len(history)
                ids = {m.id for m in history}
                missing = self.ack.messages.get(sid, set()) - ids
                assert not missing, f"{sid}: acknowledged messages lost: {missing}"
                called = {c.id for m in history for c in m.tool_calls or ()}
                assert not self.ack.calls.get(sid, set()) - called
                answered = {m.tool_call_id for m in history if m.role is Role.TOOL}
                assert not self.ack.results.get(sid, set()) - answered
                dangling = _dangling(history, answered)
                if dangling:
                    waiting.append((sid, dangling))
        finally:
            await store.aclose()
        return waiting

    async def answer_with_a_fresh_server(self, waiting: list[tuple[str, list[str]]]) -> None:
        """A new server's next run answers every waiting call "interrupted"."""
        turns = [{"text": "after the crash"}] * len(waiting)
        connection = await spawn(self.project, self.db, turns, lambda m, p: True)
        try:
            for sid, calls in waiting:
                await run_when_free(connection, sid, "again")
                page = await connection.request(
                    "session/messages", {"sessionId": sid, "order": "desc", "limit": 50}
                )
                results = {
                    m["toolCallId"]: m["content"]
                    for m in page["messages"]
                    if m["role"] == "tool" and m["toolCallId"] in calls
                }
                assert results == dict.fromkeys(calls, "interrupted")
        finally:
            await connection.close()
        self.checks_with_server += 1

    async def work(self, deadline: float, workers: list[Worker]) -> None:
        spawn_number = 0
        while sum(w.kills for w in workers) < KILLS and time.monotonic() < deadline:
            spawn_number += 1
            await self.cycle(spawn_number)
            waiting = await self.check()
            if waiting and self.kills % FRESH_SERVER_EVERY == 0:
                await self.answer_with_a_fresh_server(waiting)
                assert await self.check() == []


async def run_when_free(connection: Connection, sid: str, prompt: str) -> Any:
    """``kernel/run``, asked again while a killed server's lease on the session lasts (a
    second at most)."""
    while True:
        try:
            return await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        except SessionBusyError:
            await asyncio.sleep(0.05)


def _dangling(history: list[Message], answered: set[str | None]) -> list[str]:
    """Unanswered calls; only the last assistant message with calls may have any."""
    with_calls = [i for i, m in enumerate(history) if m.tool_calls]
    dangling: list[str] = []
    for index in with_calls:
        calls = history[index].tool_calls or []
        open_calls = [c.id for c in calls if c.id not in answered]
        if open_calls:
            assert index == with_calls[-1], "an earlier tool exchange was left unanswered"
            dangling = open_calls
    return dangling


@pytest.mark.timeout(240)
async def test_sigkill_during_runs_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = int(os.environ.get("TETHER_CRASH_SEED", random.randrange(2**32)))
    print(f"crash test seed: {seed} (TETHER_CRASH_SEED={seed} to replay)")
    rng = random.Random(seed)
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# Demo\n")
    workers = [
        Worker(name, project, tmp_path / f"{name}.db", random.Random(rng.random()))
        for name in ("a", "b")
    ]
    deadline = time.monotonic() + BUDGET_SECONDS
    await asyncio.gather(*(worker.work(deadline, workers) for worker in workers))

    kills = sum(w.kills for w in workers)
    print(
        f"kills: {kills}, runs finished: {sum(w.runs_finished for w in workers)}, "
        f"fresh-server checks: {sum(w.checks_with_server for w in workers)}, "
        f"acknowledged messages: {sum(len(v) for w in workers for v in w.ack.messages.values())}"
    )
    assert kills >= MIN_KILLS, f"only {kills} kills fit in the time budget (seed {seed})"
    assert sum(w.checks_with_server for w in workers) >= 1
