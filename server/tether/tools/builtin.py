"""The built-in tools (the workspace tools, then the session state pair) and the registry the
kernel starts from."""

from __future__ import annotations

from collections.abc import Collection

from tether.tools.base import Tool
from tether.tools.edit_file import EditFile
from tether.tools.list_files import ListFiles
from tether.tools.read_file import ReadFile
from tether.tools.registry import ToolRegistry
from tether.tools.run_command import RunCommand
from tether.tools.search_text import SearchText
from tether.tools.state import state_tools
from tether.tools.write_file import WriteFile


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool, in the order they are offered to the model
    (read-only ones first, then the session state pair)."""
    return [
        ReadFile(),
        ListFiles(),
        SearchText(),
        WriteFile(),
        EditFile(),
        RunCommand(),
        *state_tools(),
    ]


def builtin_registry(enabled: Collection[str] | None = None) -> ToolRegistry:
    """A registry of the built-in tools, offering only ``enabled`` ones when it is given
    (``tools.enabled``; ``None`` offers them all). Tools registered later obey the same list."""
    return ToolRegistry(builtin_tools()).restricted(enabled)
