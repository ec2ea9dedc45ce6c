"""One ``rg`` that walks a directory and counts the matching lines of every file it searches:
the first pass of ``search_text`` on ripgrep.

``rg --count --include-zero --debug`` runs from the start directory with the walk's options
(:func:`tether.tools.ripgrep.walk_args`) and ``--max-filesize`` at the search's size cap, in
parallel and unsorted; with ``--max-count`` at the limit plus one, a count is at most that. What
it writes is gathered here, by path (relative to the start):

- on stdout, one ``path NUL count`` line per file it searched: how many there were, and the
  count of each that has a matching line (the others are only counted, at C speed: a search
  without a match costs no Python per file);
- on stderr (:class:`tether.tools.ripgrep.RgLog`): each file it left out as binary and where
  its first NUL is, each one over the size cap, each it could not read, and each ignore file
  it opened, checked as the Python walk checks them: one it must leave out means the pass is
  worthless (``unsafe``); so is an error of the pattern (``refused``: too large for rg).

The ``rg`` is guarded as the walk's is (:class:`tether.tools.ripgrep.RgProcess`), so a FIFO or
a device read as an ignore file kills it (``unsafe``). The caller judges the files in path
order and reads the lines of the matching ones it shows (:mod:`tether.tools.search_text`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.tools.ripgrep import RgLog, RgProcess, Ripgrep, Stopped, walk_args

# the end of the line of a file without a matching line (--crlf ends rg's lines with CRLF too)
_ZERO = (b"\x000\n", b"\x000\r\n")


@dataclass
class Pass(RgLog):
    """What one pass found, by path relative to its start directory."""

    counts: dict[str, int] = field(default_factory=dict)  # of the files with matching lines
    searched: int = 0  # files searched (the binary, large and unreadable ones are not)
    stopped: Stopped | None = None

    def paths(self) -> set[str]:
        """Every path the pass has something to say of."""
        return {*self.counts, *self.binary, *self.large, *self.unreadable}

    def files(self) -> int:
        """How many files the walk listed (as the Python walk counts them)."""
        return self.searched + len({*self.binary, *self.large, *self.unreadable})


def search_pass(
    rg: Ripgrep,
    start: Path,
    options: Sequence[str],
    *,
    include_ignored: bool,
    parents: bool,
    max_bytes: int,
    stop: threading.Event,
    deadline: float,
) -> Pass:
    """Run one pass of ``rg`` (``options``: the pattern's) over ``start``."""
    found = Pass()
    if time.monotonic() >= deadline:
        found.stopped = "time"
        return found
    args = [*walk_args(include_ignored, parents=parents), "--max-filesize", str(max_bytes)]
    args.remove("--no-messages")
    args += ["--count", "--include-zero", "--null", "--with-filename", "--debug", *options]
    run = RgProcess(
        rg,
        args,
        cwd=start,
        stop=stop,
        deadline=deadline,
        guard=not include_ignored,
        searching=True,
        on_stderr=found.on_line,
    )
    try:
        _read(run, found)
    finally:
        status, _ = run.close()
    found.stopped = run.killed
    if status == 2 and any("regex" in error.lower() for error in found.errors):
        found.stopped = "refused"
    elif found.stopped is None and not found.ignore_files_clean(start):
        found.stopped = "unsafe"
    return found


def _read(run: RgProcess, found: Pass) -> None:
    pending = b""
    while chunk := run.stdout.read1(1 << 16):
        data = pending + chunk
        end = data.rfind(b"\n") + 1
        complete, pending = data[:end], data[end:]
        lines = complete.count(b"\n")
        found.searched += lines
        if sum(complete.count(zero) for zero in _ZERO) == lines:
            continue
        for line in complete.split(b"\n"):
            line = line.removesuffix(b"\r")
            if line and not line.endswith(b"\x000"):
                path, _, count = line.rpartition(b"\0")
                found.counts[os.fsdecode(path).removeprefix("./")] = int(count)


def count_files(
    rg: Ripgrep,
    start: Path,
    *,
    include_ignored: bool,
    parents: bool,
    stop: threading.Event,
    budget: float,
) -> int | None:
    """How many files the walk of ``start`` lists (``rg --files``); None when it did not end
    in ``budget`` seconds or was stopped."""
    args = [*walk_args(include_ignored, parents=parents), "--files", "--null"]
    run = RgProcess(
        rg,
        args,
        cwd=start,
        stop=stop,
        deadline=time.monotonic() + budget,
        guard=not include_ignored,
    )
    count = 0
    try:
        while chunk := run.stdout.read1(1 << 16):
            count += chunk.count(b"\0")
    finally:
        run.close()
    return None if run.killed is not None else count
