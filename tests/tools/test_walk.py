"""Globs over relative paths, and walks that stop when their caller is cancelled, after their
entry cap or their time budget, whatever the ignore files and globs."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.files import write
from tether.tools import ToolError
from tether.tools.ignores import MAX_IGNORE_FILE_BYTES, Rules
from tether.tools.timed_regex import TimedRegex, unbounded_repeats
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
        ("{a,b{c,d}}.txt", "bd.txt", True),
        ("{a,b{c,d}}.txt", "b.txt", False),
        ("{src,tests}/**/*.py", "tests/x/a.py", True),
        ("{src,tests}/**/*.py", "lib/a.py", False),
        ("{*.md,docs/*.txt}", "x/y/README.md", True),
        ("{*.md,docs/*.txt}", "docs/a.txt", True),
        ("{*.md,docs/*.txt}", "x/docs/a.txt", False),
        ("f{1..3}.txt", "f2.txt", True),
        ("f{1..3}.txt", "f4.txt", False),
        ("a\\{b,c}", "a{b,c}", True),
        ("a\\{b,c}", "ab", False),
    ],
)
def test_globs_match_relative_paths(pattern: str, path: str, matches: bool) -> None:
    assert Glob.compile(pattern).matches(path) is matches


@pytest.mark.parametrize(
    "pattern",
    ["", "[ab", "{a,b", "/etc/*", "../x", "{x,../y}", "{a,/b}", "a//b", "\x00", "{a,b}" * 11],
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


# --- bounds: hostile ignore files and globs -----------------------------------------------------

# Each ``**`` and ``*`` is an unbounded repeat: with ``re``, one match of this over a path of
# forty ``a`` segments backtracks for hours, holding the interpreter.
BACKTRACKING = "/".join(["**/a*"] * 8) + "/**/x"


def deep_tree(workspace: Path, depth: int = 40) -> str:
    """``a/a/…/a/y.txt``, ``depth`` directories deep; its path."""
    rel = "/".join(["a"] * depth) + "/y.txt"
    write(workspace, rel, "x")
    return rel


def test_backtracking_ignore_rules_and_globs_do_not_stall_a_walk(workspace: Path) -> None:
    write(workspace, ".gitignore", BACKTRACKING + "\n")
    rel = deep_tree(workspace)
    glob = Glob.compile(BACKTRACKING.replace("/x", "/y.txt"))
    walk = walk_files(workspace, workspace, glob=glob, max_entries=1000, stop=threading.Event())
    assert walk.complete
    assert [file.rel for file in walk.files] == [rel]


class GlobUntilTheDeadline(Glob):
    """A glob whose first match takes the rest of the walk's budget (as thousands of ignore
    rules or a backtracking pattern take it), whatever the machine's speed."""

    def matches(self, rel: str, deadline: float = math.inf) -> bool:
        while (left := deadline - time.monotonic()) >= 0:
            threading.Event().wait(left + 0.001)
        return super().matches(rel, deadline)


def test_a_walk_whose_matching_costs_more_than_its_budget_ends_at_it_and_says_so(
    workspace: Path,
) -> None:
    for n in range(20):
        write(workspace, f"src/f{n}.py", "")
    glob = GlobUntilTheDeadline.compile("*.py")  # matched on re: it cannot raise TimeoutError
    walk = walk_files(
        workspace, workspace, glob=glob, max_entries=10_000, stop=threading.Event(), budget=0.2
    )
    assert walk.stopped == "time"
    assert walk.scanned < 21
    [note] = walk.notes(max_entries=10_000, budget=0.2, what="the list is incomplete")
    assert note.startswith("[stopped after 0.2 s of walking")
    assert "narrow with path or glob" in note and "include_ignored" in note


def test_a_file_whose_pattern_is_stopped_at_the_deadline_stops_the_walk_incomplete(
    workspace: Path,
) -> None:
    """A timed pattern raises TimeoutError (an OSError) at the deadline: the file was not
    matched, so the walk is cut short, not complete without it."""
    write(workspace, "only.txt", "x")
    glob = GlobUntilTheDeadline.compile("**/o*n*l*y.txt")  # more than two repeats: timed
    walk = walk_files(
        workspace, workspace, glob=glob, max_entries=100, stop=threading.Event(), budget=0.2
    )
    assert (walk.stopped, walk.files) == ("time", [])


def test_a_pattern_with_many_repeats_runs_with_the_deadline() -> None:
    risky = TimedRegex(re.compile("^a*b*c*d$"))
    with pytest.raises(TimeoutError):
        risky.search("abcd", time.monotonic() - 1)
    assert risky.search("abcd", math.inf) == {}
    assert TimedRegex(re.compile("^a*b*$")).search("ab", time.monotonic() - 1) == {}


@pytest.mark.parametrize(
    ("pattern", "repeats"),
    [("^a*b+c?$", 2), (r"\*\+[*+]", 0), ("[]*]x*", 1), ("[^]*]x*", 1), ("a{2,}b{1,3}", 1)],
)
def test_unbounded_repeats_are_counted_outside_escapes_and_classes(
    pattern: str, repeats: int
) -> None:
    assert unbounded_repeats(pattern) == repeats


@pytest.mark.parametrize(
    "make",
    [
        lambda path: os.mkfifo(path),
        lambda path: path.symlink_to("/dev/zero"),
        lambda path: path.symlink_to("/dev/stdin"),
        lambda path: path.symlink_to("rules.txt"),  # a regular file, but through a link
        lambda path: path.write_text("x" * (MAX_IGNORE_FILE_BYTES + 1)),
    ],
    ids=["fifo", "/dev/zero", "/dev/stdin", "link to a file", "huge"],
)
def test_an_ignore_file_that_is_no_small_regular_file_is_left_out_and_named(
    workspace: Path, make: Any
) -> None:
    write(workspace, "src/rules.txt", "*.log\n")
    write(workspace, "src/debug.log", "x")
    make(workspace / "src" / ".gitignore")
    walk = walk_files(workspace, workspace, glob=None, max_entries=1000, stop=threading.Event())
    assert walk.complete
    assert "src/debug.log" in [file.rel for file in walk.files]
    [refused] = walk.ignore_files.refused
    assert refused.startswith("src/.gitignore: ")
    [note] = walk.notes(max_entries=1000, budget=10, what="the list is incomplete")
    assert note.startswith("[ignore files left out") and "src/.gitignore" in note


# --- filing patterns changes no decision ---------------------------------------------------------


def decide_by_every_pattern(lines: list[str], path: str) -> bool | None:
    """What the rules decide when every pattern is tried, last first (how walks decided before
    patterns were filed), lines pathspec refuses left out."""
    from pathspec import GitIgnoreSpec

    patterns = []
    for line in lines:
        with contextlib.suppress(ValueError):
            patterns += GitIgnoreSpec.from_lines([line]).patterns
    through_directory: bool | None = None
    for pattern in reversed(patterns):
        if pattern.include is None or pattern.regex is None:
            continue
        match = pattern.regex.search(path)
        if match is None:
            continue
        if match.groupdict().get("ps_d") is None:
            return pattern.include
        if through_directory is None:
            through_directory = pattern.include
    return through_directory


NAMES = ["a", "b", "build", "x.log", "y.tmp", "c.d.log", "log", ".env", "a]", "Log", "buld"]
LINES = st.sampled_from(
    [
        *NAMES,
        *(f"/{name}" for name in NAMES),
        *(f"{name}/" for name in NAMES),
        *(f"a/{name}" for name in NAMES),
        "*.log",
        "*.tmp",
        "*.d.log",
        "**/build",
        "build/**",
        "a/**/b",
        "*",
        "b*",
        "bu*ld",
        "x.*",
        "*log",
        "c.*.log",
        "*[gx]",
        "[Ll]og",
        "?.log",
        "[ab]",
        "[!a]",
        "a]",
        "\\!a",
        "a ",
        "# comment",
        "",
        "!",
    ]
)


@given(
    lines=st.lists(st.tuples(st.booleans(), LINES).map(lambda t: "!" * t[0] + t[1]), max_size=8),
    segments=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4),
    is_dir=st.booleans(),
)
def test_rules_filed_by_name_and_extension_decide_as_trying_every_pattern(
    lines: list[str], segments: list[str], is_dir: bool
) -> None:
    path = "/".join(segments) + ("/" if is_dir else "")
    assert Rules(lines).decide(path) == decide_by_every_pattern(lines, path)


def test_a_line_pathspec_refuses_is_left_out_and_the_others_apply(workspace: Path) -> None:
    write(workspace, ".gitignore", "!\n*.log\n")
    write(workspace, "a.log", "x")
    write(workspace, "a.py", "x")
    walk = walk_files(workspace, workspace, glob=None, max_entries=100, stop=threading.Event())
    assert [file.rel for file in walk.files] == [".gitignore", "a.py"]
