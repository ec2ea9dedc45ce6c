"""The tool contract: a tool has a spec and runs on arguments inside a session's workspace.

A tool reports failure by raising :class:`ToolError` (or anything else): the executor turns it into
an error result that goes back to the model, never into a failed run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from tether.protocol.plans import PlanEntry
from tether.protocol.tools import ProposedChange, ToolSpec
from tether.secrets import Secrets
from tether.tools.confinement import SandboxPolicy

SearchEngine = Literal["auto", "ripgrep", "python"]
"""``tools.search``: which engine runs ``search_text`` and ``list_files``
(:mod:`tether.tools.ripgrep`)."""


def _no_progress(message: str) -> None:
    return None


class SessionStateHandle(Protocol):
    """Reads and writes the state of the session a call runs in (``Session.state``, a JSON
    object kept in the store); the kernel gives one to each call."""

    async def get(self) -> dict[str, Any]:
        """A copy of the whole state."""
        ...

    async def set(self, state: dict[str, Any]) -> None:
        """Replace the whole state."""
        ...


class SessionPlan(Protocol):
    """The plan of the session a call runs in (``Session.plan``), for ``update_plan``."""

    async def update(self, entries: list[PlanEntry]) -> None:
        """Replace the whole plan (stored with the session; the client is told)."""
        ...


class FileAccess(Protocol):
    """Where ``write_file`` and ``edit_file`` read a file's current text and make their final
    write, after their own checks (inside the workspace, symlinks, hard links, protected paths,
    sizes), instead of the disk: an editor's buffers, say. ``read_file`` and ``search_text``
    read through it too when they are given one (the LSP face gives its open buffers; reads
    there must be cheap: ``search_text`` asks once per file). Called from the tool's thread."""

    def read_text(self, path: Path) -> str | None:
        """The current text of ``path`` (absolute, checked), or None to read the disk."""
        ...

    def write_text(self, path: Path, text: str) -> None:
        """Make ``text`` the content of ``path``; a :class:`ToolError` when that failed."""
        ...

    def interrupt(self) -> None:
        """The call was cancelled while its thread may be waiting in :meth:`read_text` or
        :meth:`write_text` (for an editor's answer): that wait, and any later one, ends at once
        with a :class:`ToolError`. Called on the event loop."""
        ...


@runtime_checkable
class ListsOpenFiles(Protocol):
    """A :class:`FileAccess` that can tell which files it holds text of (an editor's open
    buffers), so that ``search_text`` asks it of those files only, not of every file it walks."""

    def open_paths(self) -> Collection[Path]:
        """The files (absolute, resolved) whose :meth:`FileAccess.read_text` may not be None."""
        ...


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Where a call runs. The kernel makes one per call (``dataclasses.replace``), filling in
    ``tool_call_id`` and ``progress``, which reports a line of progress to the editor."""

    workspace: Path  # the session's workspace root: tools stay inside it
    session_id: str
    run_id: str
    tool_call_id: str | None = None
    progress: Callable[[str], None] = _no_progress
    state: SessionStateHandle | None = None  # the session's state, for state_get / state_set
    plan: SessionPlan | None = None  # the session's plan, for update_plan
    # names of environment variables commands must not see (the provider's API key variable)
    hidden_env: frozenset[str] = frozenset()
    # the configured secrets: no command sees a variable whose value contains one
    secrets: Secrets = field(default_factory=Secrets)
    # the user approved this call knowing it writes to a protected path (Tool.protected)
    protected_approved: bool = False
    # the OS sandbox commands run in (``tools.sandbox``)
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    # where write_file and edit_file read and write after their checks (None: the disk)
    files: FileAccess | None = None
    # which engine search_text and list_files run on (``tools.search``)
    search: SearchEngine = "auto"


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False
    diff: str | None = None  # a unified diff of what an edit changed, for editors to render
    output: Any = None  # a structured result beside the text (JSON; MCP's structuredContent)


@dataclass(frozen=True)
class SourceFailure:
    """A source of tools that offers none now (an MCP server that failed to start), and why:
    a run tells the client (a ``notice``) and answers calls of tools named with ``prefix``."""

    source: str  # what a person reads: "MCP server 'github'"
    reason: str  # "it failed to start: [Errno 2] No such file or directory: 'gh-mcp'"
    prefix: str  # the names of its tools start so: "github__"

    def describe(self) -> str:
        return f"{self.source} is not running ({self.reason})"


@dataclass(frozen=True)
class PromptArgument:
    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class SourcePrompt:
    """A prompt a source of tools offers (an MCP server's ``prompts/list``), typed as the slash
    command ``/name``; ``render`` gets the arguments by name and returns the prompt's text
    (the server's ``prompts/get``), raising :class:`ToolError` when the source fails."""

    name: str  # "mcp__github__review"
    description: str
    arguments: tuple[PromptArgument, ...]
    render: Callable[[Mapping[str, str]], Awaitable[str]]


@dataclass(frozen=True)
class SourceResource:
    """A resource a source read for a prompt (``resources/read``): its text as the model reads
    it, or why it could not be read."""

    uri: str
    source: str  # "MCP server 'notes'"
    text: str
    is_error: bool = False


class ToolError(Exception):
    """A failure the model should read (bad arguments, a missing file, a path outside)."""


class Tool(ABC):
    spec: ToolSpec

    @abstractmethod
    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """Do the work; ``arguments`` already match ``spec.parameters``."""

    def protected(self, arguments: dict[str, Any], workspace: Path) -> str | None:
        """Why this call needs the user's explicit approval whatever ``tools.approval`` says
        (it writes to a protected path: :mod:`tether.tools.protected`), else None. Asked before
        the call runs; a call it cannot judge (bad arguments) may raise :class:`ToolError`."""
        return None

    def proposed_change(
        self, arguments: dict[str, Any], workspace: Path, files: FileAccess | None
    ) -> ProposedChange | None:
        """What an edit would make of its file, computed before it is asked about or run (in a
        thread: it reads the file, through ``files`` when given); None for a tool that edits no
        file. A call that will fail (bad arguments, no such file...) may raise
        :class:`ToolError`."""
        return None


class ToolExecutor(Protocol):
    def list(self) -> list[ToolSpec]: ...

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        """Run a call as the model made it (``arguments`` is JSON text); errors are results."""
        ...

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        """:meth:`Tool.protected` of a call as the model made it; None for a call that will
        fail anyway (an unknown tool, invalid arguments, a path outside the workspace)."""
        ...

    def failures(self) -> Sequence[SourceFailure]:
        """The sources of tools that could not offer theirs for this run (none: empty)."""
        ...

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        """:meth:`Tool.proposed_change` of a call as the model made it; None for a call that
        edits no file or will fail anyway."""
        ...

    async def refreshed(self) -> Sequence[ToolSpec] | None:
        """The tools again when a source said its list changed since they were last read (MCP
        ``notifications/tools/list_changed``); None when nothing changed."""
        ...

    def prompts(self) -> Sequence[SourcePrompt]:
        """The prompts the sources offer (as slash commands)."""
        ...

    async def read_resource(self, uri: str) -> SourceResource | None:
        """The resource ``uri`` read through the source that lists it; None when none does."""
        ...


class ToolLayer:
    """A :class:`ToolExecutor` over ``inner`` that changes how some calls run (``execute``)
    and offers, protects and reports exactly what ``inner`` does."""

    def __init__(self, inner: ToolExecutor) -> None:
        self._inner = inner

    def list(self) -> list[ToolSpec]:
        return self._inner.list()

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        return self._inner.protected(name, arguments, workspace)

    def failures(self) -> Sequence[SourceFailure]:
        return self._inner.failures()

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        return await self._inner.proposed_change(name, arguments, context)

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        return await self._inner.execute(name, arguments, context)

    async def refreshed(self) -> Sequence[ToolSpec] | None:
        return await self._inner.refreshed()

    def prompts(self) -> Sequence[SourcePrompt]:
        return self._inner.prompts()

    async def read_resource(self, uri: str) -> SourceResource | None:
        return await self._inner.read_resource(uri)
