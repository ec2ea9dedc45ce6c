"""One ``rg`` that walks a directory and searches it: the fast pass of ``search_text``.

``rg --json --debug`` runs from the start directory with the walk's options
(:func:`tether.tools.ripgrep.walk_args`) and ``--max-filesize`` at the search's size cap, in
parallel and unsorted. What it writes is gathered here, by path (relative to the start):

- the raw JSON lines of each file's matches (parsed later, for the files that are shown only);
  rg writes each file's output at once, so a ``begin`` line names the file of the lines after it;
- from its debug and error lines on stderr (:class:`tether.tools.ripgrep.RgLog`): each file
  it left out as binary and where its first NUL is, each one over the size cap, each it could
  not read, and each ignore file it opened, checked as the Python walk checks them: one it must
  leave out means the pass is worthless (``unsafe``).

The ``rg`` is guarded as the walk's is (:class:`tether.tools.ripgrep.RgProcess`), so a FIFO or
a device read as an ignore file kills it (``unsafe``). A pass that finds more than
:data:`MAX_PASS_LINES` matching lines stops (``busy``): the caller searches in path order then,
which stops at the limit. A pass gathers and vets nothing by itself: the caller decides, in
path order, what is shown (:mod:`tether.tools.search_text`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from tether.tools.ripgrep import RgLog, RgProcess, Ripgrep, walk_args

MAX_PASS_LINES = 50_000
"""Matching lines one pass keeps; past them, it stops and the search runs in path order."""

Stopped = Literal["time", "stop", "unsafe", "busy"]


@dataclass
class Pass(RgLog):
    """What one pass found, by path relative to its start directory."""

    matches: dict[str, list[bytes]] = field(default_factory=dict)  # raw JSON "match" lines
    stopped: Stopped | None = None
    lines: int = 0
    matched: threading.Event = field(default_factory=threading.Event)  # set at the first match

    def paths(self) -> set[str]:
        """Every path the pass has something to say of."""
        return {*self.matches, *self.binary, *self.large, *self.unreadable}


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
    found: Pass | None = None,
) -> Pass:
    """Run one pass of ``rg`` (``options``: the pattern's) over ``start``, into ``found``."""
    found = Pass() if found is None else found
    if time.monotonic() >= deadline:
        found.stopped = "time"
        return found
    args = [
        *walk_args(include_ignored, parents=parents),
        "--json",
        "--debug",
        "--max-filesize",
        str(max_bytes),
        *options,
    ]
    args.remove("--no-messages")
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
        run.close()
    if run.killed is not None and found.stopped is None:
        found.stopped = run.killed
    if found.stopped is None and not found.ignore_files_clean(start):
        found.stopped = "unsafe"
    return found


def _read(run: RgProcess, found: Pass) -> None:
    current: list[bytes] = []
    for line in run.stdout:
        if line.startswith(b'{"type":"match"'):
            current.append(line)
            found.lines += 1
            if found.lines > MAX_PASS_LINES:
                found.stopped = "busy"
                run.kill()
                return
        elif line.startswith(b'{"type":"begin"'):
            current = found.matches.setdefault(_begun(line), [])
            found.matched.set()


_BEGIN = b'{"type":"begin","data":{"path":{"text":"'
_BEGIN_END = b'"}}}\n'


def _begun(line: bytes) -> str:
    """The path of a ``begin`` line: sliced out when it needs no unescaping (nearly always)."""
    if line.startswith(_BEGIN) and line.endswith(_BEGIN_END) and b"\\" not in line:
        return line[len(_BEGIN) : -len(_BEGIN_END)].decode().removeprefix("./")
    return path_of(orjson.loads(line)["data"]["path"])


def path_of(value: dict[str, str]) -> str:
    """A path of rg's JSON as the walk names it (bytes that are no UTF-8 as ``os.fsdecode``
    makes them)."""
    if "text" in value:
        return value["text"].removeprefix("./")
    import base64

    return os.fsdecode(base64.b64decode(value["bytes"])).removeprefix("./")


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
