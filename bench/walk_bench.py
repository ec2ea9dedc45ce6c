"""What honouring ignore files costs a walk (``list_files``, ``search_text``): a synthetic tree
walked with and without its ``.gitignore``/``.ignore`` rules, and ripgrep's ``--files`` beside
it when it is installed. A report: nothing in it asserts a timing.

    .venv/bin/python bench/walk_bench.py [--dirs 400] [--files 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tether.tools.walk import walk_files

ROOT_RULES = "*.log\n!keep.log\nbuild/\n/top.txt\n*.tmp\ndist/\ncoverage/\n*.pyc\n.env\n*.bak\n"
NESTED_RULES = "generated/\n!important.tmp\n*.snap\n"


def make_tree(root: Path, dirs: int, files: int) -> None:
    """``dirs`` directories of ``files`` files each; every tenth holds a nested .gitignore, and
    a tenth of the files match some rule."""
    (root / ".gitignore").write_text(ROOT_RULES)
    for d in range(dirs):
        directory = root / f"pkg{d % 20}" / f"mod{d}"
        directory.mkdir(parents=True)
        if d % 10 == 0:
            (directory / ".gitignore").write_text(NESTED_RULES)
        for f in range(files):
            suffix = ".log" if f % 10 == 0 else ".py"
            (directory / f"file{f}{suffix}").write_text("x\n")


def timed(work: Callable[[], int], rounds: int) -> tuple[float, int]:
    work()  # warm the page cache
    times, count = [], 0
    for _ in range(rounds):
        start = time.perf_counter()
        count = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dirs", type=int, default=400)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp).resolve()
        make_tree(root, args.dirs, args.files)

        def walk(include_ignored: bool) -> Callable[[], int]:
            def run() -> int:
                found = walk_files(
                    root,
                    root,
                    glob=None,
                    max_entries=10_000_000,
                    stop=threading.Event(),
                    include_ignored=include_ignored,
                )
                return len(found.files)

            return run

        rows = [
            ("tether walk, includeIgnored", walk(True)),
            ("tether walk, ignore files honoured", walk(False)),
        ]
        rg = shutil.which("rg")
        if rg is not None:
            command = [rg, "--files", "--no-require-git", str(root)]
            rows.append(
                (
                    "ripgrep --files (a process)",
                    lambda: len(subprocess.run(command, capture_output=True).stdout.splitlines()),
                )
            )
        print(f"tree: {args.dirs} directories x {args.files} files; median of {args.rounds}")
        for label, work in rows:
            seconds, count = timed(work, args.rounds)
            print(f"{label:40} {seconds * 1000:8.1f} ms  {count:7d} files")


if __name__ == "__main__":
    main()
