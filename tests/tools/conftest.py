from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.tools import ToolContext, ToolRegistry, ToolResult, builtin_registry

SECRET = "TOP-SECRET-OUTSIDE"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a file no tool may return."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text(f"{SECRET}\n")
    return directory


@pytest.fixture
def workspace(tmp_path: Path, outside: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def context(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace, session_id="session", run_id="run")


@pytest.fixture
def registry() -> ToolRegistry:
    return builtin_registry()


class Call:
    """Calls a tool of a registry the way the kernel does: by name, with JSON arguments."""

    def __init__(self, registry: ToolRegistry, context: ToolContext) -> None:
        self.registry = registry
        self.context = context

    async def __call__(
        self, name: str, arguments: str | dict[str, Any] | None = None
    ) -> ToolResult:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        return await self.registry.execute(name, text, self.context)


@pytest.fixture
def call(registry: ToolRegistry, context: ToolContext) -> Call:
    return Call(registry, context)
