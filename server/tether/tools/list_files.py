"""``list_files``: the files under a workspace directory, optionally matching a glob."""

from __future__ import annotations

import threading
from pathlib import Path

from pydantic import Field

from tether.protocol.tools import ToolKind
from tether.tools.base import SearchEngine, ToolContext, ToolResult
from tether.tools.ripgrep import chosen, rg_walk
from tether.tools.sandbox import Sandbox
from tether.tools.typed import ToolArguments, TypedTool
from tether.tools.walk import WALK_BUDGET_SECONDS, Glob, run_in_thread, walk_files

DEFAULT_LIMIT = 500
MAX_LIMIT = 5000
MAX_SCANNED = 200_000


class ListFilesArguments(ToolArguments):
    path: str = Field(
        default=".", description="directory to list, relative to the workspace root (default: it)"
    )
    glob: str | None = Field(
        default=None,
        description=(
            "only files matching this glob relative to path, e.g. '**/*.py' or 'src/*.{ts,tsx}'; "
            "a glob without '/' matches file names at any depth"
        ),
    )
    limit: int = Field(
        default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="most paths to return"
    )
    include_ignored: bool = Field(
        default=False,
        description="also files that .gitignore or .ignore files exclude",
    )


class ListFiles(TypedTool[ListFilesArguments]):
    def __init__(self) -> None:
        super().__init__(
            name="list_files",
            description=(
                "List the files under a workspace directory, recursively, as sorted paths relative "
                "to the workspace root (skips .git, node_modules, caches and virtualenvs, and "
                "what .gitignore and .ignore files exclude unless include_ignored is set)."
            ),
            kind=ToolKind.SEARCH,
            arguments_model=ListFilesArguments,
        )

    async def call(self, args: ListFilesArguments, context: ToolContext) -> ToolResult:
        engine = context.search
        return await run_in_thread(lambda stop: _list(args, context.workspace, stop, engine))


def _list(
    args: ListFilesArguments,
    workspace: Path,
    stop: threading.Event,
    engine: SearchEngine = "auto",
) -> ToolResult:
    sandbox = Sandbox(workspace)
    glob = Glob.compile(args.glob) if args.glob is not None else None
    start = sandbox.directory(args.path)
    rg = chosen(engine, sandbox.root, start)
    if rg is None:
        walk = walk_files(
            sandbox.root,
            start,
            glob=glob,
            max_entries=MAX_SCANNED,
            stop=stop,
            include_ignored=args.include_ignored,
        )
    else:
        walk = rg_walk(
            rg,
            sandbox.root,
            start,
            glob=glob,
            max_entries=MAX_SCANNED,
            stop=stop,
            include_ignored=args.include_ignored,
            budget=WALK_BUDGET_SECONDS,
            stat=False,
        )
    paths = walk.paths()
    lines = paths[: args.limit]
    if not lines:
        lines.append("no files match" if glob else "no files")
    if len(paths) > args.limit:
        lines.append(
            f"[showing {args.limit} of {len(paths)} files: narrow with path or glob, "
            f"or raise limit (at most {MAX_LIMIT})]"
        )
    lines += walk.notes(
        max_entries=MAX_SCANNED, budget=WALK_BUDGET_SECONDS, what="the list is incomplete"
    )
    return ToolResult("\n".join(lines))
