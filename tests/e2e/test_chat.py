"""``tether chat`` on a real pseudo-terminal, the real process with the scripted provider, its
screen kept by a terminal emulator (pyte). Keys are typed once the screen shows what a person
would wait for."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyte
import pytest

from .pty_terminal import PtyTerminal
from .test_kernel import call

CTRL_C, ESC = b"\x03", b"\x1b"


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    """A data directory (the store, the prompt history) and no user configuration of its own."""
    return {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


@pytest.fixture
def terminals() -> Iterator[list[PtyTerminal]]:
    started: list[PtyTerminal] = []
    yield started
    for terminal in started:
        terminal.close()


def chat(
    terminals: list[PtyTerminal],
    project: Path,
    environment: dict[str, str],
    turns: list[dict[str, Any]] | None,
    *options: str,
    argv: tuple[str, ...] = ("chat",),
) -> PtyTerminal:
    arguments = list(argv)
    if turns is not None:
        script = project.parent / f"script-{len(terminals)}.json"
        script.write_text(json.dumps(turns))
        arguments += ["--script", str(script)]
    terminal = PtyTerminal(
        [sys.executable, "-m", "tether", *arguments, *options],
        cwd=project,
        env=environment,
        lines=60,  # the whole conversation of a test on one screen
    )
    terminals.append(terminal)
    return terminal


def at_prompt(screen: list[str]) -> bool:
    """The prompt is drawn, empty, with the status line below it."""
    shown = [line for line in screen if line]
    return len(shown) >= 2 and shown[-2] == ">" and shown[-1].endswith(" tokens")


def say(terminal: PtyTerminal, text: str) -> None:
    terminal.wait_until(at_prompt, "the prompt")
    terminal.type(text.encode() + b"\r")


def session_of(screen: list[str]) -> str:
    banner = next(line for line in screen if line.startswith("tether chat: session "))
    return banner.split()[3]


def test_a_conversation_of_turns_with_an_edit_asked_with_its_diff_and_a_cancelled_turn(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    edit = call("c1", "edit_file", path="src/app.py", oldString="42", newString="43")
    turns = [
        {"text": "Hello, **I read code**.\n\n- one\n- two\n"},
        {"text": "Changing it.", "toolCalls": [edit]},
        {"text": "Done: main returns 43."},
        {"text": "Thinking about it", "delay": 60},
    ]
    terminal = chat(terminals, project, environment, turns, "--model", "demo-model")
    screen = terminal.wait_until(at_prompt, "the prompt")
    assert screen[-1] == "demo-model · 0 tokens"

    say(terminal, "hi")
    terminal.wait_for("• two")
    say(terminal, "Make main return 43.")
    asked = terminal.wait_for("[N] Reject:")
    question = next(i for i, line in enumerate(asked) if line.startswith("? Allow Edit"))
    assert asked[question - 5 : question] == [
        "+++ b/src/app.py",
        "@@ -1,2 +1,2 @@",
        " def main():",
        "-    return 42",
        "+    return 43",
    ]
    terminal.type(b"y")
    terminal.wait_for("Done: main returns 43.")
    assert (project / "src" / "app.py").read_text() == "def main():\n    return 43\n"

    say(terminal, "And then?")
    terminal.wait_for("Thinking")
    terminal.type(CTRL_C)
    terminal.wait_for("[stopped: cancelled]")
    terminal.wait_until(at_prompt, "the prompt after the cancelled turn")
    terminal.type(CTRL_C)
    terminal.wait_for("(Ctrl-C again to leave, or /exit)")
    terminal.type(CTRL_C)
    assert terminal.wait() == 0

    shown = [line for line in terminal.lines() if line]
    said = shown.index("> hi")
    assert shown[said : said + 4] == ["> hi", "Hello, I read code.", " • one", " • two"]
    made = shown.index("✓ Edit src/app.py")
    assert shown[made - 1].endswith("[y] Allow  [a] Always allow  [N] Reject: y")
    assert shown[made + 1 : made + 3] == ["--- a/src/app.py", "+++ b/src/app.py"]
    assert shown[shown.index("> And then?") + 1 : -3] == [
        "Thinking",
        "cancelling…",
        "[stopped: cancelled]",
    ]


def test_undo_puts_back_the_files_of_the_last_turn_that_changed_them(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    edit = call("c1", "edit_file", path="src/app.py", oldString="42", newString="43")
    turns = [{"text": "Changing it.", "toolCalls": [edit]}, {"text": "Done."}]
    terminal = chat(terminals, project, environment, turns, "--approval", "auto")
    say(terminal, "Make main return 43.")
    terminal.wait_for("Done.")
    assert (project / "src" / "app.py").read_text() == "def main():\n    return 43\n"
    say(terminal, "/undo")
    terminal.wait_for(" • restored src/app.py")
    assert (project / "src" / "app.py").read_text() == "def main():\n    return 42\n"
    say(terminal, "/exit")
    assert terminal.wait() == 0


def test_esc_cancels_a_turn_and_the_chat_goes_on(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    turns = [{"text": "Thinking about it", "delay": 60}, {"text": "Still here."}]
    terminal = chat(terminals, project, environment, turns)
    say(terminal, "think")
    terminal.wait_for("Thinking")
    terminal.type(ESC)
    terminal.wait_for("[stopped: cancelled]")
    say(terminal, "again")
    terminal.wait_for("Still here.")
    say(terminal, "/exit")
    assert terminal.wait() == 0


def test_continue_goes_on_with_the_workspace_last_session_after_the_chat_ended(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    thought = "They want the answer.\nIt is 42.\nSay it plainly.\nNo more."
    first = chat(
        terminals, project, environment, [{"thinking": thought, "text": "The answer is 42."}]
    )
    say(first, "What is the answer?")
    first.wait_for("The answer is 42.")
    live = [line for line in first.lines() if line]
    said = live.index("> What is the answer?")
    assert live[said + 1 : said + 6] == [*thought.splitlines(), "The answer is 42."]
    say(first, "/exit")
    assert first.wait() == 0
    session_id = session_of(first.lines())

    again = chat(terminals, project, environment, [{"text": "Still 42."}], "--continue")
    screen = again.wait_until(at_prompt, "the prompt")
    assert session_of(screen) == session_id
    assert "you: What is the answer?" in screen
    # The answer after the reasoning that led to it, cut to its first lines as the answer is.
    recalled = screen.index("tether: The answer is 42.")
    assert screen[recalled - 4 : recalled] == [
        "tether thought: They want the answer.",
        "It is 42.",
        "Say it plainly.",
        "…",
    ]
    say(again, "Sure?")
    again.wait_for("Still 42.")
    say(again, "/cost")
    again.wait_for("tokens so far:")
    say(again, "/exit")
    assert again.wait() == 0

    resumed = chat(terminals, project, environment, None, "--resume", session_id)
    screen = resumed.wait_until(at_prompt, "the prompt")
    assert f"tether chat: session {session_id} (What is the answer?), 4 messages" in screen
    say(resumed, "/exit")
    assert resumed.wait() == 0


def test_resume_of_an_unknown_session_says_so(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    terminal = chat(terminals, project, environment, None, "--resume", "nope")
    assert terminal.wait() == 1
    assert "tether chat: there is no session nope in the session store" in terminal.text()
    assert "Traceback" not in terminal.text()


def test_slash_commands_complete_and_the_kernel_answers_its_own(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    terminal = chat(terminals, project, environment, [])
    terminal.wait_until(at_prompt, "the prompt")
    terminal.type(b"/pl")
    terminal.wait_for("Show the session's plan")  # the completion menu, with the description
    terminal.type(b"\t\r")
    terminal.wait_for("There is no plan yet")
    say(terminal, "/mode")
    terminal.wait_for("ask")
    say(terminal, "/model other-model")
    terminal.wait_for("model: other-model")
    assert terminal.wait_until(at_prompt, "the prompt")[-1] == "other-model · 0 tokens"
    say(terminal, "/help")
    terminal.wait_for("  /cost  The tokens this chat has spent so far")  # after the kernel's
    say(terminal, "/fork")
    terminal.wait_for("(a fork of ")
    say(terminal, "/sessions")
    terminal.wait_for("  2. ")
    say(terminal, "/exit")
    assert terminal.wait() == 0


def test_bare_tether_on_a_terminal_starts_a_chat(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    terminal = chat(terminals, project, environment, None, argv=())
    screen = terminal.wait_until(at_prompt, "the prompt")
    assert screen[-1] == "(no model configured) · 0 tokens"
    say(terminal, "/exit")
    assert terminal.wait() == 0


def test_a_long_answer_taller_than_the_screen_is_shown_whole_and_once(
    terminals: list[PtyTerminal], project: Path, environment: dict[str, str]
) -> None:
    words = " ".join(f"word{i}" for i in range(120))
    code = "\n".join(f"line {i}" for i in range(30))
    turns = [{"text": f"{words}\n\n```\n{code}\n```\n\nEnd."}]
    script = project.parent / "long.json"
    script.write_text(json.dumps(turns))
    terminal = PtyTerminal(
        [sys.executable, "-m", "tether", "chat", "--script", str(script)],
        cwd=project,
        env=environment,
        lines=20,
        columns=80,
    )
    terminals.append(terminal)
    say(terminal, "hi")
    terminal.wait_for("End.")
    say(terminal, "/exit")
    assert terminal.wait() == 0
    screen = pyte.HistoryScreen(80, 20, history=500)
    pyte.ByteStream(screen).feed(bytes(terminal.output))
    scrolled = ["".join(char.data for char in line.values()) for line in screen.history.top]
    lines = [line.strip() for line in [*scrolled, *screen.display] if line.strip()]
    said = lines.index("> hi")
    shown = lines[said + 1 : lines.index("End.")]
    assert " ".join(shown[:-30]) == words  # wrapped at the width, every word once
    assert shown[-30:] == code.splitlines()  # the code block once, though it outgrew the screen
