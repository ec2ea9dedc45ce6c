"""A turn's section of the Markdown transcript, from the run's events."""

from __future__ import annotations

from datetime import datetime

from tests.events import every_progress_event
from tether.lsp.transcripts import Turn
from tether.protocol.kernel import RunResult, StopReason


def test_every_kind_of_event_is_kept_or_left_out_and_the_calls_keep_their_outcome() -> None:
    turn = Turn(title="Explain", prompt="Why?", started=datetime(2026, 1, 1))
    for event in every_progress_event():
        turn.add(event)
    result = RunResult(
        run_id="r", session_id="s", stop_reason=StopReason.END_TURN, response="", iterations=2
    )
    markdown = turn.markdown(result)
    assert turn.text == "Let me edit it.\n\nDone."
    assert "- Edit a.py\n- Run make — rejected\n- run_command — failed: exit 2\n" in markdown
    assert "- read_file — cancelled\n" in markdown
    assert "Looking at the file." not in markdown  # the reasoning
    assert "MCP server" not in markdown and "parser" not in markdown
