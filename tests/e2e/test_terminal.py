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


def run_on_terminal(argv: list[str]) -> tuple[int, list[str]]:
    """Run ``argv`` with stdin, stdout and stderr on one terminal; its exit code and the screen."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = bytearray()
    try:
        while True:  # bounded by the test's timeout
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every writer is gone
                break
            if not chunk:
                break
            output += chunk
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
        '→ read_file {"path": "src/app.py"}',
        "✓ read_file",
        "main returns 42.",
    ]
