"""Approval of tool calls in process: the policy table, remembered answers, cancellation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tether.config import TetherConfig
from tether.kernel.approval import REJECTED_RESULT, ApprovalError, Approver
from tether.kernel.kernel import Kernel
from tether.memory import Memory
from tether.protocol import ConfigureSessionParams, CreateSessionParams, Role
from tether.protocol.kernel import (
    PermissionParams,
    PermissionResult,
    ProgressParams,
    RunParams,
    RunResult,
    StopReason,
    ToolCallStarted,
    ToolCallUpdate,
)
from tether.protocol.tools import ToolKind, ToolSpec
from tether.providers.scripted import ScriptedProvider
from tether.sessions import MemoryStore
from tether.tools.base import Tool, ToolContext, ToolResult
from tether.tools.protected import REASONS
from tether.tools.registry import ToolRegistry

from .support import KernelHarness, tool_call

DIFF = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-old\n+new\n"


class Recorder(Tool):
    """A tool of a given kind that records its calls, reports progress and returns a diff."""

    def __init__(self, name: str, kind: ToolKind) -> None:
        self.spec = ToolSpec(name=name, description=name, parameters={"type": "object"}, kind=kind)
        self.calls: list[ToolContext] = []

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(context)
        context.progress("halfway")
        return ToolResult(f"{self.spec.name} done", diff=DIFF)


class Client:
    """An approver that answers from a list, or waits until cancelled when told to hang."""

    def __init__(self, *outcomes: str, hang: bool = False, fail: str | None = None) -> None:
        self.outcomes = list(outcomes)
        self.asked: list[PermissionParams] = []
        self.hang = hang
        self.fail = fail
        self.waiting = asyncio.Event()
        self.withdrawn = asyncio.Event()

    async def __call__(self, params: PermissionParams) -> PermissionResult:
        self.asked.append(params)
        if self.fail is not None:
            raise ApprovalError(self.fail)
        if self.hang:
            self.waiting.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.withdrawn.set()
                raise
        return PermissionResult.model_validate({"outcome": self.outcomes.pop(0)})


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": '{"path": "notes.txt"}'}


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        turns: list[dict[str, Any]],
        *,
        approval: str = "ask",
        approver: Approver | None = None,
    ) -> None:
        self.store = MemoryStore()
        self.provider = ScriptedProvider(turns)
        self.edit = Recorder("patch", ToolKind.EDIT)
        self.shell = Recorder("shell", ToolKind.EXECUTE)
        self.read = Recorder("peek", ToolKind.READ)
        registry = ToolRegistry([self.edit, self.shell, self.read])
        self.events: list[ProgressParams] = []
        self.workspace = tmp_path
        config = TetherConfig.model_validate(
            {"provider": {"type": "scripted", "model": "m"}, "tools": {"approval": approval}}
        )
        self.kernel = Kernel(
            self.store,
            config=lambda workspace: config,
            providers=lambda config: self.provider,
            tools=self._tools,
            memory=lambda root, paths: Memory(),
            approver=approver,
        )

        self._registry = registry

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolRegistry:
        return self._registry

    async def session(self) -> str:
        return (await self.store.create(CreateSessionParams(), self.workspace.as_uri())).session_id

    async def run(self, session_id: str) -> RunResult:
        params = RunParams(session_id=session_id, prompt="go")
        return await self.kernel.run(params, self.events.append)

    def updates(self, call_id: str) -> list[ToolCallUpdate]:
        return [
            e.event
            for e in self.events
            if isinstance(e.event, ToolCallUpdate) and e.event.tool_call_id == call_id
        ]


def one_call(name: str, call_id: str = "c1") -> list[dict[str, Any]]:
    return [{"toolCalls": [call(call_id, name)]}, {"text": "done"}]


async def test_ask_sends_the_call_to_the_client_and_runs_it_when_allowed(tmp_path: Path):
    client = Client("allow")
    harness = Harness(tmp_path, one_call("patch"), approver=client)
    sid = await harness.session()
    result = await harness.run(sid)
    [asked] = client.asked
    assert (asked.session_id, asked.run_id) == (sid, result.run_id)
    assert asked.tool_call.model_dump() == {
        "id": "c1",
        "name": "patch",
        "arguments": '{"path": "notes.txt"}',
        "title": "patch",
    }
    assert [r.result for r in result.tool_calls] == ["patch done"]
    assert [c.tool_call_id for c in harness.edit.calls] == ["c1"]


async def test_allow_always_is_remembered_for_the_session_only(tmp_path: Path):
    client = Client("allow_always", "allow")
    turns = [
        {"toolCalls": [call("c1", "patch")]},
        {"toolCalls": [call("c2", "patch")]},
        {"text": "done"},
        {"toolCalls": [call("c3", "patch")]},
        {"text": "done"},
        {"toolCalls": [call("c4", "patch")]},
        {"text": "done"},
    ]
    harness = Harness(tmp_path, turns, approver=client)
    sid = await harness.session()
    await harness.run(sid)
    await harness.run(sid)  # a later run of the same session is not asked either
    assert [a.tool_call.id for a in client.asked] == ["c1"]
    other = await harness.session()
    await harness.run(other)
    assert [a.tool_call.id for a in client.asked] == ["c1", "c4"]
    assert len(harness.edit.calls) == 4


async def test_answers_forgotten_with_session_configure_are_asked_again(tmp_path: Path):
    client = Client("allow_always", "allow")
    turns = [{"toolCalls": [call("c1", "patch")]}, {"text": "done"}]
    turns += [{"toolCalls": [call("c2", "patch")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, approver=client)
    sid = await harness.session()
    await harness.run(sid)
    assert (await harness.store.get(sid)).permissions.allow_always == ["patch"]
    forget = ConfigureSessionParams.model_validate({"sessionId": sid, "permissions": None})
    await harness.store.configure(sid, forget)
    await harness.run(sid)
    assert [a.tool_call.id for a in client.asked] == ["c1", "c2"]


async def test_reject_always_refuses_later_calls_of_that_tool_in_every_run_without_asking(
    tmp_path: Path,
):
    client = Client("reject_always", "allow")
    turns = [{"toolCalls": [call("c1", "shell"), call("c2", "shell")]}, {"text": "done"}]
    turns += [{"toolCalls": [call("c3", "shell"), call("c4", "patch")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, approver=client)
    sid = await harness.session()
    first = await harness.run(sid)
    second = await harness.run(sid)
    assert [a.tool_call.id for a in client.asked] == ["c1", "c4"]
    assert harness.shell.calls == []
    results = [(r.id, r.is_error) for r in first.tool_calls + second.tool_calls]
    assert results == [("c1", True), ("c2", True), ("c3", True), ("c4", False)]
    assert (await harness.store.get(sid)).permissions.reject_always == ["shell"]


async def test_allow_always_spares_the_questions_about_the_same_tool_in_the_same_turn(
    tmp_path: Path,
):
    client = Client("allow_always")
    turns = [{"toolCalls": [call("c1", "patch"), call("c2", "patch")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, approver=client)
    result = await harness.run(await harness.session())
    assert len(client.asked) == 1
    assert [r.is_error for r in result.tool_calls] == [False, False]


async def test_a_rejected_call_is_an_error_result_the_model_reads(tmp_path: Path):
    client = Client("reject")
    harness = Harness(tmp_path, one_call("shell"), approver=client)
    sid = await harness.session()
    result = await harness.run(sid)
    assert harness.shell.calls == []
    [record] = result.tool_calls
    assert (record.result, record.is_error) == ("rejected by user", True)
    tool_message = harness.provider.requests[-1].messages[-1]
    assert (tool_message.role, tool_message.content) == (Role.TOOL, "rejected by user")
    assert [(u.status, u.error) for u in harness.updates("c1")] == [("failed", "rejected by user")]
    assert result.stop_reason is StopReason.END_TURN


async def test_ask_without_a_client_that_can_answer_refuses_and_says_how_to_change_it(
    tmp_path: Path,
):
    harness = Harness(tmp_path, one_call("patch"))
    result = await harness.run(await harness.session())
    [record] = result.tool_calls
    assert record.is_error
    assert "needs approval" in record.result
    assert "capabilities.tether.permissions" in record.result
    assert 'tools.approval to "auto"' in record.result
    assert harness.edit.calls == []


async def test_auto_runs_edit_and_execute_tools_without_asking(tmp_path: Path):
    client = Client()
    turns = [{"toolCalls": [call("c1", "patch"), call("c2", "shell")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, approval="auto", approver=client)
    result = await harness.run(await harness.session())
    assert client.asked == []
    assert [r.result for r in result.tool_calls] == ["patch done", "shell done"]


async def test_deny_refuses_naming_the_policy(tmp_path: Path):
    client = Client()
    harness = Harness(tmp_path, one_call("shell"), approval="deny", approver=client)
    result = await harness.run(await harness.session())
    [record] = result.tool_calls
    assert record.is_error
    assert 'tools.approval is "deny"' in record.result
    assert client.asked == []
    assert harness.shell.calls == []


@pytest.mark.parametrize("approval", ["ask", "deny"])
async def test_read_tools_are_never_asked_about(tmp_path: Path, approval: str):
    client = Client()
    harness = Harness(tmp_path, one_call("peek"), approval=approval, approver=client)
    result = await harness.run(await harness.session())
    assert client.asked == []
    assert [r.result for r in result.tool_calls] == ["peek done"]


@pytest.mark.parametrize("name", ["nonexistent", "patch"])
async def test_unknown_and_disallowed_tools_are_not_asked_about(tmp_path: Path, name: str):
    client = Client()
    harness = Harness(tmp_path, one_call(name), approver=client)
    sid = await harness.session()
    params = RunParams(session_id=sid, prompt="go", tools=["peek"])
    result = await harness.kernel.run(params, harness.events.append)
    assert client.asked == []
    [record] = result.tool_calls
    assert record.is_error and "not available" in record.result


async def test_an_approver_that_fails_counts_as_a_rejection_with_its_reason(tmp_path: Path):
    client = Client(fail="the client answered with an error: nope")
    harness = Harness(tmp_path, one_call("patch"), approver=client)
    result = await harness.run(await harness.session())
    [record] = result.tool_calls
    assert record.is_error
    assert "the client answered with an error: nope" in record.result
    assert harness.edit.calls == []


async def test_a_question_that_ends_cancelled_by_itself_leaves_the_call_cancelled_not_unanswered(
    tmp_path: Path,
):
    class Quits(Client):
        async def __call__(self, params: PermissionParams) -> PermissionResult:
            self.asked.append(params)
            raise asyncio.CancelledError  # its await was cancelled, not the run

    harness = Harness(tmp_path, one_call("patch"), approver=Quits())
    sid = await harness.session()
    result = await asyncio.wait_for(harness.run(sid), 5)
    assert result.stop_reason is StopReason.END_TURN
    [record] = result.tool_calls
    assert (record.result, record.is_error) == ("cancelled", True)
    assert [u.status for u in harness.updates("c1")] == ["cancelled"]
    history = await harness.store.history(sid)
    assert [(m.tool_call_id, m.content) for m in history if m.role is Role.TOOL] == [
        ("c1", "cancelled")
    ]
    assert harness.edit.calls == []


async def test_cancelling_the_run_while_the_client_is_asked_withdraws_the_question(
    tmp_path: Path,
):
    client = Client(hang=True)
    harness = Harness(tmp_path, [{"toolCalls": [call("c1", "patch")]}], approver=client)
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await asyncio.wait_for(client.waiting.wait(), 5)
    assert harness.kernel.cancel(sid)
    result = await asyncio.wait_for(run, 5)
    assert client.withdrawn.is_set()
    assert result.stop_reason is StopReason.CANCELLED
    [record] = result.tool_calls
    assert (record.result, record.is_error) == ("cancelled", True)
    assert [u.status for u in harness.updates("c1")] == ["cancelled"]
    assert harness.edit.calls == []


async def test_events_carry_the_tool_kind_progress_and_the_diff(tmp_path: Path):
    harness = Harness(tmp_path, one_call("patch"), approval="auto")
    await harness.run(await harness.session())
    [started] = [e.event for e in harness.events if isinstance(e.event, ToolCallStarted)]
    assert started.tool_kind is ToolKind.EDIT
    assert started.to_wire()["toolKind"] == "edit"
    updates = [(u.status, u.progress, u.diff) for u in harness.updates("c1")]
    assert updates == [
        ("in_progress", None, None),
        ("in_progress", "halfway", None),
        ("completed", None, DIFF),
    ]
    [context] = harness.edit.calls
    assert context.tool_call_id == "c1"


async def test_a_call_to_a_tool_not_on_offer_is_of_kind_other(tmp_path: Path):
    harness = Harness(tmp_path, one_call("nonexistent"))
    await harness.run(await harness.session())
    [started] = [e.event for e in harness.events if isinstance(e.event, ToolCallStarted)]
    assert started.tool_kind is ToolKind.OTHER


# --- protected paths ----------------------------------------------------------------------------


def write(call_id: str, path: str, content: str = "x = 1\n") -> dict[str, Any]:
    return tool_call(call_id, "write_file", path=path, content=content)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".tether").mkdir(parents=True)
    (root / ".tether" / "config.toml").write_text("[kernel]\nmax_iterations = 5\n")
    (root / ".git").mkdir()
    return root


async def test_a_write_to_dot_tether_is_asked_about_with_its_reason_even_under_auto(repo: Path):
    client = Client("allow")
    turns = [{"toolCalls": [write("c1", ".tether/memory/notes.md")]}, {"text": "done"}]
    harness = KernelHarness(repo, turns, config={"tools": {"approval": "auto"}}, approver=client)
    result = await harness.run(await harness.session())
    [asked] = client.asked
    assert asked.reason == REASONS[".tether"]
    assert asked.to_wire()["reason"] == REASONS[".tether"]
    assert not result.tool_calls[0].is_error
    assert (repo / ".tether" / "memory" / "notes.md").read_text() == "x = 1\n"


async def test_a_rejected_write_to_dot_git_is_not_done(repo: Path):
    client = Client("reject")
    turns = [{"toolCalls": [write("c1", ".git/hooks/pre-commit")]}, {"text": "done"}]
    harness = KernelHarness(repo, turns, config={"tools": {"approval": "auto"}}, approver=client)
    result = await harness.run(await harness.session())
    assert [a.reason for a in client.asked] == [REASONS[".git"]]
    assert (result.tool_calls[0].result, result.tool_calls[0].is_error) == (REJECTED_RESULT, True)
    assert not (repo / ".git" / "hooks").exists()


@pytest.mark.parametrize("approval", ["auto", "ask"])
async def test_a_protected_write_with_nobody_to_ask_is_refused_saying_why(
    repo: Path, approval: str
):
    edit = tool_call("c1", "edit_file", path=".tether/config.toml", oldString="5", newString="500")
    harness = KernelHarness(
        repo, [{"toolCalls": [edit]}, {"text": "ok"}], config={"tools": {"approval": approval}}
    )
    result = await harness.run(await harness.session())
    [record] = result.tool_calls
    assert record.is_error
    assert REASONS[".tether"] in record.result
    assert "explicit approval" in record.result
    assert (repo / ".tether" / "config.toml").read_text() == "[kernel]\nmax_iterations = 5\n"


async def test_a_protected_write_is_refused_under_deny_without_a_question(repo: Path):
    client = Client()
    turns = [{"toolCalls": [write("c1", ".tether/config.toml")]}, {"text": "ok"}]
    harness = KernelHarness(repo, turns, config={"tools": {"approval": "deny"}}, approver=client)
    result = await harness.run(await harness.session())
    assert client.asked == [] and result.tool_calls[0].is_error
    assert 'tools.approval is "deny"' in result.tool_calls[0].result


async def test_allow_always_does_not_answer_protected_writes_and_they_do_not_grant_it(repo: Path):
    client = Client("allow_always", "allow_always", "allow")
    turns = [
        {"toolCalls": [write("c1", "src/a.py")]},  # allow_always: write_file is not asked again
        {"toolCalls": [write("c2", "src/b.py"), write("c3", ".tether/memory/a.md")]},
        {"toolCalls": [write("c4", ".tether/memory/b.md")]},  # asked again despite c3's answer
        {"text": "done"},
    ]
    harness = KernelHarness(repo, turns, approver=client)
    result = await harness.run(await harness.session())
    assert [(a.tool_call.id, a.reason) for a in client.asked] == [
        ("c1", None),
        ("c3", REASONS[".tether"]),
        ("c4", REASONS[".tether"]),
    ]
    assert [r.is_error for r in result.tool_calls] == [False, False, False, False]


async def test_an_ordinary_write_under_auto_is_not_asked_about(repo: Path):
    client = Client()
    turns = [{"toolCalls": [write("c1", "src/.gitignore")]}, {"text": "ok"}]
    harness = KernelHarness(repo, turns, config={"tools": {"approval": "auto"}}, approver=client)
    result = await harness.run(await harness.session())
    assert client.asked == [] and not result.tool_calls[0].is_error


# --- modes ------------------------------------------------------------------------------------


async def set_mode(harness: Harness, session_id: str, mode: str) -> None:
    params = ConfigureSessionParams(session_id=session_id, mode=mode)
    await harness.store.configure(session_id, params)


async def test_read_only_offers_the_tools_that_read_and_search_by_kind(tmp_path: Path):
    harness = Harness(tmp_path, [{"text": "done"}], approval="auto")
    sid = await harness.session()
    await set_mode(harness, sid, "read_only")
    await harness.run(sid)
    [request] = harness.provider.requests
    assert [spec.name for spec in request.tools] == ["peek"]


class ModeSwitch(Recorder):
    """A reading tool that, when called, sets the session's mode (as another process would)."""

    def __init__(self, store: MemoryStore, mode: str) -> None:
        super().__init__("switch", ToolKind.READ)
        self.store, self.mode = store, mode

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        params = ConfigureSessionParams(session_id=context.session_id, mode=self.mode)
        await self.store.configure(context.session_id, params)
        return ToolResult("switched")


async def test_a_switch_to_read_only_during_a_run_refuses_its_next_edit(tmp_path: Path):
    turns = [{"toolCalls": [call("c0", "switch")]}, {"toolCalls": [call("c1", "patch")]}]
    harness = Harness(tmp_path, [*turns, {"text": "done"}], approval="auto")
    harness._registry = ToolRegistry([harness.edit, ModeSwitch(harness.store, "read_only")])
    result = await harness.run(await harness.session())
    assert harness.edit.calls == []
    record = result.tool_calls[-1]
    assert record.is_error and "read_only" in record.result


async def test_accept_edits_runs_edits_without_asking_but_asks_about_commands(tmp_path: Path):
    client = Client("allow")
    turns = [{"toolCalls": [call("c1", "patch"), call("c2", "shell")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, approver=client)
    sid = await harness.session()
    await set_mode(harness, sid, "accept_edits")
    result = await harness.run(sid)
    assert [a.tool_call.id for a in client.asked] == ["c2"]
    assert [r.is_error for r in result.tool_calls] == [False, False]


@pytest.mark.parametrize("mode", ["accept_edits", "ask"])
async def test_no_mode_lets_an_edit_run_under_deny(tmp_path: Path, mode: str):
    harness = Harness(tmp_path, one_call("patch"), approval="deny")
    sid = await harness.session()
    await set_mode(harness, sid, mode)
    result = await harness.run(sid)
    assert harness.edit.calls == []
    assert '"deny"' in result.tool_calls[0].result
