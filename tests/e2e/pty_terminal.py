"""A program on a real pseudo-terminal, its screen kept by a terminal emulator (pyte) that answers
cursor position requests as a terminal does. Waits are on what the screen shows, with a timeout."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyte

_CPR = re.compile(rb"\x1b\[6n")


class PtyTerminal:
    """``argv`` with stdin, stdout and stderr on one terminal that is its controlling terminal."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        columns: int = 100,
        lines: int = 40,
    ) -> None:
        self.screen = pyte.Screen(columns, lines)
        self._stream = pyte.ByteStream(self.screen)
        self.output = bytearray()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._controller, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        self.process = subprocess.Popen(
            list(argv),
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(terminal)
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._controller], [], [], 0.2)
                if not ready:
                    if self._closed:
                        return
                    continue
                chunk = os.read(self._controller, 65536)
            except OSError:  # EIO: every writer is gone
                chunk = b""
            with self._changed:
                if not chunk:
                    self._closed = True
                    self._changed.notify_all()
                    return
                self.output += chunk
                self._stream.feed(chunk)
                for _ in _CPR.finditer(chunk):  # where the cursor is, as a terminal answers
                    row, column = self.screen.cursor.y + 1, self.screen.cursor.x + 1
                    os.write(self._controller, f"\x1b[{row};{column}R".encode())
                self._changed.notify_all()

    @contextmanager
    def held(self) -> Iterator[None]:
        """The screen, unchanged while the block runs (what arrives meanwhile waits)."""
        with self._lock:
            yield

    def lines(self) -> list[str]:
        with self._lock:
            return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def wait_for(self, text: str, *, timeout: float = 20, count: int = 1) -> list[str]:
        """The screen once ``text`` shows on it ``count`` times; fails with the screen after
        ``timeout`` seconds."""
        return self.wait_until(lambda screen: "\n".join(screen).count(text) >= count, text, timeout)

    def wait_until(
        self, shows: Callable[[list[str]], bool], what: str, timeout: float = 20
    ) -> list[str]:
        """The screen once ``shows(lines)`` holds; fails with the screen after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                screen = [line.rstrip() for line in self.screen.display]
                if shows(screen):
                    return screen
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    shown = "\n".join(screen)
                    raise AssertionError(f"{what} never showed; the screen:\n{shown}")
                self._changed.wait(left)

    def type(self, keys: bytes) -> None:
        os.write(self._controller, keys)

    def wait(self, timeout: float = 20) -> int:
        """The exit code, once the program has ended."""
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._closed = True
        self._reader.join(timeout=5)
        os.close(self._controller)
