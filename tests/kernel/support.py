"""A kernel in process over a memory store and the scripted provider, with any configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.config import TetherConfig
from tether.kernel.approval import Approver
from tether.kernel.kernel import Kernel
from tether.memory import Memory
from tether.protocol import CreateSessionParams
from tether.protocol.kernel import ProgressParams, RunParams, RunResult, RunWarning
from tether.providers.scripted import ScriptedProvider
from tether.sessions import MemoryStore
from tether.tools import ToolExecutor, builtin_registry


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


class KernelHarness:
    """``config`` is laid over a scripted provider with model ``m``; tools default to the
    built-in registry as the server makes it (``tools.enabled``)."""

    def __init__(
        self,
        workspace: Path,
        turns: list[dict[str, Any]],
        *,
        config: dict[str, Any] | None = None,
        tools: ToolExecutor | None = None,
        warnings: list[RunWarning] | None = None,
        approver: Approver | None = None,
    ) -> None:
        self.store = MemoryStore()
        self.provider = ScriptedProvider(turns)
        self.workspace = workspace
        self.events: list[ProgressParams] = []
        base = TetherConfig.model_validate({"provider": {"type": "scripted", "model": "m"}})
        self.config = base.overlay(config)
        self.kernel = Kernel(
            self.store,
            config=lambda workspace: self.config,
            providers=lambda config: self.provider,
            tools=self._tools,
            memory=lambda root, paths: Memory(),
            warnings=lambda workspace: warnings or [],
            approver=approver,
        )
        self._given_tools = tools

    async def _tools(self, config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        return self._given_tools or builtin_registry(config.tools.enabled)

    async def session(self, **fields: Any) -> str:
        params = CreateSessionParams(**fields)
        return (await self.store.create(params, self.workspace.as_uri())).session_id

    async def run(self, session_id: str, prompt: Any = "go", **params: Any) -> RunResult:
        return await self.kernel.run(
            RunParams(session_id=session_id, prompt=prompt, **params), self.events.append
        )
