"""Two real servers on one store (a SQLite file, a PostgreSQL database): a run in one of them owns
its session for both, a killed holder's lease is taken over at once on its host and expires
elsewhere, and a sweep never deletes a leased session.

Server A runs a turn whose ``run_command`` blocks reading a FIFO until the test writes to it, so
the run is known to be going on while server B is asked to touch its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RpcError
from tether.protocol import ErrorCode
from tether.testing import tool_call

from .conftest import SERVER, initialized, script_options

WAIT = 60.0  # seconds any one expected answer or event may take on a loaded machine


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    os.mkfifo(root / "gate")
    return root


@pytest.fixture(params=["sqlite", "postgres"])
def store_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The environment that points a server at the shared store."""
    if request.param == "sqlite":
        return {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    return {"TETHER_SESSIONS_STORE": request.getfixturevalue("postgres_url")}


Spawn = Callable[..., Awaitable[Connection]]


@pytest.fixture
async def spawn(project: Path, store_env: dict[str, str]) -> AsyncIterator[Spawn]:
    """Start servers on the shared store; each plays its own script. All killed at the end."""
    started: list[Connection] = []

    async def start(
        name: str, turns: list[dict[str, Any]], argv: list[str] = SERVER, **sections: Any
    ) -> Connection:
        connection = await Connection.spawn(argv, env=store_env)
        started.append(connection)
        tools = {"approval": "auto", **sections.pop("tools", {})}
        options = script_options(project, turns, name=name, tools=tools, **sections)
        await initialized(connection, project, options)
        return connection

    yield start
    release_gate(project)
    for connection in started:
        if connection.process.returncode is None:
            connection.process.kill()
        await connection.process.wait()
        connection._reader.cancel()


async def open_gate(project: Path) -> None:
    """Let the blocked ``cat gate`` finish once it is reading the gate: the run reports its
    command in progress before the command (started through the sandbox) has opened it."""

    def write() -> None:
        with open(project / "gate", "wb") as gate:  # waits for the reader
            gate.write(b"open\n")

    await asyncio.wait_for(asyncio.to_thread(write), WAIT)


def release_gate(project: Path) -> None:
    """Let the blocked ``cat gate`` finish (nothing when no one is reading it)."""
    with contextlib.suppress(OSError):
        fd = os.open(project / "gate", os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"open\n")
        os.close(fd)


BLOCKING_TURNS = [
    {"toolCalls": [tool_call("run_command", "c1", command="cat gate")]},
    {"text": "done"},
]


async def start_blocked_run(a: Connection, sid: str) -> tuple[asyncio.Future[Any], str]:
    """A run in ``a`` whose command is running (blocked on the gate); its future and run id."""
    run = a.start_request("kernel/run", {"sessionId": sid, "prompt": "wait at the gate"})[1]
    run_id = None
    while True:
        method, params = await asyncio.wait_for(a.notifications.get(), WAIT)
        if method != "kernel/progress":
            continue
        event = params["event"]
        run_id = params["runId"]
        if event["kind"] == "tool_call_update" and event["status"] == "in_progress":
            return run, run_id


async def refused(request: Awaitable[Any]) -> dict[str, Any]:
    with pytest.raises(RpcError) as caught:
        await asyncio.wait_for(request, WAIT)
    assert caught.value.code == ErrorCode.SESSION_BUSY
    data: dict[str, Any] = caught.value.data
    return data


def one_result_per_call(history: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each call's results, in order; every call must have exactly one."""
    results: dict[str, list[Any]] = {
        call["id"]: [] for m in history for call in m.get("toolCalls", [])
    }
    for message in history:
        if message["role"] == "tool":
            results[message["toolCallId"]].append(message["content"])
    assert all(len(found) == 1 for found in results.values()), results
    return results


async def test_a_run_in_one_server_owns_its_session_in_the_other(
    spawn: Spawn, project: Path
) -> None:
    a = await spawn("a", BLOCKING_TURNS)
    b = await spawn("b", [{"text": "b ran"}])
    sid = (await a.request("session/create", {}))["sessionId"]
    hello = {"role": "user", "content": "hi"}
    await a.request("session/append", {"sessionId": sid, "messages": [hello]})
    earlier = (await b.request("session/messages", {"sessionId": sid}))["messages"][0]
    run, run_id = await start_blocked_run(a, sid)
    prompt = (await b.request("session/messages", {"sessionId": sid}))["messages"][1]

    elsewhere = {"sessionId": sid, "runId": run_id, "holder": "another-process"}
    message = {"role": "user", "content": "in between"}
    for method, params in [
        ("kernel/run", {"prompt": "me too"}),
        ("session/append", {"messages": [message]}),
        ("session/clear", {}),
        ("session/delete", {}),
        ("session/fork", {}),
        ("session/fork", {"atMessageId": prompt["id"]}),
    ]:
        assert await refused(b.request(method, {"sessionId": sid, **params})) == elsewhere
    append = {"sessionId": sid, "messages": [message]}
    here = {**elsewhere, "holder": "this-process"}
    assert await refused(a.request("session/append", append)) == here
    assert (await b.request("session/get", {"sessionId": sid}))["running"] is True
    [listed] = (await b.request("session/list", {}))["sessions"]
    assert listed["running"] is True
    before = await b.request("session/fork", {"sessionId": sid, "atMessageId": earlier["id"]})
    assert before["messageCount"] == 1  # a fork before the running turn is fine

    await open_gate(project)
    result = await asyncio.wait_for(run, WAIT)
    assert (result["runId"], result["response"]) == (run_id, "done")
    assert (await b.request("session/get", {"sessionId": sid}))["running"] is False
    history = (await b.request("session/messages", {"sessionId": sid}))["messages"]
    assert [m["role"] for m in history] == ["user", "user", "assistant", "tool", "assistant"]
    assert [m["content"] for m in history if m["role"] == "user"] == ["hi", "wait at the gate"]
    assert one_result_per_call(history) == {"c1": [history[3]["content"]]}
    assert "interrupted" not in history[3]["content"]

    again = await asyncio.wait_for(
        b.request("kernel/run", {"sessionId": sid, "prompt": "now"}), WAIT
    )
    assert again["response"] == "b ran"


async def test_a_killed_servers_session_runs_at_once_in_a_server_started_after_it(
    spawn: Spawn,
) -> None:
    """A is killed (SIGKILL) in the middle of a run, its lease good for an hour: a server
    started after it on this host finds A's process gone and runs the session at once, answering
    the call A left without a result "interrupted"."""
    a = await spawn("a", BLOCKING_TURNS, sessions={"lease": "1h"})
    sid = (await a.request("session/create", {}))["sessionId"]
    await start_blocked_run(a, sid)
    a.process.kill()
    await a.process.wait()

    b = await spawn("b", [{"text": "b ran"}])
    result = await asyncio.wait_for(
        b.request("kernel/run", {"sessionId": sid, "prompt": "after the crash"}), WAIT
    )
    assert result["response"] == "b ran"
    history = (await b.request("session/messages", {"sessionId": sid}))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert one_result_per_call(history) == {"c1": ["interrupted"]}
    assert history[2]["runId"] == result["runId"]


def elsewhere(hostname: str) -> list[str]:
    """The server's command, run as if on another host: in a UTS namespace of its own named
    ``hostname`` (for a user other than root, in a user namespace, which needs no privilege;
    root keeps its own, in which it may reach a database server's socket of another user)."""
    rename = 'hostname "$0" && exec "$@"'
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--uts", "sh", "-c", rename, hostname, *SERVER]


async def test_a_killed_servers_lease_on_another_host_holds_until_it_expires(
    spawn: Spawn,
) -> None:
    """A runs "on another host" (its hostname differs): its pid means nothing here, so once it
    is killed its lease holds until it expires (2 s after its last renewal); then B runs."""
    a = await spawn("a", BLOCKING_TURNS, sessions={"lease": "2s"}, argv=elsewhere("far-away"))
    b = await spawn("b", [{"text": "b ran"}])
    sid = (await a.request("session/create", {}))["sessionId"]
    _, run_id = await start_blocked_run(a, sid)
    a.process.kill()
    await a.process.wait()

    refusal = await refused(b.request("kernel/run", {"sessionId": sid, "prompt": "too soon"}))
    assert refusal == {"sessionId": sid, "runId": run_id, "holder": "another-process"}
    result = await asyncio.wait_for(run_when_free(b, sid, "after the crash"), WAIT)
    assert result["response"] == "b ran"
    history = (await b.request("session/messages", {"sessionId": sid}))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert one_result_per_call(history) == {"c1": ["interrupted"]}


async def gone(connection: Connection, sid: str) -> None:
    """Wait until ``sid`` is deleted (by a sweep)."""
    while True:
        try:
            await connection.request("session/get", {"sessionId": sid})
        except RpcError as error:
            assert error.code == ErrorCode.SESSION_NOT_FOUND
            return
        await asyncio.sleep(0.2)


async def test_a_sweep_in_another_server_never_deletes_a_leased_session(spawn: Spawn) -> None:
    """B sweeps with a TTL of one second while A's run sits idle longer than that. The first
    witness is deleted by a sweep pass that also met the leased session; the second one, made
    after that, can only be deleted by a later pass: so the first pass has ended by then."""
    a = await spawn("a", BLOCKING_TURNS)
    sid = (await a.request("session/create", {}))["sessionId"]
    await start_blocked_run(a, sid)
    first = (await a.request("session/create", {"title": "witness"}))["sessionId"]
    b = await spawn("b", [], sessions={"ttl": "1s"})
    await asyncio.wait_for(gone(b, first), WAIT)
    second = (await a.request("session/create", {"title": "witness"}))["sessionId"]
    await asyncio.wait_for(gone(b, second), WAIT)

    session = await b.request("session/get", {"sessionId": sid})
    assert session["running"] is True and session["messageCount"] == 2


async def test_a_suspended_holder_that_lost_its_lease_stops_without_writing_a_second_result(
    spawn: Spawn, project: Path
) -> None:
    """A is stopped (SIGSTOP) past its lease while its command runs; B takes the session over
    and answers the call "interrupted". Woken up, A finds its lease lost: its run ends with
    -32011 ``leaseLost`` and its command's result is never written, so the call keeps one
    result."""
    a = await spawn("a", BLOCKING_TURNS, sessions={"lease": "1s"})
    b = await spawn("b", [{"text": "b ran"}])
    sid = (await a.request("session/create", {}))["sessionId"]
    run, run_id = await start_blocked_run(a, sid)
    a.process.send_signal(signal.SIGSTOP)
    try:
        result = await asyncio.wait_for(run_when_free(b, sid, "taking over"), WAIT)
    finally:
        a.process.send_signal(signal.SIGCONT)
    assert result["response"] == "b ran"
    release_gate(project)  # the run may have killed its command already
    with pytest.raises(RpcError) as lost:
        await asyncio.wait_for(run, WAIT)
    assert lost.value.code == ErrorCode.SESSION_BUSY
    assert lost.value.data == {"sessionId": sid, "runId": run_id, "leaseLost": True}
    history = (await b.request("session/messages", {"sessionId": sid}))["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "user", "assistant"]
    assert one_result_per_call(history) == {"c1": ["interrupted"]}


async def run_when_free(connection: Connection, sid: str, prompt: str) -> Any:
    """``kernel/run``, asked again while another server's lease on the session lasts."""
    while True:
        try:
            return await connection.request("kernel/run", {"sessionId": sid, "prompt": prompt})
        except RpcError as busy:
            assert busy.code == ErrorCode.SESSION_BUSY
            await asyncio.sleep(0.2)


async def test_servers_starting_together_on_an_empty_store_all_open_it(spawn: Spawn):
    """Five servers spawned at once on a database no one has opened: each creates its tables or
    waits for the one that does, and every one of them serves the same sessions."""
    count = 5
    servers = await asyncio.gather(*(spawn(f"s{i}", [{"text": "ok"}]) for i in range(count)))
    created = await asyncio.gather(
        *(
            asyncio.wait_for(s.request("session/create", {"title": f"s{i}"}), WAIT)
            for i, s in enumerate(servers)
        )
    )
    ids = {session["sessionId"] for session in created}
    assert len(ids) == count
    for server in servers:
        page = await asyncio.wait_for(server.request("session/list", {"limit": 50}), WAIT)
        assert {s["sessionId"] for s in page["sessions"]} == ids
