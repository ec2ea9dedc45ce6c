"""Modes, remembered answers, titles and cancels, decided once in the kernel and kept in the
store: seen through the real ``tether serve`` and ``tether acp`` processes, two of them sharing
one SQLite file where a fact must hold across processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from acp import text_block

from tests.acp.conftest import Setup
from tether.client import TetherClient
from tether.protocol.kernel import PermissionParams, StopReason
from tether.testing import scripted_options, tool_call
from tether.tools import BUILTIN_TOOL_NAMES

from .conftest import SERVER

pytestmark = pytest.mark.skipif(
    not {"write_file", "edit_file", "run_command"} <= set(BUILTIN_TOOL_NAMES),
    reason="needs the built-in tools that edit and execute",
)
EDITING = ("write_file", "edit_file", "run_command", "state_set")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text("answer = 42\n")
    return root


@pytest.fixture
def store_env(tmp_path: Path) -> dict[str, str]:
    """The environment of every process of a test: one SQLite file they share."""
    return {
        "TETHER_SESSIONS_STORE": "sqlite",
        "TETHER_SESSIONS_PATH": str(tmp_path / "sessions.db"),
    }


@pytest.fixture
def acp_setup(tmp_path: Path, project: Path, store_env: dict[str, str]) -> Setup:
    home = tmp_path / "home"
    home.mkdir()
    return Setup(home=home, project=project, env=dict(store_env))


def options(tmp_path: Path, turns: list[dict[str, Any]], name: str = "script") -> dict[str, Any]:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(turns))
    return scripted_options(path)


class Answers:
    """An ``on_permission`` callback answering from a list; records what it was asked."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.asked: list[PermissionParams] = []

    def __call__(self, params: PermissionParams) -> Any:
        self.asked.append(params)
        return self.outcomes.pop(0)


def serve(
    project: Path, opts: dict[str, Any], env: dict[str, str], answers: Answers | None = None
) -> Any:
    return TetherClient.spawn(project, opts, argv=SERVER, env=env, on_permission=answers)


async def test_a_mode_set_through_acp_holds_in_a_serve_process_which_offers_no_edit_tools(
    acp_setup: Setup, project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    acp_setup.script([])
    async with acp_setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.set_session_mode(session_id=session.session_id, mode_id="read_only")
    turns = [
        {"toolCalls": [tool_call("write_file", "w1", path="x.txt", content="x")]},
        {"text": "I may only read."},
    ]
    async with serve(project, options(tmp_path, turns), store_env) as client:
        seen = await client.get_session(session.session_id)
        result = await client.run(session.session_id, "write x")
    assert seen.mode == "read_only"
    [refused] = result.tool_calls
    assert refused.is_error and "not available" in refused.result
    offered = refused.result.split("available: ")[1]
    assert "read_file" in offered
    assert not [name for name in EDITING if name in offered]
    assert not (project / "x.txt").exists()


async def test_a_mode_set_through_serve_is_the_mode_acp_loads_in_another_process(
    acp_setup: Setup, project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    acp_setup.script([])
    async with serve(project, options(tmp_path, []), store_env) as client:
        session = await client.create_session()
        configured = await client.configure(session.session_id, mode="accept_edits")
    async with acp_setup.agent() as agent:
        loaded = await agent.conn.load_session(
            cwd=str(project), session_id=session.session_id, mcp_servers=[]
        )
    assert configured.mode == "accept_edits"
    assert loaded.modes is not None and loaded.modes.current_mode_id == "accept_edits"
    options_ = [getattr(o, "root", o) for o in loaded.config_options or []]
    assert [o.current_value for o in options_ if o.id == "mode"] == ["accept_edits"]


async def test_accept_edits_runs_edit_file_without_asking_but_asks_for_run_command(
    project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    answers = Answers("allow")
    edit = tool_call("edit_file", "e1", path="app.py", oldString="42", newString="43")
    turns = [
        {"toolCalls": [edit, tool_call("run_command", "r1", command="true")]},
        {"text": "done"},
    ]
    async with serve(project, options(tmp_path, turns), store_env, answers) as client:
        session = await client.create_session(mode="accept_edits")
        result = await client.run(session.session_id, "edit and run")
    assert [a.tool_call.name for a in answers.asked] == ["run_command"]
    assert [r.is_error for r in result.tool_calls] == [False, False]
    assert (project / "app.py").read_text() == "answer = 43\n"


async def test_a_bad_mode_is_refused_naming_it(
    project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    async with serve(project, options(tmp_path, []), store_env) as client:
        session = await client.create_session()
        with pytest.raises(Exception) as refused:
            await client.configure(session.session_id, mode="yolo")
    error: Any = refused.value
    assert error.code == -32602
    assert error.data["fields"][0]["field"] == "mode" and "'yolo'" in error.message


async def test_reject_always_answered_in_serve_is_honoured_by_acp_in_another_process(
    acp_setup: Setup, project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    run = {"toolCalls": [tool_call("run_command", "r1", command="touch ran")]}
    answers = Answers("reject_always")
    async with serve(project, options(tmp_path, [run, {"text": "no"}]), store_env, answers) as c:
        session = await c.create_session()
        await c.run(session.session_id, "run it")
    again = {"toolCalls": [tool_call("run_command", "r2", command="touch ran")]}
    acp_setup.script([again, {"text": "refused again"}])
    async with acp_setup.agent() as agent:
        agent.client.answers = ["allow_once"]  # never used: the remembered answer holds
        await agent.conn.load_session(
            cwd=str(project), session_id=session.session_id, mcp_servers=[]
        )
        answer = await agent.conn.prompt(
            session_id=session.session_id, prompt=[text_block("run it again")]
        )
        asked = agent.wire.received("session/request_permission")
        updates = agent.wire.updates(session.session_id)
    assert [a.tool_call.name for a in answers.asked] == ["run_command"]
    assert answer.stop_reason == "end_turn" and asked == []
    last = [u for u in updates if u.get("toolCallId") == "r2"][-1]
    assert last["status"] == "failed"
    assert not (project / "ran").exists()


async def test_serve_titles_an_untitled_session_after_its_first_prompt(
    project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    turns = [{"text": "one"}, {"text": "two"}]
    async with serve(project, options(tmp_path, turns), store_env) as client:
        session = await client.create_session()
        await client.run(session.session_id, "Explain the parser\nin detail")
        await client.run(session.session_id, "And the lexer?")
        titled = await client.get_session(session.session_id)
    assert session.title is None
    assert titled.title == "Explain the parser"


async def test_a_cancel_sent_with_the_run_stops_it_before_it_records_anything(
    project: Path, tmp_path: Path, store_env: dict[str, str]
) -> None:
    turns = [{"text": "never said"}, {"text": "the next run"}]
    async with serve(project, options(tmp_path, turns), store_env) as client:
        session = await client.create_session()
        sid = session.session_id
        connection = client.connection
        _, running = connection.start_request("kernel/run", {"sessionId": sid, "prompt": "go"})
        cancelled = await connection.request("kernel/cancel", {"sessionId": sid})
        result = await asyncio.wait_for(running, 20)
        history = await client.messages(sid)
        nxt = await client.run(sid, "again")
    assert cancelled == {"cancelled": True}
    assert (result["stopReason"], result["iterations"]) == (StopReason.CANCELLED, 0)
    assert history.messages == []
    assert nxt.stop_reason == StopReason.END_TURN
