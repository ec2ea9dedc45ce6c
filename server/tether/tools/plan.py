"""``update_plan``: the model sets the session's plan, a checklist of the steps it means to take.

Each call replaces the whole plan (the model sends every step with its status each time, as
Codex's ``update_plan`` and Claude Code's TodoWrite do). The tool reaches the plan through
:attr:`ToolContext.plan`, a :class:`SessionPlan` handle the kernel fills in: the kernel stores
the plan with the session and tells the client (a ``plan`` progress event). The tool is of kind
``other``: it changes nothing in the workspace, so it never asks.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tether.protocol.plans import (
    MAX_PLAN_ENTRIES,
    MAX_PLAN_ENTRY_CHARS,
    PlanEntry,
    PlanPriority,
    PlanStatus,
)
from tether.protocol.tools import ToolKind
from tether.tools.base import ToolContext, ToolError, ToolResult
from tether.tools.typed import ToolArguments, TypedTool

PLAN_TOOL_NAME = "update_plan"
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


class PlanStep(ToolArguments):
    content: str = Field(
        min_length=1, max_length=MAX_PLAN_ENTRY_CHARS, description="what the step does"
    )
    status: PlanStatus = Field(description="pending, in_progress or completed")
    priority: PlanPriority | None = Field(default=None, description="high, medium or low")


class UpdatePlanArguments(ToolArguments):
    entries: list[PlanStep] = Field(
        max_length=MAX_PLAN_ENTRIES,
        description="every step of the plan, in order, each with its status (replaces the plan)",
    )


class UpdatePlan(TypedTool[UpdatePlanArguments]):
    def __init__(self) -> None:
        super().__init__(
            name=PLAN_TOOL_NAME,
            description=(
                "Set the plan of this task: every step, in order, with its status (pending, "
                "in_progress, completed). Replaces the previous plan; the user sees it as a "
                "checklist. Use it for work of several steps, and update it as steps are done."
            ),
            kind=ToolKind.OTHER,
            arguments_model=UpdatePlanArguments,
        )
        self.spec.parameters = inline_refs(self.spec.parameters)

    async def call(self, args: UpdatePlanArguments, context: ToolContext) -> ToolResult:
        if context.plan is None:
            raise ToolError("there is no session plan here")
        entries = [
            PlanEntry(content=step.content, status=step.status, priority=step.priority)
            for step in args.entries
        ]
        await context.plan.update(entries)
        return ToolResult(checklist(entries) or "the plan is now empty")


def checklist(entries: list[PlanEntry]) -> str:
    """The plan as lines of ``[ ]`` / ``[~]`` / ``[x]`` and the step (what the model reads back)."""
    return "\n".join(f"{_MARKS[entry.status]} {entry.content}" for entry in entries)


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` written in place of each ``$ref`` (some providers take no
    references in a tool's parameters), without the definitions' titles."""
    definitions: dict[str, Any] = schema.pop("$defs", {})

    def inline(value: Any) -> Any:
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                found = definitions[ref.removeprefix("#/$defs/")]
                return inline({key: item for key, item in found.items() if key != "title"})
            return {key: inline(item) for key, item in value.items()}
        if isinstance(value, list):
            return [inline(item) for item in value]
        return value

    inlined: dict[str, Any] = inline(schema)
    return inlined
