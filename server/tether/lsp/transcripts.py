"""The Markdown transcript of a session's turns started from the editor, under the session's
data directory: ``<data home>/sessions/<session id>/transcript.md``, to which each turn is
appended.

What ``window/showDocument`` opens is a copy of it made at each answer,
``transcript-<run id>.md`` beside it (the copy of the answer before is removed): an editor that
has a document open does not read it again from the disk when it is shown once more (Neovim,
eglot), so the same file shown twice would show the first answer only.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import assert_never

from tether.kernel.approval import REJECTED_RESULT
from tether.protocol.kernel import (
    CheckpointRecorded,
    CompactionFinished,
    CompactionStarted,
    HookRun,
    IterationFinished,
    IterationStarted,
    MessageDelta,
    Notice,
    ProgressEvent,
    RunFinished,
    RunResult,
    RunStarted,
    RunWarning,
    StopReason,
    ThoughtDelta,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
)
from tether.protocol.plans import Plan

SHOWN_PREFIX = "transcript-"


def transcript_path(data_home: Path, session_id: str) -> Path:
    return data_home / "sessions" / session_id / "transcript.md"


@dataclass
class _Call:
    title: str
    outcome: str = ""  # "", "rejected", "failed: <why>", "cancelled"

    def markdown(self) -> str:
        return f"- {self.title}" + (f" — {self.outcome}" if self.outcome else "")


@dataclass
class Turn:
    """What one turn showed, in order: the text of each model call and the tool calls made."""

    title: str
    prompt: str
    started: datetime
    parts: list[list[str] | _Call] = field(default_factory=list)
    _calls: dict[str, _Call] = field(default_factory=dict)
    _message_id: str | None = None

    def add(self, event: ProgressEvent) -> None:
        """Keep what ``event`` shows of the turn."""
        match event:
            case MessageDelta(message_id=message_id, text=text):
                last = self.parts[-1] if self.parts else None
                if message_id != self._message_id or not isinstance(last, list):
                    self._message_id, last = message_id, []
                    self.parts.append(last)
                last.append(text)
            case ToolCallStarted(tool_call_id=call_id, name=name, title=title):
                call = self._calls[call_id] = _Call(title or name)
                self.parts.append(call)
            case ToolCallUpdate(tool_call_id=call_id, status=status, error=error):
                if call_id in self._calls:
                    self._calls[call_id].outcome = _outcome(status, error)
            case ThoughtDelta():
                pass  # the transcript keeps the answer, not the reasoning that led to it
            case RunStarted() | IterationStarted() | IterationFinished() | RunFinished():
                pass  # a model call's text is a paragraph of its own; the end is the result's
            case CompactionStarted() | CompactionFinished():
                pass  # a summary of older turns is not part of this one
            case RunWarning() | Notice():
                pass  # not part of the turn: a notice is told with window/showMessage
                # (lsp/runs.py), a workspace file left out once by App.warn
            case HookRun():
                pass  # a block shows as the call's failure; a failed hook sends a notice
            case CheckpointRecorded():
                pass  # the turn's edits are listed with its calls; `tether.undo` restores them
            case Plan():
                pass  # the plan is the session's, not the turn's: session/get gives it
            case _:
                assert_never(event)

    @property
    def text(self) -> str:
        """The text the model wrote in this turn, a paragraph per model call."""
        texts = ("".join(part).strip() for part in self.parts if isinstance(part, list))
        return "\n\n".join(text for text in texts if text)

    def markdown(self, result: RunResult | None, error: str | None = None) -> str:
        """The turn as a section of the transcript: its prompt quoted, then what the model
        wrote (a paragraph per model call) and the calls it made, in their order."""
        blocks = [f"## {self.title} — {self.started:%Y-%m-%d %H:%M:%S} UTC"]
        blocks.append("\n".join("> " + line if line else ">" for line in self.prompt.split("\n")))
        calls: list[str] = []
        wrote = False
        for part in self.parts:
            if isinstance(part, _Call):
                calls.append(part.markdown())
                continue
            text = "".join(part).strip()
            if text:
                blocks += ["\n".join(calls), text] if calls else [text]
                calls, wrote = [], True
        if calls:
            blocks.append("\n".join(calls))
        if not wrote and result is not None and result.response:  # a provider that streams none
            blocks.append(result.response.strip())
        if error is not None:
            blocks.append(f"**Not done:** {error}")
        elif result is not None and result.stop_reason != StopReason.END_TURN:
            blocks.append(f"*Stopped: {result.stop_reason}.*")
        return "\n\n".join(blocks) + "\n\n"


def _outcome(status: ToolCallStatus, error: str | None) -> str:
    if status == ToolCallStatus.FAILED:
        if error == REJECTED_RESULT:
            return "rejected"
        return "failed" + (f": {error.strip().splitlines()[0]}" if error and error.strip() else "")
    if status == ToolCallStatus.CANCELLED:
        return "cancelled"
    return ""


def append_turn(path: Path, session_id: str, markdown: str, run_id: str) -> Path:
    """Append a turn to the transcript (made with its heading when it is new); the copy of it
    to show, a new document at each answer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", encoding="utf-8") as out:
        if new:
            out.write(f"# tether — session {session_id}\n\n")
        out.write(markdown)
    shown = path.with_name(f"{SHOWN_PREFIX}{run_id}.md")
    for old in path.parent.glob(f"{SHOWN_PREFIX}*.md"):
        old.unlink(missing_ok=True)
    shutil.copyfile(path, shown)
    return shown
