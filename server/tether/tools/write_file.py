"""``write_file``: create or replace a workspace file with the given text, atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from tether.protocol.tools import ProposedChange, ToolKind
from tether.tools.base import FileAccess, ToolContext, ToolError, ToolResult
from tether.tools.protected import check_protected, protected_write
from tether.tools.sandbox import DEFAULT_MAX_FILE_BYTES, Sandbox, format_size
from tether.tools.typed import ToolArguments, TypedTool
from tether.tools.writing import (
    MAX_DIFF_INPUT_BYTES,
    commit,
    count_lines,
    finish_once_started,
    inspect,
    proposal_sized,
    proposed,
    read_entry,
    text_before,
    too_large,
    unified_diff,
)


class WriteFileArguments(ToolArguments):
    path: str = Field(description="file to write, relative to the workspace root")
    content: str = Field(description="the whole new content of the file")


class WriteFile(TypedTool[WriteFileArguments]):
    def __init__(self, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        super().__init__(
            name="write_file",
            description=(
                "Create a workspace file, or replace its whole content, with the given text "
                "(missing parent directories are made); to change part of a file use edit_file."
            ),
            kind=ToolKind.EDIT,
            arguments_model=WriteFileArguments,
        )
        self.max_file_bytes = max_file_bytes

    async def call(self, args: WriteFileArguments, context: ToolContext) -> ToolResult:
        sandbox = Sandbox(context.workspace, max_file_bytes=self.max_file_bytes)
        files = context.files
        return await finish_once_started(
            write_file,
            sandbox,
            args.path,
            args.content,
            context.protected_approved,
            files,
            interrupt=files.interrupt if files is not None else None,
        )

    def protected(self, arguments: dict[str, Any], workspace: Path) -> str | None:
        return protected_write(workspace, self.parse(arguments).path)

    def proposed_change(
        self, arguments: dict[str, Any], workspace: Path, files: FileAccess | None
    ) -> ProposedChange | None:
        """The file's text now (none for a new file) and the content it would get."""
        args = self.parse(arguments)
        sandbox = Sandbox(workspace, max_file_bytes=self.max_file_bytes)
        real = sandbox.resolve_for_write(args.path)
        old = text_before(sandbox, args.path, real, files) if real.exists() else None
        return proposed(sandbox, real, old, proposal_sized(args.content, args.path))


def write_file(
    sandbox: Sandbox,
    path: str,
    content: str,
    protected_approved: bool = False,
    files: FileAccess | None = None,
) -> ToolResult:
    """Write ``content`` to ``path`` inside ``sandbox``; the result names what happened. A
    protected path is written only when ``protected_approved``. With ``files``, the current
    text is read and the final write made through it, after the same checks."""
    data = encode(content, "content")
    if len(data) > sandbox.max_file_bytes:
        raise too_large("the content", len(data), sandbox.max_file_bytes, "write")
    real = sandbox.resolve_for_write(path)
    check_protected(sandbox.root, real, approved=protected_approved)
    rel = sandbox.relative(real)
    with sandbox.open_parent(real, shown=path, create=True) as parent:
        info = inspect(parent, path)
        if info is not None:
            sandbox.check_links(info, path)
        old: bytes | None = None
        if info is not None and info.st_size <= MAX_DIFF_INPUT_BYTES:
            old = read_entry(parent, info, path, limit=MAX_DIFF_INPUT_BYTES)
        if files is not None and info is not None:
            current = files.read_text(real)
            if current is not None:
                old = encode(current, "the editor's text")
                old = old if len(old) <= MAX_DIFF_INPUT_BYTES else None
        if old == data:
            return ToolResult(f"{rel} already has this content: nothing was written")
        if files is None:
            commit(parent, data, shown=path, expect=info)
        else:
            files.write_text(real, as_text(data, path))
        made = [sandbox.relative(directory) for directory in parent.created]
    summary = f"{count_lines(data)} lines, {format_size(len(data))}"
    if info is None:
        message = f"created {rel} ({summary})"
    else:
        was = f"{count_lines(old)} lines" if old is not None else format_size(info.st_size)
        message = f"replaced {rel} ({summary}; it had {was})"
    if made:
        message += f"; made the directories {', '.join(made)}"
    too_large_to_diff = (info is not None and old is None) or len(data) > MAX_DIFF_INPUT_BYTES
    diff = None if too_large_to_diff else unified_diff(rel, old, data)
    if too_large_to_diff:
        message += " (too large to show a diff)"
    return ToolResult(message, diff=diff)


def as_text(data: bytes, shown: str) -> str:
    """``data`` as text for a :class:`FileAccess`, which takes valid Unicode only."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(
            f"{shown} would hold bytes that are not UTF-8 text, which the editor cannot write"
        ) from None


def encode(text: str, what: str) -> bytes:
    """``text`` as UTF-8; bytes that were read undecodable (as lone surrogates) come back."""
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raise ToolError(f"{what} is not valid Unicode text (it has a lone surrogate)") from None
