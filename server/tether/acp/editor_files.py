"""The editor's files as a tool backend: when the client declares ``fs.readTextFile``,
``read_file`` reads through ``fs/read_text_file``, so the model sees what the user sees, unsaved
changes included.

The path is checked as the built-in tool checks it (inside the workspace, symlinks resolved)
before the editor is asked; the text comes back numbered and capped as ``read_file`` gives it.
If the editor cannot answer (an error, a malformed answer), the file is read from the disk.
Writes stay with tether's own tools, which are atomic and refuse symlinks.
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
from tether.tools.text import split_lines

logger = logging.getLogger(__name__)

READ_FILE = "read_file"


class _ReadTextFileResponse(BaseModel):
    content: str


class EditorFiles:
    """A :class:`ToolExecutor` that sends ``read_file`` to the editor and the rest to ``inner``."""

    def __init__(self, inner: ToolExecutor, connection: Connection) -> None:
        self._inner = inner
        self._connection = connection

    def list(self) -> list[ToolSpec]:
        return self._inner.list()

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
            return ToolResult(numbered(split_lines(text), args))
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)

    async def _read(self, session_id: str, path: Path) -> str | None:
        """The editor's text of ``path``, or None when it gave none."""
        params = {"sessionId": session_id, "path": str(path)}
        try:
            answer = await self._connection.request("fs/read_text_file", params)
            return _ReadTextFileResponse.model_validate(answer).content
        except (ClientError, ConnectionError, ValidationError) as exc:
            logger.info("fs/read_text_file of %s failed (%s): reading the disk", path, exc)
            return None


def _file_in(workspace: Path, relative: str) -> Path:
    """``relative`` resolved inside ``workspace``; a ToolError for a path outside or a directory."""
    path = Sandbox(workspace).resolve(relative)
    if path.is_dir():
        raise ToolError(f"{relative} is a directory: use list_files to see what it holds")
    return path
