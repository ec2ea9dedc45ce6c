"""A session's plan: the steps the model means to take, as ``update_plan`` last set them.

The plan is replaced whole each time (never merged), kept with the session (``Session.plan``),
sent to the client as a ``plan`` progress event, and inherited by a fork.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tether.protocol.base import WireModel

PlanStatus = Literal["pending", "in_progress", "completed"]
PlanPriority = Literal["high", "medium", "low"]
MAX_PLAN_ENTRIES = 100
"""The most entries a plan may hold (a plan is read by a person: a longer one is a mistake)."""
MAX_PLAN_ENTRY_CHARS = 2000
"""The longest ``content`` of one entry."""


class PlanEntry(WireModel):
    """One step of a plan."""

    content: str = Field(
        min_length=1, max_length=MAX_PLAN_ENTRY_CHARS, description="what the step does, in words"
    )
    status: PlanStatus = Field(description="pending, in_progress or completed")
    priority: PlanPriority | None = Field(default=None, description="high, medium or low")


class Plan(WireModel):
    """The ``plan`` progress event: the session's plan changed (``entries`` is all of it)."""

    kind: Literal["plan"] = "plan"
    entries: list[PlanEntry] = Field(max_length=MAX_PLAN_ENTRIES)
