"""Store faults through the real server: each one is answered ``-32015`` StoreError with its
reason, logged once without a traceback, and the server goes on; nothing is acknowledged that the
store did not keep.

The faults are real: a SQLite file deleted or replaced under the server, a ``-shm`` file made
immutable (SQLite maps it: a write to it would be SIGBUS), an immutable ``-wal`` file, a full disk
(a tmpfs in the server's own mount namespace), damaged pages, a PostgreSQL server that stops; and
once a fault is gone, every method works again. Making files immutable needs root (CI runs as
root), and a file system that has immutable files.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError
from tether.protocol import ErrorCode
from tether.protocol.framing import encode_frame
from tether.protocol.limits import MAX_JSON_DEPTH

from ..postgres import OwnServer, new_database
from .conftest import SERVER, initialized, script_options

WAIT = 60.0  # seconds any one answer may take on a loaded machine
RUN = [{"text": "ran"}]


def sqlite_env(path: Path) -> dict[str, str]:
    return {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(path)}


def logged(log: Path, argv: list[str] = SERVER) -> list[str]:
    """``argv`` with the server's stderr (its log) appended to ``log``."""
    return ["sh", "-c", 'exec "$@" 2>>"$0"', str(log), *argv]


class Servers:
    """Starts real servers on ``project``; those still running are killed at the end."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.started: list[Connection] = []

    async def start(
        self, env: dict[str, str], argv: list[str] = SERVER, turns: list[Any] = RUN
    ) -> Connection:
        connection = await Connection.spawn(argv, env=env)
        self.started.append(connection)
        options = script_options(self.project, turns, name=f"s{len(self.started)}")
        await asyncio.wait_for(initialized(connection, self.project, options), WAIT)
        return connection


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
async def servers(project: Path) -> AsyncIterator[Servers]:
    started = Servers(project)
    yield started
    for connection in started.started:
        if connection.process.returncode is None:
            connection.process.kill()
        await connection.process.wait()
        connection._reader.cancel()


async def store_fault(request: Awaitable[Any]) -> str:
    """The reason of the StoreError that ``request`` is answered with."""
    with pytest.raises(RpcError) as caught:
        await asyncio.wait_for(request, WAIT)
    assert caught.value.code == ErrorCode.STORE_ERROR, caught.value
    reason: str = caught.value.data["reason"]
    return reason


def append(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "messages": [{"role": "user", "content": text}]}


async def contents(connection: Connection, sid: str) -> list[Any]:
    page = await connection.request("session/messages", {"sessionId": sid, "limit": 1000})
    return [m["content"] for m in page["messages"]]


def fault_lines(log: Path) -> list[str]:
    """What the server logged of store faults; a traceback anywhere fails the test."""
    text = log.read_text()
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if "session store" in line and "WARNING" in line]


# --- the SQLite file deleted or replaced ---------------------------------------------------------


async def test_a_sqlite_file_replaced_under_the_server_refuses_its_writes_and_loses_none(
    servers: Servers, tmp_path: Path
) -> None:
    """A copy of the database is moved over its path while A runs: A refuses every write
    after that (it would go to the file it opened, which nothing reads any more), goes on
    answering reads, and the file at the path holds every message A acknowledged."""
    db = tmp_path / "s.db"
    a = await servers.start(sqlite_env(db), argv=logged(tmp_path / "a.log"))
    sid = (await a.request("session/create", {}))["sessionId"]
    for i in range(10):
        await a.request("session/append", append(sid, f"before {i}"))
    with sqlite3.connect(db) as live, sqlite3.connect(tmp_path / "copy.db") as copy:
        live.backup(copy)
    (tmp_path / "copy.db").replace(db)

    refused = [
        ("session/append", append(sid, "after")),
        ("session/create", {}),
        ("session/configure", {"sessionId": sid, "title": "renamed"}),
        ("kernel/run", {"sessionId": sid, "prompt": "go on"}),
    ]
    for method, params in refused * 3:
        assert await store_fault(a.request(method, params)) == "replaced"
    assert (await a.request("session/get", {"sessionId": sid}))["messageCount"] == 10
    assert len(fault_lines(tmp_path / "a.log")) == 1
    assert await a.close() == 0

    b = await servers.start(sqlite_env(db))
    assert await contents(b, sid) == [f"before {i}" for i in range(10)]
    await b.request("session/append", append(sid, "in the new file"))


async def test_a_sqlite_file_deleted_under_the_server_acknowledges_no_write_after_it(
    servers: Servers, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    a = await servers.start(sqlite_env(db))
    sid = (await a.request("session/create", {}))["sessionId"]
    await a.request("session/append", append(sid, "before"))
    db.unlink()
    for i in range(10):
        assert await store_fault(a.request("session/append", append(sid, f"{i}"))) == "replaced"
    assert await store_fault(a.request("session/create", {})) == "replaced"
    assert await a.close() == 0

    b = await servers.start(sqlite_env(db))
    assert (await b.request("session/list", {}))["sessions"] == []  # a new, empty store


async def test_a_language_servers_command_meeting_a_store_fault_answers_store_error(
    servers: Servers, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    server = await servers.start(sqlite_env(db))
    command = {"command": "tether.newSession", "arguments": []}
    await server.request("workspace/executeCommand", command)
    db.unlink()
    assert await store_fault(server.request("workspace/executeCommand", command)) == "replaced"


# --- files that may not be written --------------------------------------------------------------


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    """``chattr +i`` on ``paths`` (even root may not write them), undone at the end."""
    if os.geteuid() != 0:
        pytest.skip("making a file immutable needs root")
    done: list[Path] = []
    try:
        for path in paths:
            made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
            if made.returncode != 0:
                pytest.skip(f"no immutable files here: {made.stderr.decode().strip()}")
            done.append(path)
        yield
    finally:
        for path in done:
            subprocess.run(["chattr", "-i", str(path)], check=True)


async def test_an_immutable_shm_file_under_a_running_server_is_read_only_not_sigbus(
    servers: Servers, tmp_path: Path
) -> None:
    """SQLite maps the ``-shm`` file and writes to it in reads and writes: made immutable, a
    write to the mapping would kill the server with SIGBUS. Every request is refused
    ``read-only`` instead, and once the file may be written again everything goes on."""
    db = tmp_path / "s.db"
    a = await servers.start(sqlite_env(db), argv=logged(tmp_path / "a.log"))
    sid = (await a.request("session/create", {}))["sessionId"]
    await a.request("session/append", append(sid, "kept"))
    with immutable(Path(f"{db}-shm")):
        for method, params in [
            ("session/append", append(sid, "refused")),
            ("session/messages", {"sessionId": sid}),
            ("session/get", {"sessionId": sid}),
            ("session/create", {}),
            ("kernel/run", {"sessionId": sid, "prompt": "go"}),
        ]:
            assert await store_fault(a.request(method, params)) == "read-only"
        assert a.process.returncode is None
    await a.request("session/append", append(sid, "after"))
    assert await contents(a, sid) == ["kept", "after"]
    assert len(fault_lines(tmp_path / "a.log")) == 1


async def test_a_server_started_on_an_immutable_store_answers_reads_and_refuses_writes(
    servers: Servers, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    a = await servers.start(sqlite_env(db))  # keeps the -wal and -shm files there
    sid = (await a.request("session/create", {}))["sessionId"]
    await a.request("session/append", append(sid, "kept"))
    with immutable(db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        b = await servers.start(sqlite_env(db))
        assert await contents(b, sid) == ["kept"]
        assert [s["sessionId"] for s in (await b.request("session/list", {}))["sessions"]] == [sid]
        for server in (a, b):
            refusal = store_fault(server.request("session/append", append(sid, "refused")))
            assert await refusal == "read-only"
    await a.request("session/append", append(sid, "after"))
    assert await contents(b, sid) == ["kept", "after"]


# --- a full disk ----------------------------------------------------------------------------------


def on_a_small_disk(directory: Path, size: str = "1m") -> list[str]:
    """The server's command, run with a tmpfs of ``size`` mounted on ``directory`` in a mount
    namespace of its own (in a user namespace too unless root, so no privilege is needed)."""
    mount = 'mount -t tmpfs -o size="$1" tmpfs "$0" && shift && exec "$@"'
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "sh", "-c", mount, str(directory), size, *SERVER]


async def test_a_full_disk_refuses_the_write_and_keeps_every_acknowledged_one(
    servers: Servers, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    log = tmp_path / "server.log"
    server = await servers.start(sqlite_env(disk / "s.db"), argv=logged(log, on_a_small_disk(disk)))
    sid = (await server.request("session/create", {}))["sessionId"]
    acknowledged = []
    for i in range(100):  # 100 times 32 KiB: three times the disk
        text = f"{i} " + "x" * 32 * 1024
        try:
            await server.request("session/append", append(sid, text))
        except RpcError as error:
            assert error.code == ErrorCode.STORE_ERROR
            assert error.data == {"reason": "disk-full"}
            break
        acknowledged.append(text)
    else:
        pytest.fail("the disk never filled")
    assert acknowledged
    again = server.request("session/append", append(sid, "again " + "x" * 32 * 1024))
    assert await store_fault(again) == "disk-full"
    assert await contents(server, sid) == acknowledged
    assert len(fault_lines(log)) == 1
    assert (await server.request("session/get", {"sessionId": sid}))["running"] is False


class Filler:
    """A file that takes every free byte of the small disk of ``server`` (seen through
    ``/proc/<pid>/root``: the disk is mounted in the server's own mount namespace), until it is
    removed."""

    def __init__(self, server: Connection, disk: Path) -> None:
        self.path = Path(f"/proc/{server.process.pid}/root") / disk.relative_to("/") / "filler"

    def fill(self) -> None:
        chunk = b"\0" * 4096
        with self.path.open("wb", buffering=0) as file:
            try:
                while True:
                    file.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc

    def remove(self) -> None:
        self.path.unlink()


async def test_after_a_full_disk_is_freed_every_method_works_again_without_a_restart(
    servers: Servers, tmp_path: Path
) -> None:
    """Writes that fail for want of space (a session's row through SQLAlchemy, an append on
    sqlite3 itself) leave no transaction open behind them: reads go on answering meanwhile, and
    once space is back every method works again."""
    disk = tmp_path / "disk"
    disk.mkdir()
    log = tmp_path / "server.log"
    argv = logged(log, on_a_small_disk(disk, "8m"))
    server = await servers.start(sqlite_env(disk / "s.db"), argv=argv, turns=RUN * 2)
    sid = (await server.request("session/create", {}))["sessionId"]
    await server.request("session/append", append(sid, "kept"))
    filler = Filler(server, disk)
    filler.fill()
    big = "x" * 256 * 1024
    for _ in range(2):
        assert await store_fault(server.request("session/append", append(sid, big))) == "disk-full"
        refused = server.request("session/create", {"metadata": {"note": big}})
        assert await store_fault(refused) == "disk-full"
    assert await contents(server, sid) == ["kept"]
    listed = await server.request("session/list", {})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    assert (await server.request("session/get", {"sessionId": sid}))["messageCount"] == 1

    filler.remove()
    other = (await server.request("session/create", {"metadata": {"note": big}}))["sessionId"]
    await server.request("session/append", append(sid, big))
    await server.request("session/configure", {"sessionId": sid, "title": "after"})
    ran = await server.request("kernel/run", {"sessionId": other, "prompt": "go"})
    assert ran["stopReason"] == "end_turn"
    listed = await server.request("session/list", {})
    assert {s["sessionId"] for s in listed["sessions"]} == {sid, other}
    assert (await server.request("session/get", {"sessionId": sid}))["title"] == "after"
    assert await contents(server, sid) == ["kept", big]
    assert len(fault_lines(log)) == 1


async def test_an_immutable_wal_file_is_read_only_and_every_method_works_once_it_is_not(
    servers: Servers, tmp_path: Path
) -> None:
    """SQLite fails the commit that would write to an immutable ``-wal`` file with an I/O
    error: the store tells it ``read-only`` (its files may not be written), reads go on, and
    once the file may be written again every method works."""
    db = tmp_path / "s.db"
    log = tmp_path / "server.log"
    server = await servers.start(sqlite_env(db), argv=logged(log))
    sid = (await server.request("session/create", {}))["sessionId"]
    await server.request("session/append", append(sid, "kept"))
    with immutable(Path(f"{db}-wal")):
        for _ in range(2):
            assert await store_fault(server.request("session/append", append(sid, "no"))) == (
                "read-only"
            )
            assert await store_fault(server.request("session/create", {})) == "read-only"
        assert [s["sessionId"] for s in (await server.request("session/list", {}))["sessions"]] == [
            sid
        ]
        assert (await server.request("session/get", {"sessionId": sid}))["messageCount"] == 1
    other = (await server.request("session/create", {}))["sessionId"]
    await server.request("session/append", append(sid, "after"))
    listed = await server.request("session/list", {})
    assert {s["sessionId"] for s in listed["sessions"]} == {sid, other}
    assert await contents(server, sid) == ["kept", "after"]
    assert len(fault_lines(log)) == 1


# --- damaged pages ----------------------------------------------------------------------------


async def test_damaged_pages_answer_corrupt_and_the_server_goes_on(
    servers: Servers, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    a = await servers.start(sqlite_env(db))
    sid = (await a.request("session/create", {}))["sessionId"]
    for i in range(50):
        await a.request("session/append", append(sid, f"{i} " + "x" * 500))
    assert await a.close() == 0  # the last connection writes the WAL into the file
    with db.open("r+b") as file:  # every page after the first two
        size = file.seek(0, os.SEEK_END)
        file.seek(2 * 4096)
        file.write(b"\xa5" * (size - 2 * 4096))

    log = tmp_path / "b.log"
    b = await servers.start(sqlite_env(db), argv=logged(log))
    for _ in range(3):
        reason = await store_fault(b.request("session/messages", {"sessionId": sid}))
        assert reason == "corrupt"
    assert len(fault_lines(log)) == 1
    assert await b.close() == 0


# --- a database server that stops -------------------------------------------------------------


@pytest.fixture
def own_postgres_url(own_postgres: OwnServer) -> str:
    return new_database(own_postgres.url)


async def test_a_postgresql_server_that_stops_is_unreachable_until_it_comes_back(
    servers: Servers, own_postgres: OwnServer, own_postgres_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    env = {"TETHER_SESSIONS_STORE": own_postgres_url}
    server = await servers.start(env, argv=logged(log))
    sid = (await server.request("session/create", {}))["sessionId"]
    await server.request("session/append", append(sid, "before"))
    own_postgres.go_down()
    try:
        for method, params in [
            ("session/append", append(sid, "while down")),
            ("session/get", {"sessionId": sid}),
            ("session/messages", {"sessionId": sid}),
            ("kernel/run", {"sessionId": sid, "prompt": "go"}),
        ]:
            assert await store_fault(server.request(method, params)) == "unreachable"
    finally:
        own_postgres.come_back()
    await server.request("session/append", append(sid, "after"))
    assert await contents(server, sid) == ["before", "after"]
    assert len(fault_lines(log)) == 1


async def test_a_store_that_cannot_be_reached_at_start_is_a_store_error_until_it_can(
    servers: Servers, own_postgres: OwnServer, own_postgres_url: str
) -> None:
    own_postgres.go_down()
    try:
        server = await servers.start({"TETHER_SESSIONS_STORE": own_postgres_url})
        assert await store_fault(server.request("session/list", {})) == "unreachable"
    finally:
        own_postgres.come_back()
    assert (await server.request("session/list", {}))["sessions"] == []


# --- JSON too deep to be kept -----------------------------------------------------------------


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
async def test_json_nested_too_deep_is_refused_naming_the_field_and_nothing_is_stored(
    servers: Servers, tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    if store == "postgres":
        env = {"TETHER_SESSIONS_STORE": request.getfixturevalue("postgres_url")}
    else:
        env = {"TETHER_SESSIONS_STORE": store, "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    server = await servers.start(env)
    # the client's own encoder (orjson) refuses such values: send them as the stdlib encodes
    server.send = lambda message: server.send_raw(encode_frame(json.dumps(message).encode()))  # type: ignore[method-assign]
    sid = (await server.request("session/create", {}))["sessionId"]
    too_deep = deep(300)
    message = {"role": "tool", "toolCallId": "c", "content": [too_deep], "output": too_deep}
    for params, field in [
        (
            {"messages": [{"role": "user", "content": "hi", "metadata": too_deep}]},
            "messages.0.metadata",
        ),
        ({"messages": [{"role": "user", "content": [[too_deep]]}]}, "messages.0.content.json"),
        ({"messages": [message]}, "messages.0.output"),
    ]:
        with pytest.raises(RpcError) as caught:
            await server.request("session/append", {"sessionId": sid, **params})
        assert caught.value.code == ErrorCode.INVALID_PARAMS
        assert caught.value.data["limit"] == "maxJsonDepth"
        assert field in [f["field"] for f in caught.value.data["fields"]]
    for params in [{"metadata": too_deep}, {"settings": too_deep}, {"state": too_deep}]:
        with pytest.raises(RpcError) as caught:
            await server.request("session/create", params)
        assert caught.value.data["fields"][0]["field"] == next(iter(params))
        with pytest.raises(RpcError):
            await server.request("session/configure", {"sessionId": sid, **params})
    assert await contents(server, sid) == []
    assert [s["sessionId"] for s in (await server.request("session/list", {}))["sessions"]] == [sid]
    deepest = {
        "sessionId": sid,
        "messages": [{"role": "user", "content": "ok", "metadata": deep(MAX_JSON_DEPTH)}],
    }
    await server.request("session/append", deepest)
    assert (await server.request("session/messages", {"sessionId": sid}))["total"] == 1
