"""tether's own methods never wait for pygls: a server whose pygls import never finishes
(``pygls_blocked.py``) still answers the handshake, sessions, runs, cancellations and its own
requests to the client; only the standard LSP methods wait for it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.client import Connection, RequestCancelledError, TetherClient
from tether.protocol.kernel import PermissionParams
from tether.testing import scripted_options, tool_call
from tether.tools import BUILTIN_TOOL_NAMES

BLOCKED = [sys.executable, "-P", str(Path(__file__).with_name("pygls_blocked.py"))]


def options(tmp_path: Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(turns))
    return scripted_options(path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


async def test_sessions_and_a_run_are_answered_while_pygls_cannot_be_imported(
    project: Path, tmp_path: Path
):
    turns = [{"text": "Hello."}]
    async with asyncio.timeout(30):
        async with TetherClient.spawn(
            workspace=project, options=options(tmp_path, turns), argv=BLOCKED
        ) as client:
            client.connection.notify("initialized", {})
            session = await client.create_session()
            result = await client.run(session.session_id, "hi")
            listed = await client.connection.request("session/list", {})
    assert result.response == "Hello."
    assert [s["sessionId"] for s in listed["sessions"]] == [session.session_id]


@pytest.mark.skipif("write_file" not in BUILTIN_TOOL_NAMES, reason="needs write_file")
async def test_a_permission_request_is_answered_while_pygls_cannot_be_imported(
    project: Path, tmp_path: Path
):
    asked: list[PermissionParams] = []

    def allow(params: PermissionParams) -> str:
        asked.append(params)
        return "allow"

    write = tool_call("write_file", "c1", path="a.txt", content="written\n")
    turns = [{"toolCalls": [write]}, {"text": "done"}]
    async with asyncio.timeout(30):
        async with TetherClient.spawn(
            workspace=project, options=options(tmp_path, turns), argv=BLOCKED, on_permission=allow
        ) as client:
            session = await client.create_session()
            result = await client.run(session.session_id, "write it")
    assert [a.tool_call.id for a in asked] == ["c1"]
    assert not result.tool_calls[0].is_error
    assert (project / "a.txt").read_text() == "written\n"


async def test_a_cancelled_run_is_answered_request_cancelled_while_pygls_cannot_be_imported(
    project: Path, tmp_path: Path
):
    turns = [{"text": "slowly now", "delay": 30}]
    connection = await Connection.spawn(BLOCKED)
    try:
        async with asyncio.timeout(30):
            await connection.request(
                "initialize",
                {
                    "rootUri": project.as_uri(),
                    "initializationOptions": options(tmp_path, turns),
                },
            )
            session = await connection.request("session/create", {})
            msg_id, answer = connection.start_request(
                "kernel/run", {"sessionId": session["sessionId"], "prompt": "go"}
            )
            await _progress(connection, "message_delta")  # the run waits on the model
            connection.notify("$/cancelRequest", {"id": msg_id})
            with pytest.raises(RequestCancelledError):
                await answer
            after = await connection.request("session/get", {"sessionId": session["sessionId"]})
            assert after["running"] is False
    finally:
        connection.process.kill()
        await connection.process.wait()


async def test_a_standard_request_waits_for_pygls_without_holding_tethers_own(
    project: Path, tmp_path: Path
):
    connection = await Connection.spawn(BLOCKED)
    try:
        async with asyncio.timeout(30):
            await connection.request("initialize", {"rootUri": project.as_uri()})
            _, hover = connection.start_request(
                "textDocument/hover",
                {"textDocument": {"uri": (project / "a.py").as_uri()}, "position": {}},
            )
            created = await connection.request("session/create", {})
            got = await connection.request("session/get", {"sessionId": created["sessionId"]})
            assert got["sessionId"] == created["sessionId"]
            assert not hover.done()  # pygls never loads in this process
    finally:
        connection.process.kill()
        await connection.process.wait()


async def _progress(connection: Connection, kind: str) -> None:
    while True:
        method, params = await connection.notifications.get()
        if method == "kernel/progress" and params["event"]["kind"] == kind:
            return
