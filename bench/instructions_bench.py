"""What the instruction files (``AGENTS.md``) cost a run and a ``session/get``, in process.

Every run asks for its instructions. While no file changed, :meth:`InstructionLoader.cached`
answers from what was read before with one ``stat`` per place looked in, on the event loop; a
changed or new file is read by :meth:`InstructionLoader.load` on a thread (the hop, ~70 µs of
CPU, is what the cache spares). ``session/get`` adds the paths to the session's encoded JSON.

    .venv/bin/python bench/instructions_bench.py [--rounds 7] [--calls 20000]

Reported: the median over ``--rounds`` of the time per call (µs): the floor (``os.stat`` of
the same paths, nothing else); a workspace without any instruction file (the default
configuration looks in 2 places: the user's directory and the root); a user and a root
``AGENTS.md`` of 4 KiB; a turn 3 folders deep (5 places, 4 files); a cold ``load`` (a new
loader: every file read). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from tether.memory.instructions import InstructionLoader
from tether.sessions.store import with_instructions

NAMES = ["AGENTS.md"]
TEXT = "Run make test before you commit. Keep functions small.\n" * 75  # ~4 KiB


def per_call(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """The median over ``rounds`` of the µs one call of ``fn`` takes."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(times)


def _stats(paths: list[Path]) -> None:
    for path in paths:
        try:
            os.stat(path)
        except FileNotFoundError:
            pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tether-instructions-"))
    empty, full, user = base / "empty", base / "full", base / "user"
    deep = full / "a" / "b" / "c"
    for folder in (empty, deep, user):
        folder.mkdir(parents=True)
    for folder in (user, full, full / "a", deep):
        (folder / "AGENTS.md").write_text(TEXT)
    loader = InstructionLoader(user)
    bare = InstructionLoader(base / "nowhere")
    loader.load(full, deep, NAMES)
    bare.load(empty, None, NAMES)
    assert loader.cached(full, deep, NAMES) is not None
    missing = [base / "nowhere" / "AGENTS.md", empty / "AGENTS.md"]
    present = [folder / "AGENTS.md" for folder in (user, full, full / "a", full / "a" / "b", deep)]
    rows = [
        ("floor: os.stat of 2 missing", lambda: _stats(missing), args.calls),
        ("floor: os.stat of 5 files", lambda: _stats(present), args.calls),
        ("no AGENTS.md (2 stats)", lambda: bare.cached(empty, None, NAMES), args.calls),
        ("user + root AGENTS.md", lambda: loader.cached(full, None, NAMES), args.calls),
        ("a turn 3 folders deep", lambda: loader.cached(full, deep, NAMES), args.calls),
        (
            "cold load, 5 places",
            lambda: InstructionLoader(user).load(full, deep, NAMES),
            args.calls // 20,
        ),
        (
            "session/get: add the paths",
            lambda: with_instructions(b'{"sessionId":"x"}', ["/u/AGENTS.md", "AGENTS.md"]),
            args.calls,
        ),
    ]
    print(f"median of {args.rounds} rounds, µs per call")
    for name, fn, calls in rows:
        print(f"{name:30}{per_call(fn, calls, args.rounds):10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
