"""Open buffers are the truth: the text a client syncs (``didOpen``/``didChange``) is what the file
tools read for those files, and a run started from the editor writes through
``workspace/applyEdit``, so its edits land in the editor's buffers with their undo.

The documents live in pygls's :class:`~pygls.workspace.Workspace` (incremental changes, UTF-16
positions), made here because tether answers ``initialize`` itself. The tools reach them
through :class:`~tether.tools.base.FileAccess`, the seam ACP's editor files use too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from pygls.uris import to_fs_path
from pygls.workspace import Workspace

from tether.tools.base import (
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolLayer,
    ToolResult,
)
from tether.tools.editor_requests import EditorRequests, RequestWithdrawn, Send

logger = logging.getLogger(__name__)

READS = frozenset({"read_file", "search_text"})
WRITES = frozenset({"write_file", "edit_file"})

DEFAULT_APPLY_EDIT_TIMEOUT = 30.0  # seconds: lsp.apply_edit_timeout


class Buffers:
    """The client's open documents by path, and the text of edits the client applied but has
    not reported back yet (clients debounce ``didChange``)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._applied: dict[str, str] = {}  # real path -> text written through applyEdit

    def text(self, path: Path) -> str | None:
        """The editor's text of ``path`` (absolute, resolved), or None when it is not open.
        Called from tools' threads: it only reads."""
        key = str(path)
        applied = self._applied.get(key)
        if applied is not None:
            return applied
        document = self._document(path)
        return None if document is None else document.source

    def paths(self) -> list[Path]:
        """The files of the open documents and of the edits not reported back yet."""
        opened = (_path_of(document.uri) for document in self.workspace.text_documents.values())
        return [*{*(Path(path) for path in self._applied), *filter(None, opened)}]

    def uri(self, path: Path) -> str:
        """The URI the client knows ``path`` by (its own spelling when the file is open)."""
        document = self._document(path)
        return document.uri if document is not None else path.as_uri()

    def applied(self, path: Path, text: str) -> None:
        self._applied[str(path)] = text

    def reported(self, uri: str) -> None:
        """The client told us about this document again: its own text is the truth now."""
        path = _path_of(uri)
        if path is not None:
            self._applied.pop(str(path), None)

    def _document(self, path: Path) -> Any:
        for document in list(self.workspace.text_documents.values()):
            if _path_of(document.uri) == path:
                return document
        return None


def _path_of(uri: str) -> Path | None:
    if not uri.startswith("file:"):
        return None
    local = to_fs_path(uri)
    if local is None:
        return None
    try:
        return Path(local).resolve()
    except (OSError, RuntimeError):
        return None


class BufferAccess:
    """A :class:`~tether.tools.base.FileAccess` over the client's buffers, for one call. Reads
    give the open buffer's text (None for a file that is not open: the disk is read). Writes,
    when ``apply_edit`` (which sends a request to the client) is given, become
    ``workspace/applyEdit`` requests made on ``loop`` while the tool's thread waits, ``timeout``
    seconds at most (``lsp.apply_edit_timeout``)."""

    def __init__(
        self,
        buffers: Buffers,
        loop: asyncio.AbstractEventLoop,
        apply_edit: Send | None = None,
        timeout: float = DEFAULT_APPLY_EDIT_TIMEOUT,
    ) -> None:
        self._buffers = buffers
        self._apply_edit = apply_edit
        self._requests = EditorRequests(loop, timeout, "lsp.apply_edit_timeout")

    def read_text(self, path: Path) -> str | None:
        return self._buffers.text(path)

    def open_paths(self) -> list[Path]:
        return self._buffers.paths()

    def interrupt(self) -> None:
        self._requests.interrupt()

    def write_text(self, path: Path, text: str) -> None:
        apply_edit = self._apply_edit
        if apply_edit is None:
            raise ToolError("the editor cannot apply edits; the file was not changed")
        current = self._buffers.text(path)
        if current is None:
            current = _disk_text(path)
        params = workspace_edit(self._buffers.uri(path), current, text, path.name)
        try:
            answer = self._requests.call(apply_edit, "workspace/applyEdit", params)
        except RequestWithdrawn as exc:
            raise ToolError(
                f"{exc}: the edit of {path} may or may not have been applied (read the file "
                "to know)"
            ) from None
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"the editor did not apply the edit to {path}: {exc}") from None
        if not isinstance(answer, dict) or answer.get("applied") is not True:
            reason = answer.get("failureReason") if isinstance(answer, dict) else None
            raise ToolError(
                f"the editor did not apply the edit to {path}"
                + (f": {reason}" if reason else "")
                + "; the file was not changed"
            )
        self._buffers.applied(path, text)


def _disk_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return None


def workspace_edit(uri: str, current: str | None, new: str, label: str) -> dict[str, Any]:
    """``workspace/applyEdit`` params that turn ``current`` into ``new``: the lines that differ
    are replaced (so the rest of the buffer, its marks and its undo stay); a file that does not
    exist (``current`` None) is created first."""
    if current is None:
        return {
            "label": f"tether: create {label}",
            "edit": {
                "documentChanges": [
                    {"kind": "create", "uri": uri, "options": {"ignoreIfExists": True}},
                    {
                        "textDocument": {"uri": uri, "version": None},
                        "edits": [{"range": _range(0, 0, 0, 0), "newText": new}],
                    },
                ]
            },
        }
    old, lines = current.split("\n"), new.split("\n")
    start, end = _common_lines(old, lines)
    if end:  # whole lines old[start:-end] become lines[start:-end]
        replaced = _range(start, 0, len(old) - end, 0)
        text = "".join(line + "\n" for line in lines[start : len(lines) - end])
    elif start:  # from the end of the last line kept to the end of the text
        replaced = _range(start - 1, _utf16(old[start - 1]), len(old) - 1, _utf16(old[-1]))
        text = "".join("\n" + line for line in lines[start:])
    else:
        replaced = _range(0, 0, len(old) - 1, _utf16(old[-1]))
        text = new
    return {
        "label": f"tether: edit {label}",
        "edit": {"changes": {uri: [{"range": replaced, "newText": text}]}},
    }


def _common_lines(old: list[str], new: list[str]) -> tuple[int, int]:
    """How many lines ``old`` and ``new`` share at their start, and then at their end."""
    limit = min(len(old), len(new))
    start = 0
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    return start, end


def _range(line: int, character: int, end_line: int, end_character: int) -> dict[str, Any]:
    return {
        "start": {"line": line, "character": character},
        "end": {"line": end_line, "character": end_character},
    }


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class BufferTools(ToolLayer):
    """A :class:`ToolExecutor` whose file tools see the client's buffers (``read_file``,
    ``search_text``, and the reads of ``edit_file``/``write_file``); with ``apply_edit`` (which
    sends a request to the client), the final write of ``edit_file``/``write_file`` goes through
    ``workspace/applyEdit`` too, each waiting ``timeout`` seconds at most for the answer."""

    def __init__(
        self,
        inner: ToolExecutor,
        buffers: Buffers,
        apply_edit: Send | None = None,
        timeout: float = DEFAULT_APPLY_EDIT_TIMEOUT,
    ) -> None:
        super().__init__(inner)
        self._buffers = buffers
        self._apply_edit = apply_edit
        self._timeout = timeout

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        if name in READS or (name in WRITES and self._apply_edit is not None):
            loop = asyncio.get_running_loop()
            access = BufferAccess(self._buffers, loop, self._apply_edit, self._timeout)
            context = dataclasses.replace(context, files=access)
        return await self._inner.execute(name, arguments, context)
