"""How ``tether run`` looks on a terminal, drawn with ``rich``.

The answer streams to stdout as plain text (styled lines only where stdout is a terminal), a
line per tool call with the kernel's title, the diff of each edit, and a status line on stderr
while the run works. The status line is drawn only at the start of a line and erased before
anything else is written, so the answer is never erased and nothing is glued to it, whether the
two streams share a screen or not.

Everything the model or a tool wrote is shown inert: its control characters are shown as their
escapes (``ESC`` as ``\x1b``), so no control sequence in it acts on the terminal (clipboard
writes with OSC 52, links with OSC 8, clearing or redrawing the screen, a carriage return that
writes over a line). The answer and the reasoning keep their line breaks and tabs
(:class:`InertStream`, which holds a carriage return that ends a streamed piece until the next
piece says whether it starts a line break); titles, errors, notes and diffs are one line each
(:func:`~tether.escapes.printable`). Other characters, wide and combined ones included, are shown
as they are.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from pathlib import Path
from typing import TextIO, assert_never

from rich.console import Console
from rich.control import Control
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import ControlType
from rich.text import Text

from tether.escapes import inert, printable
from tether.protocol.kernel import (
    CheckpointRecorded,
    CompactionFinished,
    CompactionStarted,
    HookRun,
    IterationFinished,
    IterationStarted,
    MessageDelta,
    Notice,
    PermissionParams,
    ProgressParams,
    RunFinished,
    RunResult,
    RunStarted,
    RunWarning,
    StopReason,
    ThoughtDelta,
    ToolCallStarted,
    ToolCallUpdate,
)
from tether.protocol.plans import Plan
from tether.protocol.tools import ProposedChange

_MARKS = {"completed": ("✓", "green"), "failed": ("✗", "red"), "cancelled": ("⊘", "yellow")}
_PLAN_MARKS = {
    "pending": ("[ ]", ""),
    "in_progress": ("[~]", "cyan"),
    "completed": ("[x]", "green"),
}
_LEVEL_STYLES = {"info": "", "warning": "yellow", "error": "red"}
_MAX_DIFF_LINES = 40
_ERASE_STATUS = Control((ControlType.CARRIAGE_RETURN,), (ControlType.ERASE_IN_LINE, 2))


def console(stream: TextIO) -> Console:
    """A console that prints text as given: no markup, emoji codes or guessed highlighting."""
    return Console(file=stream, highlight=False, markup=False, emoji=False, soft_wrap=True)


class TerminalView:
    """A run drawn on a terminal. With ``markdown`` (``tether chat``, stdout a terminal) the
    answer is rendered as Markdown block by block: the block being streamed (a paragraph, a list,
    a code block) is redrawn in place as it grows (``rich.live``, cut to the screen's height
    meanwhile), and once complete (at a blank line outside a code fence, or when anything else
    is drawn) it is printed whole and left alone: nothing above it is ever redrawn or erased."""

    def __init__(
        self, out: TextIO, err: TextIO, workspace: Path, *, markdown: bool = False
    ) -> None:
        self._out, self._err = console(out), console(err)
        self._blocks = MarkdownBlocks() if markdown else None
        # Markdown wraps its own lines to the width: a block redrawn in place must know its
        # height, and a soft-wrapped line would be cut at the edge instead
        self._rendered = Console(file=out, highlight=False, markup=False, emoji=False)
        self._streaming: Live | None = None  # the Markdown block being streamed
        self._workspace = workspace
        self._live = self._err.is_terminal
        self._mid_line = False
        self._thinking = False  # a line of reasoning is open on stderr
        self._status_shown = False
        self._titles: dict[str, str] = {}  # tool call id -> its title
        self._explained: dict[str, str] = {}  # tool call id -> why it failed, said by the face
        self._answer = InertStream()
        self._reasoning = InertStream()

    def event(self, progress: ProgressParams) -> None:
        event = progress.event
        match event:
            case MessageDelta(text=text):
                self._message(text)
            case ThoughtDelta(text=text):
                self._thought(text)
            case ToolCallStarted():
                self._started_call(event)
            case ToolCallUpdate(status=status) if status in _MARKS:
                self._finished_call(event)
            case ToolCallUpdate():
                pass  # pending or running: the call's line is already shown
            case IterationStarted(iteration=iteration):
                self._status(f"iteration {iteration}")
            case RunWarning(message=message):
                self.note(f"tether: warning: {message}", "yellow")
            case Notice(level=level, message=message):
                self.note(f"tether: {level}: {message}", _LEVEL_STYLES[level])
            case Plan():
                self._plan(event)
            case RunStarted() | IterationFinished() | RunFinished():
                pass  # the run's end is drawn from its result (:meth:`result`)
            case CompactionStarted() | CompactionFinished():
                pass  # the summary is not part of the answer; the run goes on as before
            case HookRun(outcome="blocked", name=name, event=hook_event, message=message):
                self.note(f"tether: hook {name} blocked {hook_event}: {message or ''}", "yellow")
            case HookRun():
                pass  # ran through; a failed or timed-out hook also sends a notice
            case CheckpointRecorded():
                pass  # the files can be restored (session/rewind); nothing to show meanwhile
            case _:
                assert_never(event)

    def _started_call(self, event: ToolCallStarted) -> None:
        title = printable(event.title or event.name)
        self._titles[event.tool_call_id] = title
        self._line(Text.assemble(("→ ", "cyan"), title))
        self._status(f"running {title}")

    def result(self, result: RunResult) -> None:
        self._end_line()
        if result.stop_reason is not StopReason.END_TURN:
            self._err.print(f"[stopped: {result.stop_reason}]", style="yellow")
        spent = usage_line(result)
        if spent is not None:
            self._err.print(printable(spent), style="dim")

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
        preview = change_diff(params.diff) if params.diff is not None else None
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

    def _plan(self, plan: Plan) -> None:
        """The plan as a checklist, whole each time it changes."""
        self._line(Text("Plan:", style="bold"))
        for entry in plan.entries:
            mark, style = _PLAN_MARKS[entry.status]
            self._line(Text.assemble(("  ", ""), (f"{mark} ", style), printable(entry.content)))

    def explain_failure(self, tool_call_id: str, why: str) -> None:
        """Show ``why`` instead of the error the call ends with (the front end refused it, and
        knows better than the kernel's words for the model)."""
        self._explained[tool_call_id] = why

    def _finished_call(self, event: ToolCallUpdate) -> None:
        mark, style = _MARKS[event.status]
        title = self._titles.get(event.tool_call_id, event.tool_call_id)
        line = Text.assemble((f"{mark} ", style), title)
        error = self._explained.pop(event.tool_call_id, None) or event.error
        if error:
            line.append(f": {printable(error)}", style=style)
        self._line(line)
        if event.diff:
            self._out.print(diff_text(event.diff))

    def _answer_text(self, text: str) -> None:
        if text:
            self._write(text)
            self._mid_line = not text.endswith("\n")

    def _thought(self, text: str) -> None:
        """Reasoning, dimmed, on stderr and only when it is a terminal: never in the answer."""
        if not self._live:
            return
        if not self._thinking:
            self._end_line()
            self._thinking = True
        self._print_thought(self._reasoning.feed(text))

    def _print_thought(self, text: str) -> None:
        if text:
            with contextlib.suppress(OSError):
                self._err.print(Text(text, style="dim italic"), end="")

    def _end_thought(self) -> None:
        """Finish a partial line of the reasoning."""
        if self._thinking:
            self._thinking = False
            self._print_thought(self._reasoning.flush())
            with contextlib.suppress(OSError):
                self._err.print()

    def _message(self, text: str) -> None:
        shown = self._answer.feed(text)
        if self._blocks is None:
            self._answer_text(shown)
            return
        self._markdown(self._blocks.feed(shown))
        pending = self._blocks.pending()
        if pending.strip():
            self._stream_block(pending)

    def _markdown(self, blocks: list[str]) -> None:
        """Complete blocks of the answer, rendered (links not made clickable: their targets are
        the model's)."""
        for block in blocks:
            if self._streaming is not None:
                self._streaming.update(_markdown(block))
                self._streaming.vertical_overflow = "visible"
                self._streaming.stop()  # drawn whole one last time, and left as it is
                self._streaming = None
            else:
                self._clear_status()
                self._end_thought()
                self._rendered.print(_markdown(block))

    def _stream_block(self, text: str) -> None:
        if self._streaming is None:
            self._clear_status()
            self._end_thought()
            self._streaming = Live(
                console=self._rendered,
                auto_refresh=False,
                vertical_overflow="ellipsis",
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._streaming.start()
        self._streaming.update(_markdown(text), refresh=True)

    def _end_line(self) -> None:
        """Erase the status and finish a partial line of the answer or of the reasoning."""
        self._clear_status()
        self._end_thought()
        if self._blocks is not None:
            self._markdown(self._blocks.feed(self._answer.flush()) + self._blocks.flush())
        self._answer_text(self._answer.flush())
        if self._mid_line:
            self._write("\n")
            self._mid_line = False

    def _line(self, text: Text) -> None:
        self._end_line()
        self._out.print(text)

    def _write(self, text: str) -> None:
        self._clear_status()
        self._end_thought()
        self._out.file.write(text)
        self._out.file.flush()

    def _status(self, text: str) -> None:
        if not self._live or self._mid_line or self._streaming is not None:
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


def _markdown(text: str) -> Markdown:
    return Markdown(text, hyperlinks=False)


def usage_line(result: RunResult) -> str | None:
    """What the run used, and what it cost (or that its model has no known price); None when
    the provider reported no tokens."""
    usage = result.usage
    if usage is None or not (usage.input_tokens or usage.output_tokens):
        return None
    tokens = f"tokens: {usage.input_tokens:,} in, {usage.output_tokens:,} out"
    if usage.cost is not None:
        return f"{tokens} · ${usage.cost:.4f}"
    return f"{tokens} · cost unknown for {result.model or 'this model'}"


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


def change_diff(change: ProposedChange) -> str | None:
    """The unified diff of the change an edit proposes, for the person asked to allow it; None
    when it changes nothing."""
    old = change.old_text or ""
    if old == change.new_text and change.old_text is not None:
        return None
    before = f"a/{change.path}" if change.old_text is not None else "/dev/null"
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        change.new_text.splitlines(keepends=True),
        before,
        f"b/{change.path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines) or None


class InertStream:
    """Streamed text shown inert, piece by piece: its control characters are shown as their
    escapes, but for tabs and line breaks (LF, CRLF). A carriage return at the end of a piece
    is held until the next piece (or :meth:`flush`) says whether a line feed follows it, so a
    sequence split across two pieces never slips through."""

    def __init__(self) -> None:
        self._held_cr = False

    def feed(self, text: str) -> str:
        if self._held_cr:
            text, self._held_cr = "\r" + text, False
        if text.endswith("\r"):
            text, self._held_cr = text[:-1], True
        return inert(text)

    def flush(self) -> str:
        """What is held (a carriage return that nothing followed), shown as its escape."""
        if not self._held_cr:
            return ""
        self._held_cr = False
        return "\\r"


_FENCE = re.compile(r"^ {0,3}(```|~~~)")


class MarkdownBlocks:
    """Streamed Markdown (already inert) cut into the blocks that are complete: a block ends at a
    blank line outside a code fence. :meth:`flush` gives what is left at the message's end."""

    def __init__(self) -> None:
        self._lines: list[str] = []  # the complete lines of the block being streamed
        self._partial = ""
        self._fence: str | None = None  # the open fence's marker

    def feed(self, text: str) -> list[str]:
        blocks: list[str] = []
        *complete, self._partial = (self._partial + text).split("\n")
        for line in complete:
            if self._ends_block(line):
                blocks.append("\n".join(self._lines))
                self._lines = []
            elif line.strip() or self._lines:
                self._lines.append(line)
        return blocks

    def _ends_block(self, line: str) -> bool:
        fence = _FENCE.match(line)
        if fence is not None:
            marker = fence.group(1)
            if self._fence is None:
                self._fence = marker
            elif marker == self._fence:
                self._fence = None
        return self._fence is None and not line.strip() and bool(self._lines)

    def pending(self) -> str:
        """The block being streamed, as far as it has come."""
        return "\n".join([*self._lines, self._partial])

    def flush(self) -> list[str]:
        if self._partial.strip():
            self._lines.append(self._partial)
        text, self._lines, self._partial, self._fence = "\n".join(self._lines), [], "", None
        return [text] if text.strip() else []
