"""How a tool is described: to the model (name, description, JSON Schema) and to editors (kind)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from tether.protocol.base import WireModel


class ToolKind(StrEnum):
    READ = "read"
    EDIT = "edit"
    EXECUTE = "execute"
    SEARCH = "search"
    OTHER = "other"


class ToolSpec(WireModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(description="one line the model sees")
    parameters: dict[str, Any] = Field(description="JSON Schema of the arguments object")
    kind: ToolKind = ToolKind.OTHER
