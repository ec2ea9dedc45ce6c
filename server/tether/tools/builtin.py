"""The built-in tools (the workspace tools, then the session state pair) and the registry the
kernel starts from."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

from tether.tools.base import Tool
from tether.tools.edit_file import EditFile
from tether.tools.list_files import ListFiles
from tether.tools.plan import UpdatePlan
from tether.tools.read_file import ReadFile
from tether.tools.registry import ToolRegistry
from tether.tools.run_command import RunCommand
from tether.tools.search_text import SearchText
from tether.tools.state import state_tools
from tether.tools.write_file import WriteFile


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool, in the order they are offered to the model
    (read-only ones first, then the session state pair, then the plan)."""
    return [
        ReadFile(),
        ListFiles(),
        SearchText(),
        WriteFile(),
        EditFile(),
        RunCommand(),
        *state_tools(),
        UpdatePlan(),
    ]


def shared_builtin_tools() -> Sequence[Tool]:
    """The built-in tools the runs of a process share, made on first use.

    A built-in tool keeps nothing between calls (its spec and arguments model are fixed when it
    is made, everything else comes with each call), so one instance serves every run at once;
    making them for each run cost ~40 µs of the server's CPU per run.
    """
    return _shared_registry().tools()


def builtin_registry(enabled: Collection[str] | None = None) -> ToolRegistry:
    """A registry of the built-in tools, offering only ``enabled`` ones when it is given
    (``tools.enabled``; ``None`` offers them all). Tools registered later obey the same list.

    Each call gives a registry of its own (registering on it changes no other) over the shared
    tools (:func:`shared_builtin_tools`)."""
    return _shared_registry().restricted(enabled)


@functools.cache
def _shared_registry() -> ToolRegistry:
    return ToolRegistry(builtin_tools())
