"""``tether run`` on a real pseudo-terminal, its screen rendered by a terminal emulator (pyte)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pyte

from .test_kernel import call

COLUMNS, LINES = 100, 30


QUESTION_END = b"[N] Reject: "


def run_on_terminal(argv: list[str], answers: tuple[bytes, ...] = ()) -> tuple[int, list[str]]:
    """Run ``argv`` with stdin, stdout and stderr on one terminal; its exit code and the screen.
    Each permission question is answered with the next of ``answers``, typed once it is asked."""
    code, output = terminal_bytes(argv, answers)
    return code, render(output)


def render(output: bytes) -> list[str]:
    """The screen a terminal shows after ``output``."""
    screen = pyte.Screen(COLUMNS, LINES)
    pyte.ByteStream(screen).feed(output.replace(b"\n", b"\r\n"))
    return [line.rstrip() for line in screen.display]


def terminal_bytes(argv: list[str], answers: tuple[bytes, ...] = ()) -> tuple[int, bytes]:
    """:func:`run_on_terminal`'s run: the exit code and every byte written to the terminal."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = bytearray()
    pending = list(answers)
    try:
        while True:  # bounded by the test's timeout
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer is gone
                break
            if not chunk:
                break
            output += chunk
            if pending and output.count(QUESTION_END) > len(answers) - len(pending):
                os.write(controller, pending.pop(0))
        code = process.wait(timeout=30)
    finally:
        process.kill()
        os.close(controller)
    return code, bytes(output)


def test_tether_run_on_a_terminal_keeps_the_whole_answer_and_leaves_no_status(project: Path):
    script = project.parent / "terminal-script.json"
    turns = [
        {"text": "Let me look.", "toolCalls": [call("c1", "read_file", path="src/app.py")]},
        {"text": "main returns 42."},
    ]
    script.write_text(json.dumps(turns))
    argv = [sys.executable, "-m", "tether", "run", "What does main return?"]
    code, screen = run_on_terminal([*argv, "--workspace", str(project), "--script", str(script)])
    assert code == 0, "\n".join(screen)
    shown = [line for line in screen if line]
    assert shown == [
        "Let me look.",
        "→ Read src/app.py",
        "✓ Read src/app.py",
        "main returns 42.",
    ]


def test_an_edit_is_asked_with_its_diff_and_shown_with_it_once_made(project: Path):
    script = project.parent / "edit-script.json"
    edit = call("c1", "edit_file", path="src/app.py", oldString="42", newString="43")
    command = call("c2", "run_command", command=["true"])
    turns = [
        {"text": "Changing it.", "toolCalls": [edit]},
        {"toolCalls": [command]},
        {"text": "Done: main returns 43."},
    ]
    script.write_text(json.dumps(turns))
    argv = [sys.executable, "-m", "tether", "run", "Make main return 43."]
    argv += ["--workspace", str(project), "--script", str(script), "--approval", "ask"]
    code, screen = run_on_terminal(argv, answers=(b"y\r", b"n\r"))
    assert code == 0, "\n".join(screen)
    assert (project / "src" / "app.py").read_text() == "def main():\n    return 43\n"
    shown = [line for line in screen if line]
    asked = "? Allow Edit src/app.py?  [y] Allow  [a] Always allow  [N] Reject: y"
    proposed = ["--- a/src/app.py", "+++ b/src/app.py", "@@ -1,2 +1,2 @@", " def main():"]
    made = shown.index("✓ Edit src/app.py")
    assert shown[: made + 1] == [
        "Changing it.",
        "→ Edit src/app.py",
        *proposed,
        "-    return 42",
        "+    return 43",
        asked,
        "✓ Edit src/app.py",
    ]
    assert shown[made + 1 : made + 3] == ["--- a/src/app.py", "+++ b/src/app.py"]
    assert "+    return 43" in shown[made + 3 :]
    assert shown[-4:] == [
        "→ Run true",
        "? Allow Run true?  [y] Allow  [a] Always allow  [N] Reject: n",
        "✗ Run true: rejected by user",
        "Done: main returns 43.",
    ]


HOSTILE_ANSWER = (
    "Copied!\x1b]52;c; SGVsbG8=\x07 Go to \x1b]8;;https://e.example/\x1b\\docs\x1b]8;;\x1b\\ now.\n"
    "\x1b[2J\x1b[H all safe\rEVIL \x9b31m red\x07\n"
)


def test_tether_run_shows_control_sequences_from_the_model_inert(project: Path):
    script = project.parent / "hostile-script.json"
    turn = {"text": HOSTILE_ANSWER, "toolCalls": [call("c1", "read_file", path="\x1b[2Jx")]}
    script.write_text(json.dumps([turn, {"text": "Done."}]))
    argv = [sys.executable, "-m", "tether", "run", "Say it."]
    argv += ["--workspace", str(project), "--script", str(script)]
    code, output = terminal_bytes(argv)
    assert code == 0, output
    # but the terminal's own line ends and the status line erased (CR, erase in line)
    written = output.replace(b"\r\n", b"\n").replace(b"\r\x1b[2K", b"")
    for sequence in (b"\x1b]52", b"\x1b]8;", b"\x1b[2J", b"\x1b[H", b"\r", b"\x07", b"\xc2\x9b"):
        assert sequence not in written
    shown = [line for line in render(output) if line]
    assert shown[:2] == [
        "Copied!\\x1b]52;c; SGVsbG8=\\x07 Go to \\x1b]8;;https://e.example/\\x1b\\docs"
        "\\x1b]8;;\\x1b\\ now.",
        "\\x1b[2J\\x1b[H all safe\\rEVIL \\x9b31m red\\x07",
    ]
    assert shown[2:] == [
        "→ Read \\x1b[2Jx",
        "✗ Read \\x1b[2Jx: no such file or directory: \\x1b[2Jx",
        "Done.",
    ]


def test_tether_run_ends_with_the_tokens_and_says_when_the_model_has_no_known_price(
    project: Path,
):
    script = project.parent / "usage-script.json"
    turn = {"text": "Hi.", "usage": {"inputTokens": 1200, "outputTokens": 30}}
    script.write_text(json.dumps([turn]))
    argv = [sys.executable, "-m", "tether", "run", "Hello", "--model", "my-local-model"]
    code, screen = run_on_terminal([*argv, "--workspace", str(project), "--script", str(script)])
    assert code == 0, "\n".join(screen)
    shown = [line for line in screen if line]
    assert shown == ["Hi.", "tokens: 1,200 in, 30 out · cost unknown for my-local-model"]
