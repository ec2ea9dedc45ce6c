"""How ``tether run`` looks on a terminal, drawn with ``rich``.

The answer streams to stdout as plain text (styled lines only where stdout is a terminal), a
line per tool call with the kernel's title, the diff of each edit, and a status line on stderr
while the run works. The status line is drawn only at the start of a line and erased before
anything else is written, so the answer is never erased and nothing is glued to it, whether the
two streams share a screen or not.
"""

from __future__ import annotations

import contextlib
import difflib
from pathlib import Path
from typing import Any, TextIO

import orjson
from rich.console import Console
from rich.control import Control
from rich.segment import ControlType
from rich.text import Text

from tether.protocol.kernel import (
    IterationStarted,
    MessageDelta,
    Notice,
    PermissionParams,
    ProgressParams,
    RunResult,
    RunWarning,
    StopReason,
    ThoughtDelta,
    ToolCallStarted,
    ToolCallUpdate,
)
from tether.repofiles import RepoFileError, read_repo_file

_MARKS = {"completed": ("✓", "green"), "failed": ("✗", "red"), "cancelled": ("⊘", "yellow")}
_LEVEL_STYLES = {"info": "", "warning": "yellow", "error": "red"}
_MAX_DIFF_LINES = 40
_MAX_PREVIEW_BYTES = 1024 * 1024
_ERASE_STATUS = Control((ControlType.CARRIAGE_RETURN,), (ControlType.ERASE_IN_LINE, 2))


def console(stream: TextIO) -> Console:
    """A console that prints text as given: no markup, emoji codes or guessed highlighting."""
    return Console(file=stream, highlight=False, markup=False, emoji=False, soft_wrap=True)


class TerminalView:
    def __init__(self, out: TextIO, err: TextIO, workspace: Path) -> None:
        self._out, self._err = console(out), console(err)
        self._workspace = workspace
        self._live = self._err.is_terminal
        self._mid_line = False
        self._thinking = False  # a line of reasoning is open on stderr
        self._status_shown = False
        self._titles: dict[str, str] = {}  # tool call id -> its title

    def event(self, progress: ProgressParams) -> None:
        event = progress.event
        if isinstance(event, MessageDelta):
            self._write(event.text)
            self._mid_line = not event.text.endswith("\n")
        elif isinstance(event, ThoughtDelta):
            self._thought(event.text)
        elif isinstance(event, ToolCallStarted):
            title = printable(event.title or event.name)
            self._titles[event.tool_call_id] = title
            self._line(Text.assemble(("→ ", "cyan"), title))
            self._status(f"running {title}")
        elif isinstance(event, ToolCallUpdate) and event.status in _MARKS:
            self._finished_call(event)
        elif isinstance(event, IterationStarted):
            self._status(f"iteration {event.iteration}")
        elif isinstance(event, RunWarning):
            self.note(f"tether: warning: {event.message}", "yellow")
        elif isinstance(event, Notice):
            self.note(f"tether: {event.level}: {event.message}", _LEVEL_STYLES[event.level])

    def result(self, result: RunResult) -> None:
        self._end_line()
        if result.stop_reason is not StopReason.END_TURN:
            self._err.print(f"[stopped: {result.stop_reason}]", style="yellow")

    def note(self, text: str, style: str = "") -> None:
        """A line on stderr, on a line of its own."""
        self._end_line()
        self._err.print(printable(text), style=style)

    def question(self, params: PermissionParams) -> None:
        """The permission question, with the change an edit would make, on stderr."""
        self._end_line()
        call = params.tool_call
        title = printable(call.title or f"{call.name} {call.arguments}")
        why = f" ({printable(params.reason)})" if params.reason else ""
        self._err.print()
        preview = proposed_diff(self._workspace, call.name, call.arguments)
        if preview:
            self._err.print(diff_text(preview))
        self._err.print(
            Text.assemble(
                ("? ", "bold yellow"),
                "Allow ",
                (title, "bold"),
                why,
                "?  [y] Allow  [a] Always allow  [N] Reject: ",
            ),
            end="",
        )

    def _finished_call(self, event: ToolCallUpdate) -> None:
        mark, style = _MARKS[event.status]
        title = self._titles.get(event.tool_call_id, event.tool_call_id)
        line = Text.assemble((f"{mark} ", style), title)
        if event.error:
            line.append(f": {printable(event.error)}", style=style)
        self._line(line)
        if event.diff:
            self._out.print(diff_text(event.diff))

    def _thought(self, text: str) -> None:
        """Reasoning, dimmed, on stderr and only when it is a terminal: never in the answer."""
        if not self._live:
            return
        if not self._thinking:
            self._end_line()
            self._thinking = True
        with contextlib.suppress(OSError):
            self._err.print(Text(printable_lines(text), style="dim italic"), end="")

    def _end_line(self) -> None:
        """Erase the status and finish a partial line of the answer or of the reasoning."""
        self._clear_status()
        if self._thinking:
            self._thinking = False
            with contextlib.suppress(OSError):
                self._err.print()
        if self._mid_line:
            self._write("\n")
            self._mid_line = False

    def _line(self, text: Text) -> None:
        self._end_line()
        self._out.print(text)

    def _write(self, text: str) -> None:
        if self._thinking:
            self._end_line()
        self._clear_status()
        self._out.file.write(text)
        self._out.file.flush()

    def _status(self, text: str) -> None:
        if not self._live or self._mid_line:
            return
        self._clear_status()
        with contextlib.suppress(OSError):
            self._err.print(Text(text, style="dim"), end="")
            self._status_shown = True

    def _clear_status(self) -> None:
        if self._status_shown:
            self._status_shown = False
            with contextlib.suppress(OSError):
                self._err.control(_ERASE_STATUS)


def diff_text(diff: str) -> Text:
    """A unified diff coloured line by line, cut to its first lines."""
    lines = diff.rstrip("\n").split("\n")
    text = Text()
    for line in lines[:_MAX_DIFF_LINES]:
        text.append(printable(line) + "\n", style=_diff_style(line))
    if len(lines) > _MAX_DIFF_LINES:
        text.append(f"… {len(lines) - _MAX_DIFF_LINES} more lines\n", style="dim")
    text.rstrip()
    return text


def _diff_style(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("@@"):
        return "cyan"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    return ""


def proposed_diff(workspace: Path, name: str, arguments: str) -> str | None:
    """The diff ``write_file`` or ``edit_file`` would make, for the person asked to allow it;
    None for other tools, a path outside the workspace, or a file that cannot be read as text."""
    try:
        args: Any = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    path = args.get("path") if isinstance(args, dict) else None
    if name not in ("write_file", "edit_file") or not isinstance(path, str):
        return None
    target = (workspace / path).resolve()
    if not target.is_relative_to(workspace.resolve()):
        return None
    current = _read_text(target, workspace)
    if current is None:
        return None
    new = _applied(name, args, current)
    if new is None or new == current:
        return None
    lines = difflib.unified_diff(
        current.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _read_text(path: Path, workspace: Path) -> str | None:
    """The text of a workspace file ("" when there is none), read as a repository's file (never
    a FIFO or a device); None when it cannot be."""
    try:
        data = read_repo_file(path, max_bytes=_MAX_PREVIEW_BYTES, inside=workspace)
        return "" if data is None else data.decode("utf-8")
    except (RepoFileError, UnicodeDecodeError):
        return None


def _applied(name: str, args: dict[str, Any], current: str) -> str | None:
    if name == "write_file":
        content = args.get("content")
        return content if isinstance(content, str) else None
    old, new = args.get("old_string"), args.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str) or not old or old not in current:
        return None
    return current.replace(old, new, -1 if args.get("replace_all") is True else 1)


def printable_lines(text: str) -> str:
    """:func:`printable`, keeping line breaks."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable(text: str) -> str:
    """``text`` with every control character escaped, so what the model wrote cannot redraw the
    screen (a carriage return is valid JSON whitespace)."""
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode() for char in text
    )
