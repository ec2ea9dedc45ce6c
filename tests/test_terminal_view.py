"""What ``tether run`` draws, rendered by a terminal emulator (pyte), for event sequences a real
server does not easily produce on cue: reasoning, warnings, long diffs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyte

from tether.protocol.kernel import (
    IterationStarted,
    MessageDelta,
    Notice,
    ProgressParams,
    RunResult,
    RunWarning,
    StopReason,
    ThoughtDelta,
    ToolCallStarted,
    ToolCallUpdate,
    Usage,
)
from tether.protocol.plans import Plan, PlanEntry
from tether.protocol.tools import ProposedChange
from tether.terminal import MarkdownBlocks, TerminalView, change_diff, diff_text


class Screen(io.StringIO):
    """stdout and stderr of one terminal."""

    def isatty(self) -> bool:
        return True

    def lines(self) -> list[str]:
        screen = pyte.Screen(100, 30)
        pyte.Stream(screen).feed(self.getvalue().replace("\n", "\r\n"))
        return [line.rstrip() for line in screen.display if line.strip()]


def show(*events: Any, tty: bool = True) -> tuple[Screen, io.StringIO]:
    screen = Screen()
    err = screen if tty else io.StringIO()
    view = TerminalView(screen, err, Path.cwd())
    for seq, event in enumerate(events, 1):
        view.event(ProgressParams(session_id="s", run_id="r", seq=seq, event=event))
    return screen, err


def test_reasoning_is_shown_on_its_own_lines_and_the_status_never_stays():
    screen, _ = show(
        IterationStarted(iteration=1),
        ThoughtDelta(message_id="m", text="Looking at"),
        ThoughtDelta(message_id="m", text=" the code\nthen answering"),
        MessageDelta(message_id="m", text="It returns "),
        IterationStarted(iteration=2),
        MessageDelta(message_id="m", text="42."),
    )
    assert screen.lines() == ["Looking at the code", "then answering", "It returns 42."]


def test_reasoning_never_reaches_an_answer_that_is_not_on_a_terminal():
    out, err = io.StringIO(), io.StringIO()
    view = TerminalView(out, err, Path.cwd())
    for seq, event in enumerate(
        [ThoughtDelta(message_id="m", text="hmm"), MessageDelta(message_id="m", text="42")], 1
    ):
        view.event(ProgressParams(session_id="s", run_id="r", seq=seq, event=event))
    assert (out.getvalue(), err.getvalue()) == ("42", "")


def test_a_tool_line_ends_a_partial_answer_and_carries_the_title_and_the_error():
    screen, _ = show(
        MessageDelta(message_id="m", text="Trying"),
        ToolCallStarted(tool_call_id="c1", name="run_command", arguments="{}", title="Run make"),
        ToolCallUpdate(tool_call_id="c1", status="failed", error="exit 2\x1b[2K"),
        RunWarning(code=-32013, message="a broken .tether/config.toml was ignored"),
        Notice(message="MCP server 'gh' is not running (it failed to start: gone)"),
    )
    assert screen.lines() == [
        "Trying",
        "→ Run make",
        "✗ Run make: exit 2\\x1b[2K",
        "tether: warning: a broken .tether/config.toml was ignored",
        "tether: warning: MCP server 'gh' is not running (it failed to start: gone)",
    ]


def test_a_long_diff_is_cut_and_says_how_much_is_left():
    diff = "--- a/x\n+++ b/x\n@@ -1,60 +1,60 @@\n" + "".join(f"+line {n}\n" for n in range(60))
    text = diff_text(diff).plain.split("\n")
    assert len(text) == 41 and text[-1] == "… 23 more lines"


def test_the_question_shows_the_change_the_kernel_proposes_as_a_diff():
    new_file = change_diff(ProposedChange(path="n.txt", new_text="hi\n"))
    assert new_file is not None and new_file.startswith("--- /dev/null\n+++ b/n.txt\n")
    edit = change_diff(ProposedChange(path="a.txt", old_text="one\n", new_text="two\n"))
    assert edit is not None and "-one\n+two\n" in edit
    assert change_diff(ProposedChange(path="a.txt", old_text="same", new_text="same")) is None


def test_control_sequences_split_across_pieces_are_shown_inert_and_text_stays_whole():
    screen, _ = show(
        MessageDelta(message_id="m", text="漢字 👨‍👩‍👧 naïve\tok\x1b"),
        MessageDelta(message_id="m", text="]52;c;SGk=\x07 line\r"),
        MessageDelta(message_id="m", text="\nnext\r"),
        MessageDelta(message_id="m", text="over \x9b2J\x7f"),
        ToolCallStarted(tool_call_id="c1", name="x", arguments="{}", title="Run\u202e ls\nrm"),
        ToolCallUpdate(tool_call_id="c1", status="completed"),
    )
    written = screen.getvalue()
    assert "漢字 👨‍👩‍👧 naïve\tok\\x1b]52;c;SGk=\\x07 line\r\nnext\\rover \\x9b2J\\x7f\n" in written
    assert "\x1b]" not in written and "\x9b" not in written and "\x7f" not in written
    assert screen.lines()[-2:] == ["→ Run\\u202e ls\\nrm", "✓ Run\\u202e ls\\nrm"]


def test_a_carriage_return_that_ends_the_answer_or_the_reasoning_is_shown_not_obeyed():
    out, err = Screen(), Screen()
    view = TerminalView(out, err, Path.cwd())
    events = [
        ThoughtDelta(message_id="m", text="think\r"),
        MessageDelta(message_id="m", text="answer\r"),
    ]
    for seq, event in enumerate(events, 1):
        view.event(ProgressParams(session_id="s", run_id="r", seq=seq, event=event))
    view.note("end")
    assert out.getvalue() == "answer\\r\n"
    assert "think\\r" in err.lines()[0] and err.lines()[-1] == "end"


def test_a_plan_is_drawn_as_a_checklist_each_time_it_changes_with_its_text_inert():
    first = Plan(
        entries=[
            PlanEntry(content="Read the code", status="completed"),
            PlanEntry(content="Fix \x1b]52;c;evil\x07it", status="in_progress", priority="high"),
            PlanEntry(content="Test", status="pending"),
        ]
    )
    screen, _ = show(MessageDelta(message_id="m", text="Planning"), first)
    assert screen.lines() == [
        "Planning",
        "Plan:",
        "  [x] Read the code",
        "  [~] Fix \\x1b]52;c;evil\\x07it",
        "  [ ] Test",
    ]


def test_every_kind_of_event_is_drawn_or_left_out() -> None:
    from tests.events import every_progress_event

    screen, _ = show(*every_progress_event())
    lines = screen.lines()
    assert "tether: warning: the workspace config file was left out: bad key" in lines
    assert "tether: error: the MCP server 'x' did not start" in lines
    assert "→ Edit a.py" in lines and "✓ Edit a.py" in lines
    assert "✗ read_file" not in lines and "⊘ read_file" in lines
    assert "  [~] Run make" in lines
    assert lines[-1] == "Done."


def show_markdown(*pieces: str) -> tuple[list[str], str]:
    """The answer streamed in ``pieces`` as ``tether chat`` draws it: the screen, and every
    character written."""
    screen = Screen()
    view = TerminalView(screen, screen, Path.cwd(), markdown=True)
    for seq, piece in enumerate(pieces, 1):
        event = MessageDelta(message_id="m", text=piece)
        view.event(ProgressParams(session_id="s", run_id="r", seq=seq, event=event))
    view.result(RunResult(run_id="r", session_id="s", stop_reason="end_turn", iterations=1))
    return screen.lines(), screen.getvalue()


def test_a_markdown_answer_is_rendered_block_by_block_as_it_streams():
    lines, _ = show_markdown(
        "# Title\n\nSome **bold", "** text.\n", "\n```python\nx = 1\n", "\ny = 2\n```\n\n- a\n- b"
    )
    assert [line.strip() for line in lines] == [
        "Title",  # centred
        "Some bold text.",
        "x = 1",
        "y = 2",
        "• a",
        "• b",
    ]


def test_markdown_blocks_end_at_blank_lines_outside_code_fences():
    blocks = MarkdownBlocks()
    assert blocks.feed("one\ntwo\n\n```\na\n\nb\n") == ["one\ntwo"]
    assert blocks.pending() == "```\na\n\nb\n"
    assert blocks.feed("```\n\nlast") == ["```\na\n\nb\n```"]
    assert blocks.flush() == ["last"]
    assert blocks.flush() == []


def test_a_markdown_answer_is_shown_inert_and_its_links_are_not_made_clickable():
    hostile = "Copied!\x1b]52;c;SGVsbG8=\x07 [docs](https://e.example/) \x1b[2J\x9b31m\n\nnext\r"
    lines, written = show_markdown(hostile)
    for sequence in ("\x1b]52", "\x1b]8;", "\x1b[2J", "\x9b", "\x07"):
        assert sequence not in written
    assert lines[0].startswith("Copied!\\x1b]52;c;SGVsbG8=\\x07 docs")
    assert lines[-1] == "next\\r"


def finished(usage: Usage | None, model: str | None = "gpt-4o") -> list[str]:
    screen = Screen()
    view = TerminalView(io.StringIO(), screen, Path.cwd())
    view.result(
        RunResult(
            run_id="r",
            session_id="s",
            stop_reason=StopReason.END_TURN,
            iterations=1,
            usage=usage,
            model=model,
        )
    )
    return screen.lines()


def test_the_run_s_tokens_and_cost_are_shown_after_the_answer():
    lines = finished(Usage(input_tokens=12_000, output_tokens=700, cost=0.037))
    assert lines == ["tokens: 12,000 in, 700 out · $0.0370"]


def test_a_model_without_a_known_price_says_its_cost_is_unknown_not_free():
    lines = finished(Usage(input_tokens=12, output_tokens=7), model="my-local-model")
    assert lines == ["tokens: 12 in, 7 out · cost unknown for my-local-model"]


def test_a_run_without_tokens_shows_no_usage_line():
    assert finished(Usage()) == [] and finished(None) == []
