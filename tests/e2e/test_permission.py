"""Approval of tool calls through the real server: ``tool/requestPermission`` answered by the
Python client, remembered, rejected, withdrawn when the run is cancelled, and refused when the
client cannot be asked."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from tether.client import RequestCancelledError, TetherClient
from tether.protocol.kernel import (
    PermissionParams,
    ProgressParams,
    StopReason,
    ToolCallStarted,
    ToolCallUpdate,
)
from tether.protocol.tools import ProposedChange
from tether.testing import scripted_options, tool_call
from tether.tools import BUILTIN_TOOL_NAMES

pytestmark = pytest.mark.skipif(
    "write_file" not in BUILTIN_TOOL_NAMES, reason="needs the write_file built-in tool"
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def options(tmp_path: Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(turns))
    return scripted_options(path)


def write(call_id: str, path: str) -> dict[str, Any]:
    return tool_call("write_file", call_id, path=path, content="written\n")


class Answers:
    """An ``on_permission`` callback answering from a list; records what it was asked."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.asked: list[PermissionParams] = []

    def __call__(self, params: PermissionParams) -> Any:
        self.asked.append(params)
        return self.outcomes.pop(0)


async def test_an_allowed_write_runs_and_its_events_carry_the_kind(project: Path, tmp_path: Path):
    answers = Answers("allow")
    turns = [{"toolCalls": [write("c1", "a.txt")]}, {"text": "done"}]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=answers
    ) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "write it")
        events = [progress.event async for progress in run]
        result = await run

    [asked] = answers.asked
    assert (asked.session_id, asked.run_id) == (sid, result.run_id)
    assert (asked.tool_call.id, asked.tool_call.name) == ("c1", "write_file")
    assert json.loads(asked.tool_call.arguments)["path"] == "a.txt"
    assert (project / "a.txt").read_text() == "written\n"
    [started] = [e for e in events if isinstance(e, ToolCallStarted)]
    assert started.tool_kind == "edit"
    updates = [e for e in events if isinstance(e, ToolCallUpdate)]
    assert updates[0].status == "in_progress" and updates[-1].status == "completed"
    assert updates[-1].diff is not None and "+written" in updates[-1].diff  # for editors
    assert not result.tool_calls[0].is_error


async def test_an_edit_is_asked_with_the_change_it_proposes_and_its_tool_call_carries_it(
    project: Path, tmp_path: Path
):
    (project / "app.py").write_text("def main():\n    return 42\n")
    answers = Answers("allow", "reject", "reject")
    edit = tool_call("edit_file", "c1", path="app.py", oldString="42", newString="43")
    missing = tool_call("edit_file", "c2", path="app.py", oldString="nowhere", newString="x")
    turns = [
        {"toolCalls": [edit]},
        {"toolCalls": [write("c3", "new.txt"), missing]},
        {"text": "ok"},
    ]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=answers
    ) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "edit it")
        events = [progress.event async for progress in run]
        await run

    asked = {params.tool_call.id: params.diff for params in answers.asked}
    edited = ProposedChange(
        path="app.py",
        old_text="def main():\n    return 42\n",
        new_text="def main():\n    return 43\n",
    )
    assert asked == {
        "c1": edited,
        "c2": None,  # oldString is not in the file: the edit will fail, it proposes nothing
        "c3": ProposedChange(path="new.txt", old_text=None, new_text="written\n"),
    }
    started = {e.tool_call_id: e.diff for e in events if isinstance(e, ToolCallStarted)}
    assert started == asked
    assert (project / "app.py").read_text() == edited.new_text


async def test_allow_always_is_not_asked_again_in_the_session(project: Path, tmp_path: Path):
    answers = Answers("allow_always")
    turns = [
        {"toolCalls": [write("c1", "a.txt")]},
        {"toolCalls": [write("c2", "b.txt")]},
        {"text": "done"},
    ]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=answers
    ) as client:
        sid = (await client.create_session()).session_id
        result = await client.run(sid, "write both")

    assert [a.tool_call.id for a in answers.asked] == ["c1"]
    assert [r.is_error for r in result.tool_calls] == [False, False]
    assert (project / "a.txt").exists() and (project / "b.txt").exists()


async def test_a_rejected_write_is_not_done_and_the_model_reads_rejected_by_user(
    project: Path, tmp_path: Path
):
    answers = Answers("reject")
    turns = [{"toolCalls": [write("c1", "a.txt")]}, {"text": "fine, I will not"}]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=answers
    ) as client:
        sid = (await client.create_session()).session_id
        result = await client.run(sid, "write it")
        history = (await client.messages(sid)).messages

    assert not (project / "a.txt").exists()
    [tool_message] = [m for m in history if m.tool_call_id == "c1"]
    assert (tool_message.content, tool_message.is_error) == ("rejected by user", True)
    assert result.stop_reason is StopReason.END_TURN
    assert result.response == "fine, I will not"  # the model was asked again after the refusal


async def test_a_client_without_the_capability_gets_a_refusal_not_a_wait(
    project: Path, tmp_path: Path
):
    turns = [{"toolCalls": [write("c1", "a.txt")]}, {"text": "done"}]
    async with TetherClient.spawn(workspace=project, options=options(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        result = await asyncio.wait_for(client.run(sid, "write it"), 20)

    [record] = result.tool_calls
    assert record.is_error
    assert "capabilities.tether.permissions" in record.result
    assert "tools.approval" in record.result
    assert not (project / "a.txt").exists()


@pytest.mark.parametrize("how", ["kernel/cancel", "$/cancelRequest"])
async def test_cancelling_a_run_while_permission_is_pending_withdraws_the_request(
    project: Path, tmp_path: Path, how: str
):
    asked, handler_cancelled = asyncio.Event(), asyncio.Event()

    async def never(params: PermissionParams) -> Any:
        asked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # the client stops answering a withdrawn request
            handler_cancelled.set()
            raise

    turns = [{"toolCalls": [write("c1", "a.txt")]}]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=never
    ) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "write it")
        await asyncio.wait_for(asked.wait(), 20)
        if how == "kernel/cancel":
            assert await client.cancel(sid)
            result = await asyncio.wait_for(run.result(), 20)
        else:
            run.cancel()
            with pytest.raises(RequestCancelledError) as raised:
                await asyncio.wait_for(run.result(), 20)
            partial = raised.value.partial
            assert partial is not None
            result = partial
        withdrawn = await next_notification(client, "$/cancelRequest")
        await asyncio.wait_for(handler_cancelled.wait(), 20)
        history = (await client.messages(sid)).messages
        events: list[ProgressParams] = []
        with contextlib.suppress(RequestCancelledError):
            async for progress in run:
                events.append(progress)

    assert isinstance(withdrawn["id"], str)
    assert result.stop_reason is StopReason.CANCELLED
    [record] = result.tool_calls
    assert (record.result, record.is_error) == ("cancelled", True)
    [tool_message] = [m for m in history if m.tool_call_id == "c1"]
    assert tool_message.content == "cancelled"
    assert [e.event.status for e in events if isinstance(e.event, ToolCallUpdate)] == ["cancelled"]
    assert not (project / "a.txt").exists()


async def next_notification(client: TetherClient, method: str) -> Any:
    async with asyncio.timeout(20):
        while True:
            got, params = await client.connection.notifications.get()
            if got == method:
                return params


async def test_a_sub_agent_s_write_is_asked_of_the_same_client_naming_its_session(
    project: Path, tmp_path: Path
):
    answers = Answers("allow")
    turns = [
        {"toolCalls": [tool_call("task", "t1", prompt="write a.txt")]},
        {"toolCalls": [write("c1", "a.txt")]},
        {"text": "wrote it"},
        {"text": "done"},
    ]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=answers
    ) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "delegate")
        events = [progress async for progress in run]
        result = await run
    [asked] = answers.asked
    child_id = result.tool_calls[0].output["sessionId"]  # type: ignore[index]
    assert (asked.session_id, asked.tool_call.id) == (child_id, "c1")
    assert (project / "a.txt").read_text() == "written\n"
    assert result.tool_calls[0].result == "wrote it"
    assert {progress.session_id for progress in events} == {sid}  # the run's own events


async def test_a_sub_agent_keeps_its_parent_s_always_answers(project: Path, tmp_path: Path):
    answers = Answers()
    turns = [
        {"toolCalls": [tool_call("task", "t1", prompt="write a.txt")]},
        {"toolCalls": [write("c1", "a.txt")]},
        {"text": "wrote it"},
        {"text": "done"},
    ]
    async with TetherClient.spawn(
        workspace=project, options=options(tmp_path, turns), on_permission=answers
    ) as client:
        session = await client.create_session(permissions={"allowAlways": ["write_file"]})
        result = await client.run(session.session_id, "delegate")
    assert answers.asked == []
    assert (project / "a.txt").read_text() == "written\n"
    assert result.tool_calls[0].result == "wrote it"
