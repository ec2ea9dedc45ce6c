"""Globs over relative paths, and walks that stop when their caller is cancelled."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolError
from tether.tools.walk import Glob, run_in_thread, walk_files


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "deep/er/a.py", True),
        ("*.py", "a.pyc", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/x/a.py", False),
        ("src/**", "src/x/a.py", True),
        ("src/**/test_*.py", "src/test_a.py", True),
        ("src/**/test_*.py", "src/x/y/test_a.py", True),
        ("src/**/test_*.py", "lib/src/test_a.py", False),
        ("./src/*.py", "src/a.py", True),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("*.{ts,tsx}", "x/app.tsx", True),
        ("*.{ts,tsx}", "x/app.js", False),
        ("a\\*b", "a*b", True),
        ("a\\*b", "axb", False),
        ("file(1).txt", "file(1).txt", True),
        ("a+b.txt", "aab.txt", False),
        ("*/*.md", "docs/x.md", True),
        ("*/*.md", "x.md", False),
    ],
)
def test_globs_match_relative_paths(pattern: str, path: str, matches: bool) -> None:
    assert Glob.compile(pattern).matches(path) is matches


@pytest.mark.parametrize(
    "pattern", ["", "[ab", "{a,b", "{a,{b}}", "/etc/*", "../x", "a//b", "\x00"]
)
def test_malformed_globs_are_tool_errors(pattern: str) -> None:
    with pytest.raises(ToolError):
        Glob.compile(pattern)


def test_a_walk_stops_after_its_entry_cap(workspace: Path) -> None:
    for n in range(30):
        write(workspace, f"d{n % 3}/f{n}.txt", "x")
    walk = walk_files(workspace, workspace, glob=None, max_entries=10, stop=threading.Event())
    assert not walk.complete
    assert len(walk.files) < 10
    full = walk_files(workspace, workspace, glob=None, max_entries=100, stop=threading.Event())
    assert full.complete and len(full.files) == 30


def test_a_stopped_walk_returns_early(workspace: Path) -> None:
    write(workspace, "a/b.txt", "x")
    stop = threading.Event()
    stop.set()
    assert walk_files(workspace, workspace, glob=None, max_entries=100, stop=stop).files == []


async def test_cancelling_the_caller_sets_the_threads_stop_flag() -> None:
    started = threading.Event()
    stopped = threading.Event()

    def work(stop: threading.Event) -> None:
        started.set()
        if stop.wait(timeout=10):
            stopped.set()

    task = asyncio.create_task(run_in_thread(work))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 5)


async def test_a_finished_thread_returns_its_value() -> None:
    assert await run_in_thread(lambda stop: 42) == 42
