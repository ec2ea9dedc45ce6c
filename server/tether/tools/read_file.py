"""``read_file``: a text file of the workspace, with numbered lines, a line range and caps."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from tether.protocol.tools import ToolKind
from tether.tools.base import FileAccess, ToolContext, ToolError, ToolResult
from tether.tools.sandbox import DEFAULT_MAX_FILE_BYTES, Sandbox, format_size
from tether.tools.text import clip, decode, is_binary, split_lines
from tether.tools.typed import ToolArguments, TypedTool

MAX_OUTPUT_LINES = 2000
MAX_OUTPUT_BYTES = 256 * 1024
MAX_LINE_CHARS = 2000


class ReadFileArguments(ToolArguments):
    path: str = Field(description="file to read, relative to the workspace root")
    start_line: int | None = Field(
        default=None, ge=1, description="first line to return, 1-based (default: 1)"
    )
    end_line: int | None = Field(
        default=None, ge=1, description="last line to return, inclusive (default: the last)"
    )


class ReadFile(TypedTool[ReadFileArguments]):
    def __init__(self, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        super().__init__(
            name="read_file",
            description=(
                "Read a text file of the workspace (at most 2000 lines per call); each line comes "
                "prefixed with its 1-based number and a tab, which are not part of the file."
            ),
            kind=ToolKind.READ,
            arguments_model=ReadFileArguments,
        )
        self.max_file_bytes = max_file_bytes

    async def call(self, args: ReadFileArguments, context: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._read, args, context.workspace, context.files)

    def _read(
        self, args: ReadFileArguments, workspace: Path, files: FileAccess | None = None
    ) -> ToolResult:
        """The file's text; with ``files``, the text it gives (an editor's buffer) comes first."""
        sandbox = Sandbox(workspace, max_file_bytes=self.max_file_bytes)
        real = sandbox.resolve(args.path)
        if real.is_dir():
            raise ToolError(f"{args.path} is a directory: use list_files to see what it holds")
        current = files.read_text(real) if files is not None else None
        if current is not None:
            return ToolResult(numbered(split_lines(current), args))
        data = sandbox.read_bytes(args.path)
        if is_binary(data):
            raise ToolError(f"{args.path} is a binary file ({format_size(len(data))}): not shown")
        text, exact = decode(data)
        output = numbered(split_lines(text), args)
        if not exact:
            output += "\n[the file is not valid UTF-8: undecodable bytes are shown as \ufffd]"
        return ToolResult(output)


def numbered(lines: list[str], args: ReadFileArguments) -> str:
    """Lines ``start_line..end_line`` (clamped to the file), numbered, cut at the output caps."""
    total = len(lines)
    first = args.start_line or 1
    if args.end_line is not None and args.end_line < first:
        raise ToolError(f"endLine ({args.end_line}) is before startLine ({first})")
    if total == 0 and first == 1:
        return "(empty file)"
    if first > total:
        raise ToolError(f"startLine {first} is past the end of {args.path}: it has {total} lines")
    last = min(args.end_line or total, total)
    width = len(str(last))
    out: list[str] = []
    size = 0
    for number in range(first, min(last, first + MAX_OUTPUT_LINES - 1) + 1):
        line = f"{number:>{width}}\t{clip(lines[number - 1], MAX_LINE_CHARS)}"
        size += len(line.encode()) + 1
        if size > MAX_OUTPUT_BYTES and out:
            break
        out.append(line)
    shown = first + len(out) - 1
    if shown < last:
        out.append(
            f"[cut at line {shown} of {total}: a call returns at most {MAX_OUTPUT_LINES} lines "
            f"or {MAX_OUTPUT_BYTES // 1024} KiB; read on with startLine={shown + 1}]"
        )
    elif args.end_line is not None and args.end_line > total:
        out.append(f"[end of file: it has {total} lines]")
    return "\n".join(out)
