"""The tool registry: the :class:`ToolExecutor` the kernel calls.

``execute`` never raises for a bad call: an unknown or disallowed tool, arguments that are not a
JSON object, nest deeper than a session keeps (``maxJsonDepth``) or fail the tool's schema, a
:class:`ToolError` and any other exception all become an error result the model reads. Only
cancellation (``asyncio.CancelledError``) propagates.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from tether.protocol.limits import MAX_JSON_DEPTH, NESTED_TOO_DEEP, nested_deeper_than
from tether.protocol.tools import ProposedChange, ToolKind, ToolSpec
from tether.tools.base import (
    SourceFailure,
    SourcePrompt,
    SourceResource,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
)

logger = logging.getLogger(__name__)


class ToolRegistry:
    """Tools by name, in registration order, optionally limited to an allow-list."""

    def __init__(self, tools: Iterable[Tool] = (), *, allowed: Collection[str] | None = None):
        self._tools: dict[str, Tool] = {}
        self._allowed = None if allowed is None else frozenset(allowed)
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``; a second tool with the same name is a programming error."""
        name = tool.spec.name
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._tools[name] = tool

    def restricted(self, *allow_lists: Collection[str] | None) -> ToolRegistry:
        """A copy that offers only the tools every given allow-list names (``None``: no limit).

        Names of tools that are not registered are ignored, so an allow-list may name tools that
        are registered later (such as tools of a server not started yet).
        """
        allowed = self._allowed
        for names in allow_lists:
            if names is not None:
                allowed = frozenset(names) if allowed is None else allowed & frozenset(names)
        return ToolRegistry(self._tools.values(), allowed=allowed)

    def tools(self) -> tuple[Tool, ...]:
        """Every registered tool, in registration order, whether on offer or not."""
        return tuple(self._tools.values())

    def names(self) -> builtins.list[str]:
        """The names of the tools on offer, in registration order."""
        return [name for name in self._tools if self._offers(name)]

    def get(self, name: str) -> Tool | None:
        """The tool on offer under ``name``, if any."""
        return self._tools.get(name) if self._offers(name) else None

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        """Run a call as the model made it (``arguments`` is JSON text); errors are results."""
        tool = self.get(name)
        if tool is None:
            available = ", ".join(self.names()) or "none"
            return ToolResult(f"unknown tool {name!r}; available tools: {available}", True)
        try:
            parsed = _arguments_object(name, arguments)
            return await tool.run(parsed, context)
        except ToolError as exc:
            return ToolResult(str(exc) or f"{name} failed", is_error=True)
        except Exception as exc:
            logger.exception("tool %s raised", name)
            return ToolResult(
                f"internal error in tool {name}: {type(exc).__name__}: {exc}", is_error=True
            )

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        """Why the call needs explicit approval whatever the policy (see :meth:`Tool.protected`);
        None for an unknown tool or arguments it refuses, since the call then fails as it runs."""
        tool = self.get(name)
        if tool is None:
            return None
        try:
            return tool.protected(_arguments_object(name, arguments), workspace)
        except ToolError:
            return None

    def failures(self) -> Sequence[SourceFailure]:
        """Built-in tools always offer themselves."""
        return ()

    async def refreshed(self) -> Sequence[ToolSpec] | None:
        """Built-in tools do not change."""
        return None

    def prompts(self) -> Sequence[SourcePrompt]:
        """Built-in tools offer no prompts."""
        return ()

    async def read_resource(self, uri: str) -> SourceResource | None:
        """Built-in tools list no resources."""
        return None

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        """The change an edit would make (see :meth:`Tool.proposed_change`), read in a thread;
        None for a tool that is not an edit, and for a call that will fail as it runs."""
        tool = self.get(name)
        if tool is None or tool.spec.kind is not ToolKind.EDIT:
            return None
        try:
            parsed = _arguments_object(name, arguments)
        except ToolError:
            return None
        try:
            return await asyncio.to_thread(_proposed_change, tool, parsed, context)
        except asyncio.CancelledError:
            if context.files is not None:  # ends a wait for the editor's text, withdrawn
                context.files.interrupt()
            raise

    def list(self, allowed: Collection[str] | None = None) -> builtins.list[ToolSpec]:
        """The specs of the tools on offer, in registration order, further limited to
        ``allowed`` when it is given."""
        return [
            self._tools[name].spec for name in self.names() if allowed is None or name in allowed
        ]

    def _offers(self, name: str) -> bool:
        return name in self._tools and (self._allowed is None or name in self._allowed)


def _proposed_change(
    tool: Tool, arguments: dict[str, Any], context: ToolContext
) -> ProposedChange | None:
    try:
        return tool.proposed_change(arguments, context.workspace, context.files)
    except ToolError:
        return None
    except Exception:  # the call itself will report what is wrong
        logger.exception("computing the change %s proposes failed", tool.spec.name)
        return None


def _arguments_object(tool: str, arguments: str) -> dict[str, Any]:
    """The arguments object of a call; empty text counts as ``{}`` (some servers send it).

    Arguments nested deeper than a session keeps are refused: a tool would store them (in the
    session's state, in a file it writes...) or fail on them."""
    if not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments for {tool} are not valid JSON: {exc}") from None
    except RecursionError:  # deeper than Python's stack: deeper than any limit
        raise ToolError(f"arguments for {tool} are {NESTED_TOO_DEEP}") from None
    if nested_deeper_than(parsed, MAX_JSON_DEPTH):
        raise ToolError(f"arguments for {tool} are {NESTED_TOO_DEEP}")
    if not isinstance(parsed, dict):
        kind = "null" if parsed is None else type(parsed).__name__
        kind = {
            "list": "array",
            "str": "string",
            "bool": "boolean",
            "int": "number",
            "float": "number",
        }.get(kind, kind)
        raise ToolError(f"arguments for {tool} must be a JSON object, not {kind}")
    return parsed
