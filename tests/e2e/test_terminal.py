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
    screen = pyte.Screen(COLUMNS, LINES)
    pyte.ByteStream(screen).feed(bytes(output).replace(b"\n", b"\r\n"))
    return code, [line.rstrip() for line in screen.display]


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
    edit = call("c1", "edit_file", path="src/app.py", old_string="42", new_string="43")
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
