"""The Markdown transcript of a session's turns started from the editor: the file the answer is
shown in (``window/showDocument``), under the session's data directory
(``<data home>/sessions/<session id>/transcript.md``). Each turn is appended to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tether.protocol.kernel import RunResult


def transcript_path(data_home: Path, session_id: str) -> Path:
    return data_home / "sessions" / session_id / "transcript.md"


@dataclass
class Turn:
    """What one turn showed: its prompt, the tool calls made, the answer."""

    title: str
    prompt: str
    started: datetime
    calls: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def markdown(self, result: RunResult | None, error: str | None = None) -> str:
        lines = [f"## {self.title} — {self.started:%Y-%m-%d %H:%M:%S} UTC", ""]
        lines += ["> " + line if line else ">" for line in self.prompt.split("\n")]
        lines.append("")
        if self.calls:
            lines += [f"- {call}" for call in self.calls]
            lines.append("")
        answer = result.response if result is not None and result.response else "".join(self.text)
        if answer:
            lines += [answer.rstrip(), ""]
        if error is not None:
            lines += [f"**Not done:** {error}", ""]
        elif result is not None and result.stop_reason != "end_turn":
            lines += [f"*Stopped: {result.stop_reason}.*", ""]
        return "\n".join(lines) + "\n"


def append_turn(path: Path, session_id: str, markdown: str) -> None:
    """Append a turn to the transcript, made with its heading when it is new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", encoding="utf-8") as out:
        if new:
            out.write(f"# tether — session {session_id}\n\n")
        out.write(markdown)
