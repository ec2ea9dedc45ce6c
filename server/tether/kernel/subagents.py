"""Sub-agents: the built-in ``task`` tool, which runs a prompt in a child session of its own.

A ``task {prompt, description?, agent?}`` call makes a session (``Session.spawnedBy``: the
session, run and call it comes from; listed and read like any other) and runs ``prompt`` there
to its end, under the profile ``agent`` names (:mod:`.agents`); the child's final answer is the
call's result. The child sees none of the parent's history, and never more tools than the
parent's run offers: its session's ``tools`` are those, and it runs on the parent's own tools
(the same executor, so an editor's files and a session's MCP servers stay what they were).
Beyond :data:`MAX_DEPTH` levels, ``task`` itself is not offered.

Its events reach the parent's client as ``kernel/progress`` with the child's ``sessionId`` and
``runId`` and ``parentRunId``/``parentToolCallId``; its questions go to the same approver;
cancelling the parent cancels it (the call's task is cancelled, and with it the child's run);
its usage is added to the parent run's. The calls of one model turn run concurrently (the
kernel runs a turn's calls so), at most ``kernel.max_subagents`` at once per run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.kernel.agents import AgentProfile
from tether.protocol import TetherError
from tether.protocol.kernel import RunResult, StopReason
from tether.protocol.tools import ToolKind, ToolSpec
from tether.protocol.usage import Usage
from tether.tools.base import ToolContext, ToolExecutor, ToolResult

TASK_TOOL = "task"
MAX_DEPTH = 2
"""A user's run is at depth 0; its sub-agents at 1 may start their own (depth 2), which may not."""
NO_ANSWER = "(the sub-agent gave no answer)"
_DESCRIPTION = (
    "Delegate a self-contained task to a sub-agent that works on its own with your tools and "
    "answers once done. It sees nothing of this conversation: put everything it needs in "
    "`prompt`. Calls in one turn run at the same time."
)


def task_spec(profiles: Sequence[AgentProfile]) -> ToolSpec:
    """The ``task`` tool as the model is offered it, naming the profiles it may pick."""
    agent: dict[str, Any] = {
        "type": "string",
        "description": "the agent profile to run under (default: none)",
    }
    if profiles:
        agent["enum"] = [profile.name for profile in profiles]
        agent["description"] += "; " + "; ".join(
            f"{p.name}: {p.description}" if p.description else p.name for p in profiles
        )
    return ToolSpec(
        name=TASK_TOOL,
        description=_DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "the whole task, self-contained"},
                "description": {
                    "type": "string",
                    "description": "a few words naming the task (the title of its session)",
                },
                "agent": agent,
            },
            "required": ["prompt"],
            "additionalProperties": False,
        },
        kind=ToolKind.OTHER,
    )


PLAIN_TASK_SPEC = task_spec(())
"""The ``task`` tool where there is no profile to name (made once)."""


@dataclass(frozen=True)
class TaskRequest:
    prompt: str
    description: str | None = None
    agent: str | None = None


def task_request(arguments: str) -> TaskRequest:
    """The arguments of a ``task`` call; ``ValueError`` saying what is wrong with them."""
    try:
        given = json.loads(arguments or "{}")
    except ValueError:
        raise ValueError("task: the arguments are not JSON") from None
    if not isinstance(given, dict):
        raise ValueError("task: the arguments must be an object")
    prompt = given.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("task: `prompt` must be a text that is not empty")
    extra = sorted(set(given) - {"prompt", "description", "agent"})
    if extra:
        raise ValueError(f"task: unknown argument {', '.join(extra)}")
    for name in ("description", "agent"):
        if given.get(name) is not None and not isinstance(given[name], str):
            raise ValueError(f"task: `{name}` must be a string")
    return TaskRequest(prompt, given.get("description") or None, given.get("agent") or None)


@dataclass(frozen=True, kw_only=True)
class Lineage:
    """What a sub-agent's run takes from the run that started it (kept while it runs)."""

    executor: ToolExecutor  # the parent's tools
    tool_names: frozenset[str]  # those the parent's run offered
    depth: int
    parent_run_id: str
    parent_tool_call_id: str


Spawn = Callable[[TaskRequest, ToolContext], Awaitable[RunResult]]
"""Runs a task's child to its end (the kernel's); raises ``TetherError`` when it cannot."""


class Subagents:
    """The ``task`` calls of one run, at most ``limit`` at once."""

    def __init__(self, spawn: Spawn, limit: int) -> None:
        self._spawn = spawn
        self._slots = asyncio.Semaphore(max(limit, 1))

    async def run(self, arguments: str, context: ToolContext) -> tuple[ToolResult, Usage]:
        """The call's result, and what the child used."""
        try:
            request = task_request(arguments)
        except ValueError as exc:
            return ToolResult(str(exc), is_error=True), Usage()
        async with self._slots:
            try:
                result = await self._spawn(request, context)
            except TetherError as exc:
                return ToolResult(f"the sub-agent could not run: {exc.message}", True), Usage()
        return task_result(result), result.usage or Usage()


def task_result(result: RunResult) -> ToolResult:
    """A child's run as the ``task`` call's result: its answer (what stopped it short, when
    something did), with ``{sessionId, runId, stopReason}`` as the structured output."""
    text = result.response or NO_ANSWER
    stop = result.stop_reason
    if stop is not StopReason.END_TURN:
        text = f"{text}\n\n(the sub-agent stopped: {stop.value})"
    output = {"sessionId": result.session_id, "runId": result.run_id, "stopReason": stop.value}
    failed = stop in (StopReason.CANCELLED, StopReason.ERROR)
    return ToolResult(text, is_error=failed, output=output)


def add_child_usage(total: Usage, child: Usage) -> Usage:
    """The parent run's usage with a child's counts added (the context size stays the
    parent's own: the child's requests read another context)."""

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return Usage(
        input_tokens=total.input_tokens + child.input_tokens,
        output_tokens=total.output_tokens + child.output_tokens,
        reasoning_tokens=plus(total.reasoning_tokens, child.reasoning_tokens),
        cached_tokens=plus(total.cached_tokens, child.cached_tokens),
        context_tokens=total.context_tokens,
    )


def narrowed(
    specs: list[ToolSpec], profile: AgentProfile | None, lineage: Lineage | None
) -> list[ToolSpec]:
    """``specs`` within the profile's ``tools`` and, for a sub-agent, its parent's offer."""
    if profile is not None and profile.tools is not None:
        specs = [spec for spec in specs if spec.name in profile.tools]
    if lineage is not None:
        specs = [spec for spec in specs if spec.name in lineage.tool_names]
    return specs
