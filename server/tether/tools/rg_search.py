"""One ``rg`` that walks a directory and counts the matching lines of every file it searches:
the first pass of ``search_text`` on ripgrep.

``rg --count --stats --debug`` runs from the start directory with the walk's options
(:func:`tether.tools.ripgrep.walk_args`) and ``--max-filesize`` at the search's size cap, in
parallel and unsorted; with ``--max-count`` at the limit plus one, a count is at most that. What
it writes is gathered here, by path (relative to the start):

- on stdout, one ``path NUL count`` line per file with a matching line, then its statistics,
  which say how many files it searched (binary ones too): a search without a match costs no
  Python per file (``--include-zero`` would list every file, but costs rg half as much again);
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
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.tools.ripgrep import PIPE_BYTES, RgLog, RgProcess, Ripgrep, Stopped, walk_args

_SEARCHED = " files searched"


@dataclass
class Pass(RgLog):
    """What one pass found, by path relative to its start directory."""

    counts: dict[str, int] = field(default_factory=dict)  # of the files with matching lines
    searched: int | None = None  # files searched (binary ones too), once rg has said it
    stopped: Stopped | None = None

    def paths(self) -> set[str]:
        """Every path the pass has something to say of."""
        return {*self.counts, *self.binary, *self.large, *self.unreadable}

    def files(self, start: Path) -> int | None:
        """How many files the walk from ``start`` listed (as the Python walk counts them: an
        unreadable directory is no file); None when ``rg`` did not end."""
        if self.searched is None:
            return None
        unreadable = {rel for rel in self.unreadable if _regular(os.path.join(start, rel))}
        return self.searched + len(self.large | unreadable)


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


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
    args += ["--count", "--stats", "--null", "--with-filename", "--debug", *options]
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
    """Parse ``path NUL count`` lines, then the statistics. Split at the NULs: a count and its
    line end come first in each part after the first, and the rest of the part is the next
    path (which may hold a line end) or, in the last part, the statistics. Decoded once, not
    per path (surrogateescape decodes byte by byte: the same paths)."""
    parts = os.fsdecode(run.stdout.read()).split("\0")
    path = parts[0]
    for part in parts[1:]:
        count, _, rest = part.partition("\n")
        count = count.removesuffix("\r")  # --crlf ends rg's lines with CRLF
        if count.isascii() and count.isdigit():
            found.counts[path.removeprefix("./")] = int(count)
        path = rest
    for line in path.splitlines():
        if line.endswith(_SEARCHED) and line.split()[0].isdigit():
            found.searched = int(line.split()[0])


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
        while chunk := run.stdout.read1(PIPE_BYTES):
            count += chunk.count(b"\0")
    finally:
        run.close()
    return None if run.killed is not None else count
