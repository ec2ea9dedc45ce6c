"""``edit_file``: replace an exact string of a workspace text file, checking it is unique."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from tether.protocol.tools import ProposedChange, ToolKind
from tether.tools.base import FileAccess, ToolContext, ToolError, ToolResult
from tether.tools.protected import check_protected, protected_write
from tether.tools.sandbox import DEFAULT_MAX_FILE_BYTES, Sandbox, format_size
from tether.tools.text import is_binary
from tether.tools.typed import ToolArguments, TypedTool
from tether.tools.write_file import as_text, encode
from tether.tools.writing import (
    MAX_DIFF_INPUT_BYTES,
    commit,
    finish_once_started,
    inspect,
    proposal_sized,
    proposed,
    read_entry,
    text_before,
    too_large,
    unified_diff,
)

MAX_SHOWN_DIFF_BYTES = 64 * 1024


class EditFileArguments(ToolArguments):
    path: str = Field(description="file to edit, relative to the workspace root")
    old_string: str = Field(
        min_length=1,
        description="exact text to replace, whitespace and indentation included; it must occur "
        "exactly once unless replaceAll is set",
    )
    new_string: str = Field(description="text to put in its place")
    replace_all: bool = Field(default=False, description="replace every occurrence")


class EditFile(TypedTool[EditFileArguments]):
    def __init__(self, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        super().__init__(
            name="edit_file",
            description=(
                "Replace an exact string in a workspace text file (it must occur once, or set "
                "replaceAll); returns the unified diff of the change."
            ),
            kind=ToolKind.EDIT,
            arguments_model=EditFileArguments,
        )
        self.max_file_bytes = max_file_bytes

    async def call(self, args: EditFileArguments, context: ToolContext) -> ToolResult:
        sandbox = Sandbox(context.workspace, max_file_bytes=self.max_file_bytes)
        files = context.files
        return await finish_once_started(
            edit_file,
            sandbox,
            args,
            context.protected_approved,
            files,
            interrupt=files.interrupt if files is not None else None,
        )

    def protected(self, arguments: dict[str, Any], workspace: Path) -> str | None:
        return protected_write(workspace, self.parse(arguments).path)

    def proposed_change(
        self, arguments: dict[str, Any], workspace: Path, files: FileAccess | None
    ) -> ProposedChange | None:
        """The file's text with the replacement made, as :func:`edit_file` would make it."""
        args = self.parse(arguments)
        sandbox = Sandbox(workspace, max_file_bytes=self.max_file_bytes)
        real = sandbox.resolve_for_write(args.path, must_exist=True)
        rel = sandbox.relative(real)
        old = text_before(sandbox, args.path, real, files)
        new, _ = replace(old, args, rel)
        return proposed(sandbox, real, old, proposal_sized(new, args.path))


def edit_file(
    sandbox: Sandbox,
    args: EditFileArguments,
    protected_approved: bool = False,
    files: FileAccess | None = None,
) -> ToolResult:
    """Apply ``args`` to a file inside ``sandbox``; the result is the diff of the change. A
    protected path is written only when ``protected_approved``. With ``files``, the current
    text is read and the final write made through it, after the same checks."""
    path = args.path
    if args.old_string == args.new_string:
        raise ToolError("oldString and newString are the same: there is nothing to change")
    real = sandbox.resolve_for_write(path, must_exist=True)
    check_protected(sandbox.root, real, approved=protected_approved)
    rel = sandbox.relative(real)
    with sandbox.open_parent(real, shown=path) as parent:
        info = inspect(parent, path)
        if info is None:
            raise ToolError(f"no such file or directory: {path}")
        sandbox.check_links(info, path)
        data = read_entry(parent, info, path, limit=sandbox.max_file_bytes)
        current = files.read_text(real) if files is not None else None
        if current is not None:
            data = encode(current, "the editor's text")
            if len(data) > sandbox.max_file_bytes:
                raise too_large(path, len(data), sandbox.max_file_bytes, "read")
        if is_binary(data):
            raise ToolError(
                f"{path} is a binary file ({format_size(len(data))}): edit_file edits text only"
            )
        text = data.decode("utf-8", errors="surrogateescape")  # undecodable bytes survive
        new_text, count = replace(text, args, rel)
        new_data = encode(new_text, "newString")
        if len(new_data) > sandbox.max_file_bytes:
            raise too_large(
                f"{path} after the edit", len(new_data), sandbox.max_file_bytes, "write"
            )
        if files is None:
            commit(parent, new_data, shown=path, expect=info)
        else:
            files.write_text(real, as_text(new_data, path))
    diff = unified_diff(rel, data, new_data)
    times = "1 occurrence" if count == 1 else f"{count} occurrences"
    message = f"edited {rel}: replaced {times}"
    if diff is None:
        too_large_to_diff = max(len(data), len(new_data)) > MAX_DIFF_INPUT_BYTES
        return ToolResult(f"{message} (too large to show a diff)" if too_large_to_diff else message)
    shown = diff
    if len(diff.encode()) > MAX_SHOWN_DIFF_BYTES:
        shown = diff.encode()[:MAX_SHOWN_DIFF_BYTES].decode(errors="ignore")
        shown += (
            f"\n[diff cut at {MAX_SHOWN_DIFF_BYTES // 1024} KiB: read the file to see the rest]"
        )
    return ToolResult(f"{message}\n{shown}", diff=diff)


def replace(text: str, args: EditFileArguments, rel: str) -> tuple[str, int]:
    """``text`` with the replacement made, and how many occurrences were replaced.

    A file with CRLF line ends is matched with the strings' LF line ends turned into CRLF when
    they do not match as given (models often write '\\n' for a file's '\\r\\n').
    """
    old, new = args.old_string, args.new_string
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r" not in old:
        old, new = old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")
        count = text.count(old)
    if count == 0:
        raise ToolError(
            f"oldString was not found in {rel}: it must match the file exactly, whitespace and "
            "indentation included (read the file again to see its current text)"
        )
    if count > 1 and not args.replace_all:
        raise ToolError(
            f"oldString occurs {count} times in {rel}: include more of the surrounding text to "
            "make it unique, or set replaceAll to replace every occurrence"
        )
    return text.replace(old, new), count
