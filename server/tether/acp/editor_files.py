"""The editor's files as a tool backend: when the client declares ``fs.readTextFile``,
``read_file`` reads through ``fs/read_text_file``, so the model sees what the user sees, unsaved
changes included.

The path is checked as the built-in tool checks it (inside the workspace, symlinks resolved)
before the editor is asked; the text comes back numbered and capped as ``read_file`` gives it.
If the editor cannot answer (an error, a malformed answer), the file is read from the disk.

When the client declares ``fs.writeTextFile``, ``write_file`` and ``edit_file`` run as always
(every check: workspace, symlinks, hard links, protected paths and their approval, sizes) with a
:class:`~tether.tools.base.FileAccess` that makes their final write a ``fs/write_text_file``
(so the editor applies it to its buffer, with its own undo) and reads the current text through
``fs/read_text_file`` when that is declared too. An error from the editor is the tool's error:
the disk is not written instead.

Each request has ``acp.request_timeout`` seconds to be answered. A ``read_file`` not answered in
time reads the disk; the read of an edit (the text it changes) not answered in time fails the
call, which writes nothing: the disk may lack the editor's unsaved changes, which a write made
from it would undo. A write not answered in time is the tool's error (saying the file may or may
not have been written). A call cancelled while it waits for the editor ends at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ValidationError

from tether.acp.wire import AcpWire, ClientError
from tether.protocol.tools import ProposedChange
from tether.tools.base import (
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolLayer,
    ToolResult,
)
from tether.tools.editor_requests import (
    Bound,
    EditorRequests,
    RequestWithdrawn,
    Unanswered,
    bounded_request,
)
from tether.tools.read_file import ReadFileArguments, numbered
from tether.tools.sandbox import Sandbox
from tether.tools.text import decode, split_lines

logger = logging.getLogger(__name__)

READ_FILE = "read_file"
DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds the editor has to answer (acp.request_timeout)
SETTING = "acp.request_timeout"
READ_TEXT_FILE = "fs/read_text_file"
WRITES = frozenset({"write_file", "edit_file"})
UNSAVED = (
    "[the editor has unsaved changes to this file, shown above; edit_file and write_file change "
    "the file on disk, which differs]"
)


class _ReadTextFileResponse(BaseModel):
    content: str


class EditorFiles(ToolLayer):
    """A :class:`ToolExecutor` that sends ``read_file`` to the editor (``read``), and the writes
    of ``write_file`` and ``edit_file`` (``write``); the rest goes to ``inner``. ``written`` gets
    the text of each file the editor wrote (by absolute path), for the diff shown of the call."""

    def __init__(
        self,
        inner: ToolExecutor,
        connection: AcpWire,
        *,
        read: bool = True,
        write: bool = False,
        written: Callable[[str], dict[str, str]] | None = None,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        super().__init__(inner)
        self.send = connection.request
        self._reads = read
        self._writes = write
        self._written = written
        self._bound = Bound(timeout, SETTING)

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        if name in WRITES and self._writes:
            return await self._inner.execute(name, arguments, self._through_editor(context))
        if (
            not self._reads
            or name != READ_FILE
            or all(spec.name != READ_FILE for spec in self._inner.list())
        ):
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
        if not self._writes:  # the model's writes go to the disk: say when the editor differs
            on_disk = await asyncio.to_thread(_on_disk, context.workspace, args.path)
            if on_disk != text:
                output += f"\n{UNSAVED}"
        return ToolResult(output)

    async def proposed_change(
        self, name: str, arguments: str, context: ToolContext
    ) -> ProposedChange | None:
        """An edit the editor makes proposes a change of the editor's text."""
        if name in WRITES and self._writes:
            context = self._through_editor(context)
        return await self._inner.proposed_change(name, arguments, context)

    def _through_editor(self, context: ToolContext) -> ToolContext:
        """``context`` whose file access (reads and the final write) is the editor's."""
        written = self._written(context.session_id) if self._written is not None else {}
        requests = EditorRequests(asyncio.get_running_loop(), self._bound.seconds, SETTING)
        access = _EditorAccess(requests, self, context.session_id, self._reads, written)
        return dataclasses.replace(context, files=access)

    async def _read(self, session_id: str, path: Path) -> str | None:
        """``read_file``'s text of ``path`` from the editor, or None (the disk is read) when
        it answers an error, a malformed answer, or nothing in time."""
        params = {"sessionId": session_id, "path": str(path)}
        try:
            answer = await bounded_request(self.send, READ_TEXT_FILE, params, self._bound)
        except (ClientError, ConnectionError, Unanswered) as exc:
            logger.info("%s of %s failed (%s): reading the disk", READ_TEXT_FILE, path, exc)
            return None
        return _text_of(answer, path)


class _EditorAccess:
    """A :class:`~tether.tools.base.FileAccess` through the editor, called from the tool's
    thread: each request runs on the loop and the thread waits for its answer (a bounded,
    interruptible wait: :class:`~tether.tools.editor_requests.EditorRequests`)."""

    def __init__(
        self,
        requests: EditorRequests,
        files: EditorFiles,
        session_id: str,
        reads: bool,
        written: dict[str, str],
    ) -> None:
        self._requests, self._files, self._session_id = requests, files, session_id
        self._reads, self._written = reads, written

    def read_text(self, path: Path) -> str | None:
        """The editor's text of the file an edit changes; None (the disk is read) when it
        answers an error. Not answered in time, the edit fails (:class:`RequestWithdrawn`)."""
        if not self._reads:
            return None
        params = {"sessionId": self._session_id, "path": str(path)}
        try:
            answer = self._requests.call(self._files.send, READ_TEXT_FILE, params)
        except (ClientError, ConnectionError) as exc:
            logger.info("%s of %s failed (%s): reading the disk", READ_TEXT_FILE, path, exc)
            return None
        except RequestWithdrawn as exc:
            raise ToolError(f"{exc}: {path} was not changed") from None
        return _text_of(answer, path)

    def write_text(self, path: Path, text: str) -> None:
        params = {"sessionId": self._session_id, "path": str(path), "content": text}
        try:
            self._requests.call(self._files.send, "fs/write_text_file", params)
        except RequestWithdrawn as exc:
            raise ToolError(
                f"{exc}: {path} may or may not have been written (read it to know)"
            ) from None
        except (ClientError, ConnectionError) as exc:
            raise ToolError(
                f"the editor did not write {path}: {exc}; the file was not changed"
            ) from None
        self._written[str(path)] = text

    def interrupt(self) -> None:
        self._requests.interrupt()


def _text_of(answer: object, path: Path) -> str | None:
    """The text of an ``fs/read_text_file`` answer (None, logged, when it is malformed)."""
    try:
        return _ReadTextFileResponse.model_validate(answer).content
    except ValidationError as exc:
        logger.info(
            "%s of %s gave a malformed answer (%s): reading the disk", READ_TEXT_FILE, path, exc
        )
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
