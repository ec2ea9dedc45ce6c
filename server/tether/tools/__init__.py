"""Tools: the contract, the registry the kernel calls, and the built-in workspace tools.

The names below are imported on first use, so that reading :data:`BUILTIN_TOOL_NAMES` (which the
handshake reports) does not load the tools themselves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

BUILTIN_TOOL_NAMES = (
    "read_file",
    "list_files",
    "search_text",
    "write_file",
    "edit_file",
    "run_command",
    "state_get",
    "state_set",
    "update_plan",
)

_HOMES = {
    "SessionStateHandle": "base",
    "Tool": "base",
    "ToolContext": "base",
    "ToolError": "base",
    "ToolExecutor": "base",
    "ToolResult": "base",
    "builtin_registry": "builtin",
    "builtin_tools": "builtin",
    "shared_builtin_tools": "builtin",
    "ToolRegistry": "registry",
    "Sandbox": "sandbox",
    "ToolArguments": "typed",
    "TypedTool": "typed",
}

if TYPE_CHECKING:
    from tether.tools.base import (
        SessionStateHandle,
        Tool,
        ToolContext,
        ToolError,
        ToolExecutor,
        ToolResult,
    )
    from tether.tools.builtin import builtin_registry, builtin_tools, shared_builtin_tools
    from tether.tools.registry import ToolRegistry
    from tether.tools.sandbox import Sandbox
    from tether.tools.typed import ToolArguments, TypedTool


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tether.tools' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tether.tools.{home}"), name)


__all__ = [
    "BUILTIN_TOOL_NAMES",
    "Sandbox",
    "SessionStateHandle",
    "Tool",
    "ToolArguments",
    "ToolContext",
    "ToolError",
    "ToolExecutor",
    "ToolRegistry",
    "ToolResult",
    "TypedTool",
    "builtin_registry",
    "builtin_tools",
    "shared_builtin_tools",
]
