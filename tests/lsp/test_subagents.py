"""A ``task`` sub-agent in a ``tether.ask`` turn: its calls are asked about as the turn's are
(``window/showMessageRequest``), its writes go through the editor, and the transcript shows the
turn's own ``task`` call, not the sub-agent's events."""

from __future__ import annotations

import pytest

from .conftest import Server
from .test_language_server import answered

SCRIPT = [
    {"toolCalls": [{"id": "t1", "name": "task", "arguments": {"prompt": "write notes.txt"}}]},
    {"toolCalls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "hi\n"}}]},
    {"text": "Wrote the notes."},
    {"text": "All done."},
]


@pytest.mark.parametrize("script", [SCRIPT])
async def test_a_sub_agent_s_write_is_asked_about_and_made_through_the_editor(
    server: Server,
) -> None:
    _, transcript = await answered(server, "delegate the notes")
    [question] = server.editor.questions
    assert "Write notes.txt" in question["message"]
    assert len(server.editor.edits) == 1  # workspace/applyEdit, as for the turn's own writes
    assert "\n- Task: write notes.txt\n\nAll done.\n" in transcript
    assert "Write notes.txt" not in transcript  # the sub-agent's own call is its session's
