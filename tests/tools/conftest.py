from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.requires import need_landlock, need_namespaces
from tether.tools import ToolContext, ToolRegistry, ToolResult, builtin_registry
from tether.tools.confinement import (
    NAMESPACES_VARIABLE,
    SandboxMode,
    SandboxPolicy,
    isolation,
)
from tether.tools.run_command import RunCommand

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


SEARCH_ENGINES = ("python", "ripgrep")


@pytest.fixture(params=SEARCH_ENGINES)
def engine_context(request: pytest.FixtureRequest, workspace: Path) -> ToolContext:
    """A context whose search_text and list_files run on each engine (``tools.search``): the
    modules of those tools use it as their ``context``, so each test runs on both."""
    return ToolContext(
        workspace=workspace, session_id="session", run_id="run", search=request.param
    )


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


@pytest.fixture
def landlock_required() -> None:
    """For the modules whose every test needs Landlock: ``pytestmark``."""
    need_landlock()


MECHANISMS = ("namespaces", "landlock", "off")


@pytest.fixture(params=MECHANISMS)
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each way the wrapper runs a command: confined in namespaces, confined by Landlock alone
    (``TETHER_SANDBOX_NAMESPACES=0``, as where namespaces are refused), and unconfined
    (``tools.sandbox = "off"``: the process tree is still watched)."""
    yield from _use(request.param, monkeypatch)


@pytest.fixture(params=MECHANISMS[:2])
def confining(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each way the wrapper confines a command (see :func:`mechanism`)."""
    yield from _use(request.param, monkeypatch)


def _use(name: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if name != "off":
        need_landlock()
    if name == "landlock":
        monkeypatch.setenv(NAMESPACES_VARIABLE, "0")
    else:
        monkeypatch.delenv(NAMESPACES_VARIABLE, raising=False)
    isolation.cache_clear()
    if name == "namespaces":
        need_namespaces()
    yield name
    isolation.cache_clear()


def commands(workspace: Path, mode: SandboxMode = "workspace-write", **policy: Any) -> Call:
    """A caller of ``run_command`` alone, under a sandbox policy of ``mode``."""
    context = ToolContext(
        workspace=workspace,
        session_id="s",
        run_id="r",
        sandbox=SandboxPolicy(mode=mode, **policy),
    )
    return Call(ToolRegistry([RunCommand()]), context)


def confined(workspace: Path, mechanism: str, **policy: Any) -> Call:
    """``commands`` as ``mechanism`` runs them (``off`` for the unconfined one)."""
    return commands(workspace, "off" if mechanism == "off" else "workspace-write", **policy)
