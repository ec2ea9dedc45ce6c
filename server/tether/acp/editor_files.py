"""The editor's files as a tool backend: when the client declares ``fs.readTextFile``,
``read_file`` reads through ``fs/read_text_file``, so the model sees what the user sees, unsaved
changes included.

The path is checked as the built-in tool checks it (inside the workspace, symlinks resolved)
before the editor is asked; the text comes back numbered and capped as ``read_file`` gives it.
If the editor cannot answer (an error, a malformed answer), the file is read from the disk.

Writes stay with tether's own tools, which write the disk atomically and never follow a symlink
swapped in between the check and the write (a write by path through the editor could not promise
that). So when the editor's text differs from the disk's, the result says so: the model then
knows its edits apply to the file on disk.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from pydantic import BaseModel, ValidationError

from tether.acp.wire import ClientError, Connection
from tether.protocol.tools import ToolSpec
from tether.tools.base import ToolContext, ToolError, ToolExecutor, ToolResult
from tether.tools.read_file import ReadFileArguments, numbered
from tether.tools.sandbox import Sandbox
from tether.tools.text import decode, split_lines

logger = logging.getLogger(__name__)

READ_FILE = "read_file"
UNSAVED = (
    "[the editor has unsaved changes to this file, shown above; edit_file and write_file change "
    "the file on disk, which differs]"
)


class _ReadTextFileResponse(BaseModel):
    content: str


class EditorFiles:
    """A :class:`ToolExecutor` that sends ``read_file`` to the editor and the rest to ``inner``."""

    def __init__(self, inner: ToolExecutor, connection: Connection) -> None:
        self._inner = inner
        self._connection = connection

    def list(self) -> list[ToolSpec]:
        return self._inner.list()

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        return self._inner.protected(name, arguments, workspace)

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        if name != READ_FILE or all(spec.name != READ_FILE for spec in self._inner.list()):
            return await self._inner.execute(name, arguments, context)
        try:
            args = ReadFileArguments.model_validate_json(arguments)
        except ValidationError:  # the tool's own message says what is wrong
            return await self._inner.execute(name, arguments, context)
        try:
            path = await asyncio.to_thread(_file_in, context.workspace, args.path)
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        text = await self._read(context.session_id, path)
        if text is None:
            return await self._inner.execute(name, arguments, context)
        try:
            output = numbered(split_lines(text), args)
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        if await asyncio.to_thread(_on_disk, context.workspace, args.path) != text:
            output += f"\n{UNSAVED}"
        return ToolResult(output)

    async def _read(self, session_id: str, path: Path) -> str | None:
        """The editor's text of ``path``, or None when it gave none."""
        params = {"sessionId": session_id, "path": str(path)}
        try:
            answer = await self._connection.request("fs/read_text_file", params)
            return _ReadTextFileResponse.model_validate(answer).content
        except (ClientError, ConnectionError, ValidationError) as exc:
            logger.info("fs/read_text_file of %s failed (%s): reading the disk", path, exc)
            return None


def _on_disk(workspace: Path, relative: str) -> str | None:
    """The file's text on disk (None when it cannot be read as text)."""
    try:
        data = Sandbox(workspace).read_bytes(relative)
    except (ToolError, OSError):
        return None
    text, exact = decode(data)
    return text if exact else None


def _file_in(workspace: Path, relative: str) -> Path:
    """``relative`` resolved inside ``workspace``; a ToolError for a path outside or a directory."""
    path = Sandbox(workspace).resolve(relative)
    if path.is_dir():
        raise ToolError(f"{relative} is a directory: use list_files to see what it holds")
    return path
