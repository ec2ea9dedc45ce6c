"""The kernel in process: a memory store, the scripted provider, and tools faked at the boundary."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import tether.tools.write_file as write_file_module
from tether.config import TetherConfig
from tether.kernel.kernel import Kernel
from tether.memory import Memory, MemoryLoadError
from tether.protocol import (
    CreateSessionParams,
    ErrorCode,
    Message,
    MessageInput,
    ProviderError,
    RequestCancelled,
    Role,
    SessionBusy,
    SessionNotFound,
    ToolCall,
)
from tether.protocol.kernel import (
    ProgressParams,
    RunParams,
    RunWarning,
    StopReason,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.protocol.tools import ProposedChange, ToolSpec
from tether.providers.scripted import ScriptedProvider
from tether.sessions import MemoryStore
from tether.tools.base import ToolContext, ToolResult

from .support import KernelHarness, tool_call


class Tools:
    """A tool executor whose tools each wait for their own gate, then echo their arguments."""

    def __init__(self, *names: str) -> None:
        self.specs = [ToolSpec(name=n, description=n, parameters={"type": "object"}) for n in names]
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.finished: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def list(self) -> list[ToolSpec]:
        return self.specs

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        return None

    def failures(self) -> tuple[()]:
        return ()

    async def refreshed(self) -> None:
        return None  # the list never changes

    def prompts(self) -> tuple[()]:
        return ()

    async def read_resource(self, uri: str) -> None:
        return None

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        return None

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        self.started.setdefault(name, asyncio.Event()).set()
        if name == "quits":  # a tool that raises CancelledError by itself, nobody cancelled it
            raise asyncio.CancelledError
        try:
            await self.gate(name).wait()
        except asyncio.CancelledError:
            self.cancelled.append(name)
            raise
        self.finished.setdefault(name, asyncio.Event()).set()
        if name == "broken":
            return ToolResult("it broke", is_error=True)
        return ToolResult(f"{name}:{arguments}")


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": "{}"}


class SlowStore(MemoryStore):
    """A memory store whose writes of tool results wait for ``gate`` once ``slow`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = False
        self.writing = asyncio.Event()
        self.gate = asyncio.Event()

    async def append(
        self, session_id: str, messages: Sequence[MessageInput], **kwargs: Any
    ) -> list[Message]:
        if not (self.slow and any(m.role is Role.TOOL for m in messages)):
            return await super().append(session_id, messages, **kwargs)
        self.writing.set()
        write = super().append

        async def commit() -> list[Message]:
            await self.gate.wait()
            return await write(session_id, messages, **kwargs)

        # like a database's worker thread, the write goes on when its waiter is cancelled
        return await asyncio.shield(asyncio.ensure_future(commit()))


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        turns: list[dict[str, Any]],
        tools: Tools,
        store: MemoryStore | None = None,
    ) -> None:
        self.store = store or MemoryStore()
        self.provider = ScriptedProvider(turns)
        self.tools = tools
        self.events: list[ProgressParams] = []
        self.memory: Callable[[Path, list[str]], Memory] = lambda root, paths: Memory(
            "remember: tabs"
        )
        self.workspace = tmp_path
        self.kernel = Kernel(
            self.store,
            config=lambda workspace: TetherConfig.model_validate(
                {
                    "provider": {"type": "scripted", "model": "m"},
                    "kernel": {"systemPrompt": "Be brief."},
                }
            ),
            providers=lambda config: self.provider,
            tools=self._tools,
            memory=lambda root, paths: self.memory(root, paths),
        )

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> Tools:
        return self.tools

    async def session(self, **fields: Any) -> str:
        params = CreateSessionParams(**fields)
        return (await self.store.create(params, self.workspace.as_uri())).session_id

    async def run(self, session_id: str, **params: Any) -> Any:
        return await self.kernel.run(
            RunParams(session_id=session_id, prompt="go", **params), self.events.append
        )

    def kinds(self) -> list[str]:
        return [e.event.kind for e in self.events]


@pytest.fixture
def tools() -> Tools:
    return Tools("first", "second", "broken")


async def test_calls_run_concurrently_and_results_follow_the_order_the_model_asked(
    tmp_path: Path, tools: Tools
):
    harness = Harness(
        tmp_path,
        [{"toolCalls": [call("a", "first"), call("b", "second")]}, {"text": "done"}],
        tools,
    )
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await tools.started.setdefault("first", asyncio.Event()).wait()
    await tools.started.setdefault("second", asyncio.Event()).wait()  # both at once
    tools.gate("second").set()  # the second finishes first
    await tools.finished.setdefault("second", asyncio.Event()).wait()
    tools.gate("first").set()
    result = await run
    history = await harness.store.history(sid)
    assert [m.tool_call_id for m in history if m.role is Role.TOOL] == ["a", "b"]
    assert [r.id for r in result.tool_calls] == ["a", "b"]
    assert result.stop_reason is StopReason.END_TURN
    request = harness.provider.requests[-1]
    assert request.system == "Be brief.\n\nremember: tabs"
    assert [m.role for m in request.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL]


async def test_cancelling_mid_tool_records_finished_results_and_cancelled_ones(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first"), call("b", "second")]}], tools)
    sid = await harness.session()
    tools.gate("first").set()
    run = asyncio.ensure_future(harness.run(sid))
    await tools.started.setdefault("second", asyncio.Event()).wait()
    assert harness.kernel.cancel(sid)
    result = await run
    assert result.stop_reason is StopReason.CANCELLED
    assert tools.cancelled == ["second"]
    results = {
        m.tool_call_id: (m.content, m.is_error)
        for m in await harness.store.history(sid)
        if m.role is Role.TOOL
    }
    assert results == {"a": ("first:{}", None), "b": ("cancelled", True)}
    assert harness.kinds()[-1] == "run_finished"
    assert not harness.kernel.is_running(sid)


async def test_cancelling_the_request_raises_request_cancelled_with_the_partial_result(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}], tools)
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await tools.started.setdefault("first", asyncio.Event()).wait()
    run.cancel()
    with pytest.raises(RequestCancelled) as raised:
        await run
    assert raised.value.data["stopReason"] == "cancelled"
    assert raised.value.data["toolCalls"][0]["result"] == "cancelled"


async def test_a_tool_raising_cancelled_error_itself_is_answered_cancelled_and_the_run_goes_on(
    tmp_path: Path,
):
    tools = Tools("quits", "first")
    turns = [{"toolCalls": [call("a", "quits"), call("b", "first")]}, {"text": "done"}]
    harness = Harness(tmp_path, turns, tools)
    sid = await harness.session()
    tools.gate("first").set()
    result = await asyncio.wait_for(harness.run(sid), 5)
    assert result.stop_reason is StopReason.END_TURN
    assert result.response == "done"  # the model was asked again, with both results
    assert [(r.id, r.result, r.is_error) for r in result.tool_calls] == [
        ("a", "cancelled", True),
        ("b", "first:{}", False),
    ]
    history = await harness.store.history(sid)
    assert [(m.tool_call_id, m.content, m.is_error) for m in history if m.role is Role.TOOL] == [
        ("a", "cancelled", True),
        ("b", "first:{}", None),
    ]
    updates = [
        e.event.status
        for e in harness.events
        if isinstance(e.event, ToolCallUpdate) and e.event.tool_call_id == "a"
    ]
    assert updates[-1] == "cancelled"
    assert harness.provider.requests[-1].messages[-2].content == "cancelled"


async def test_a_run_cancelled_while_its_results_are_written_answers_each_call_once(
    tmp_path: Path, tools: Tools
):
    store = SlowStore()
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}], tools, store=store)
    sid = await harness.session()
    store.slow = True
    tools.gate("first").set()
    run = asyncio.ensure_future(harness.run(sid))
    await asyncio.wait_for(store.writing.wait(), 5)
    assert harness.kernel.cancel(sid)
    store.gate.set()
    result = await asyncio.wait_for(run, 5)
    assert result.stop_reason is StopReason.CANCELLED
    history = await store.history(sid)
    assert [(m.tool_call_id, m.content) for m in history if m.role is Role.TOOL] == [
        ("a", "first:{}")
    ]
    assert [(r.id, r.result) for r in result.tool_calls] == [("a", "first:{}")]


async def test_a_second_run_on_a_busy_session_is_refused(tmp_path: Path, tools: Tools):
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "first")]}, {"text": "ok"}], tools)
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await tools.started.setdefault("first", asyncio.Event()).wait()
    with pytest.raises(SessionBusy):
        await harness.run(sid)
    tools.gate("first").set()
    assert (await run).stop_reason is StopReason.END_TURN


async def test_a_provider_failure_fails_the_run_but_leaves_every_call_answered(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "broken")]}], tools)  # then it runs out
    sid = await harness.session()
    tools.gate("broken").set()
    with pytest.raises(ProviderError):
        await harness.run(sid)
    history = await harness.store.history(sid)
    assert [(m.role, m.is_error) for m in history] == [
        (Role.USER, None),
        (Role.ASSISTANT, None),
        (Role.TOOL, True),
    ]
    finished = harness.events[-1].event
    assert finished.kind == "run_finished" and finished.stop_reason is StopReason.ERROR


async def test_tools_outside_the_session_allow_list_are_neither_offered_nor_run(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"toolCalls": [call("a", "second")]}, {"text": "ok"}], tools)
    sid = await harness.session(tools=["first"])
    result = await harness.run(sid)
    assert [s.name for s in harness.provider.requests[0].tools] == ["first"]
    assert result.tool_calls[0].is_error and "not available" in result.tool_calls[0].result
    assert "second" not in tools.started


async def test_memory_left_out_is_a_warning_of_the_run_which_goes_on_with_the_rest(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"text": "done"}], tools)
    problem = MemoryLoadError("memory file notes.md was left out: ...", "notes.md", "not_regular")
    harness.memory = lambda root, paths: Memory("remember: tabs", (problem,))
    sid = await harness.session()

    result = await harness.run(sid)

    assert result.stop_reason is StopReason.END_TURN
    [warning] = result.warnings or []
    assert warning.code == ErrorCode.CONFIG_ERROR
    assert warning.data == {"key": "memory.paths", "path": "notes.md", "reason": "not_regular"}
    assert "remember: tabs" in (harness.provider.requests[0].system or "")
    assert harness.kinds()[:2] == ["run_started", "warning"]


async def test_events_are_numbered_from_one_and_bracketed_by_start_and_finish(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"text": "hello there"}], tools)
    sid = await harness.session()
    result = await harness.run(sid, max_iterations=2)
    assert [e.seq for e in harness.events] == list(range(1, len(harness.events) + 1))
    assert harness.kinds()[0] == "run_started" and harness.kinds()[-1] == "run_finished"
    assert {e.run_id for e in harness.events} == {result.run_id}
    assert harness.events[0].event.max_iterations == 2
    assert json.loads(result.model_dump_json())["response"] == "hello there"


async def test_tool_calls_left_without_a_result_are_answered_interrupted_before_the_prompt(
    tmp_path: Path, tools: Tools
):
    harness = Harness(tmp_path, [{"text": "ok"}], tools)
    sid = await harness.session()
    await harness.store.append(
        sid,
        [
            MessageInput(role=Role.USER, content="earlier"),
            MessageInput(
                role=Role.ASSISTANT,
                tool_calls=[ToolCall(id="x1", name="first", arguments="{}")],
            ),
        ],
    )
    await harness.run(sid)
    history = await harness.store.history(sid)
    assert [(m.role, m.tool_call_id, m.is_error) for m in history[2:4]] == [
        (Role.TOOL, "x1", True),
        (Role.USER, None, None),
    ]
    assert harness.provider.requests[0].messages[2].content == "interrupted"


class Contexts(Tools):
    """Records the context each call was given."""

    def __init__(self) -> None:
        super().__init__("probe")
        self.contexts: list[ToolContext] = []
        self.gate("probe").set()

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        self.contexts.append(context)
        return await super().execute(name, arguments, context)


@pytest.mark.parametrize(("key_env", "hidden"), [("LLM_SESAME", {"LLM_SESAME"}), (None, set())])
async def test_tools_are_told_to_hide_the_provider_key_variable(
    tmp_path: Path, key_env: str | None, hidden: set[str]
):
    tools = Contexts()
    harness = KernelHarness(
        tmp_path,
        [{"toolCalls": [call("a", "probe")]}, {"text": "done"}],
        config={"provider": {"apiKeyEnv": key_env}},
        tools=tools,
    )
    await harness.run(await harness.session())
    [context] = tools.contexts
    assert context.hidden_env == hidden


async def test_a_write_under_way_when_the_run_is_cancelled_is_recorded_as_it_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    entered, release = threading.Event(), threading.Event()
    real = write_file_module.commit

    def held(*args: Any, **kwargs: Any) -> None:
        entered.set()
        release.wait(30)
        real(*args, **kwargs)

    monkeypatch.setattr(write_file_module, "commit", held)
    harness = KernelHarness(
        tmp_path,
        [{"toolCalls": [tool_call("a", "write_file", path="a.txt", content="new\n")]}],
        config={"tools": {"approval": "auto"}},
    )
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    assert await asyncio.to_thread(entered.wait, 30)
    assert harness.kernel.cancel(sid)
    release.set()
    result = await run
    assert result.stop_reason is StopReason.CANCELLED
    assert (tmp_path / "a.txt").read_text() == "new\n"
    [record] = result.tool_calls
    assert record.result.startswith("created a.txt") and not record.is_error
    [message] = [m for m in await harness.store.history(sid) if m.role is Role.TOOL]
    assert message.content == record.result
    updates = [e.event for e in harness.events if e.event.kind == "tool_call_update"]
    assert updates[-1].status is ToolCallStatus.COMPLETED


async def test_each_run_reports_the_warnings_after_run_started_and_in_its_result(tmp_path: Path):
    warning = RunWarning(
        code=ErrorCode.CONFIG_ERROR,
        message="the workspace config file was left out: ...",
        data={"key": "sessions.ttl", "source": "/repo/.tether/config.toml"},
    )
    harness = KernelHarness(tmp_path, [{"text": "one"}, {"text": "two"}], warnings=[warning])
    sid = await harness.session()
    first = await harness.run(sid)
    second = await harness.run(sid)
    assert first.warnings == second.warnings == [warning]
    kinds = [e.event.kind for e in harness.events]
    assert kinds[:2] == ["run_started", "warning"]
    assert kinds.count("warning") == 2
    assert first.to_wire()["warnings"][0]["code"] == ErrorCode.CONFIG_ERROR


async def test_a_run_without_warnings_has_none_on_the_wire(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "fine"}])
    result = await harness.run(await harness.session())
    assert "warnings" not in result.to_wire()
    assert all(e.event.kind != "warning" for e in harness.events)


async def test_a_run_refused_before_it_starts_carries_the_warnings_in_its_error(tmp_path: Path):
    warning = RunWarning(code=ErrorCode.CONFIG_ERROR, message="left out", data={"key": "k"})
    harness = KernelHarness(tmp_path, [], warnings=[warning])
    with pytest.raises(SessionNotFound) as raised:
        await harness.run("no-such-session")
    assert raised.value.data["warnings"] == [warning.to_wire()]
    assert raised.value.data["sessionId"] == "no-such-session"


class InterruptedSetup(KernelHarness):
    """Its tools end in a ``CancelledError`` no one asked for (a library's own wait, ended so)."""

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> Any:
        raise asyncio.CancelledError


async def test_a_cancellation_nobody_asked_for_while_starting_is_an_error_not_a_cancelled_run(
    tmp_path: Path,
):
    harness = InterruptedSetup(tmp_path, [{"text": "never asked"}])
    sid = await harness.session()
    with pytest.raises(RuntimeError, match="no one cancelled it"):
        await harness.run(sid)
    assert await harness.store.history(sid) == []
    assert not harness.kernel.is_running(sid)


class InterruptedProvider(ScriptedProvider):
    """Its stream ends in a ``CancelledError`` no one asked for."""

    async def stream(self, request: Any) -> Any:
        raise asyncio.CancelledError
        yield  # a generator, as a provider's stream is


async def test_a_cancellation_nobody_asked_for_during_the_run_fails_it(tmp_path: Path):
    harness = KernelHarness(tmp_path, [])
    harness.provider = InterruptedProvider([])
    sid = await harness.session()
    with pytest.raises(RuntimeError, match="no one cancelled it"):
        await harness.run(sid)
    finished = harness.events[-1].event
    assert finished.kind == "run_finished" and finished.stop_reason is StopReason.ERROR


KEY = "sk-live-0123456789"


class Leaky(Tools):
    """A tool (an MCP server's, say) whose result, diff, output and progress show a secret."""

    def __init__(self) -> None:
        super().__init__("leak")
        self.contexts: list[ToolContext] = []

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        self.contexts.append(context)
        context.progress(f"using {KEY}")
        return ToolResult(f"key={KEY}", diff=f"+{KEY}\n", output={"key": KEY, "n": [KEY, 1]})


async def test_the_secrets_of_the_configuration_are_redacted_from_every_tool_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("LLM_SESAME", KEY)
    tools = Leaky()
    harness = KernelHarness(
        tmp_path,
        [{"toolCalls": [call("a", "leak")]}, {"text": "done"}],
        config={"provider": {"apiKeyEnv": "LLM_SESAME"}},
        tools=tools,
    )
    sid = await harness.session()
    result = await harness.run(sid)
    [record] = result.tool_calls
    assert (record.result, record.output) == (
        "key=[redacted]",
        {"key": "[redacted]", "n": ["[redacted]", 1]},
    )
    [message] = [m for m in await harness.store.history(sid) if m.role is Role.TOOL]
    assert message.content == "key=[redacted]"
    updates = [e.event for e in harness.events if isinstance(e.event, ToolCallUpdate)]
    assert [u.progress for u in updates if u.progress] == ["using [redacted]"]
    assert [u.diff for u in updates if u.diff] == ["+[redacted]\n"]
    assert KEY not in str(harness.events)
    assert tools.contexts[0].secrets.hides(f"x{KEY}x")


async def test_an_untitled_session_is_titled_after_the_first_line_of_its_first_prompt(
    tmp_path: Path,
) -> None:
    harness = KernelHarness(tmp_path, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    untitled = await harness.session()
    await harness.run(untitled, prompt=[{"type": "text", "text": "\n  Fix the parser  \nplease"}])
    await harness.run(untitled, prompt="something else")
    long = await harness.session()
    await harness.run(long, prompt="x" * 200)
    assert (await harness.store.get(untitled)).title == "Fix the parser"
    assert (await harness.store.get(long)).title == "x" * 79 + "…"


async def test_a_titled_session_keeps_its_title(tmp_path: Path) -> None:
    harness = KernelHarness(tmp_path, [{"text": "one"}])
    sid = await harness.session(title="Mine")
    await harness.run(sid, prompt="Rename me")
    assert (await harness.store.get(sid)).title == "Mine"
