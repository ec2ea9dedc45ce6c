"""Sub-agents (the kernel's ``task`` tool) on ACP, whose client knows only its own sessions: a
sub-agent's editor requests go to the ACP session whose turn started it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tether.protocol.tools import ProposedChange
from tether.tools.base import ToolContext, ToolExecutor, ToolLayer, ToolResult


class RootedTools(ToolLayer):
    """The editor's tools as a sub-agent calls them: on the ACP session that started it (its
    calls are shown there), not on its own session, which the client does not know."""

    def __init__(self, inner: ToolExecutor, roots: Mapping[str, str]) -> None:
        super().__init__(inner)
        self._roots = roots  # a sub-agent's session -> the ACP session

    def _rooted(self, context: ToolContext) -> ToolContext:
        root = self._roots.get(context.session_id)
        return context if root is None else dataclasses.replace(context, session_id=root)

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        return await self._inner.execute(name, arguments, self._rooted(context))

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        return await self._inner.proposed_change(name, arguments, self._rooted(context))
