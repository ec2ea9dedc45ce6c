"""Tools: the contract, the registry the kernel calls, and the built-in workspace tools."""

from tether.tools.base import Tool, ToolContext, ToolError, ToolExecutor, ToolResult
from tether.tools.builtin import BUILTIN_TOOL_NAMES, builtin_registry, builtin_tools
from tether.tools.registry import ToolRegistry
from tether.tools.sandbox import Sandbox
from tether.tools.typed import ToolArguments, TypedTool

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "Sandbox",
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
]
