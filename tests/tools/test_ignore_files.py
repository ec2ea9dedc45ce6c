"""list_files and search_text leave out what .gitignore and .ignore files exclude, as ripgrep
does: nested files, negations, directory patterns, anchoring, precedence; and include it all
when asked to."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolContext, ripgrep
from tether.tools.ignores import MAX_IGNORE_FILE_BYTES

from .conftest import Call


@pytest.fixture
def context(engine_context: ToolContext) -> ToolContext:
    """Every test of this module runs on each search engine (``tools.search``)."""
    return engine_context


@pytest.fixture
def repo(workspace: Path) -> Path:
    files = {
        ".gitignore": "*.log\n!keep.log\nbuild/\n/top-only.txt\nsecret*\n",
        "app.py": "TOKEN = 1\n",
        "debug.log": "TOKEN in a log\n",
        "keep.log": "TOKEN kept\n",
        "top-only.txt": "TOKEN at the top\n",
        "build/out.py": "TOKEN built\n",
        "src/top-only.txt": "TOKEN deeper: the anchored pattern does not reach it\n",
        "src/secret.py": "TOKEN secret\n",
        "src/.gitignore": "!secret.py\ngenerated/\n",
        "src/generated/g.py": "TOKEN generated\n",
        "src/lib/.ignore": "*.tmp\n!notes.log\n",
        "src/lib/a.tmp": "TOKEN temp\n",
        "src/lib/notes.log": "TOKEN notes\n",
        "src/lib/other.log": "TOKEN other\n",
        "src/lib/code.py": "TOKEN code\n",
        "docs/.gitignore": "draft.md\n",
        "docs/.ignore": "!draft.md\n",  # .ignore wins over .gitignore in one directory
        "docs/draft.md": "TOKEN draft\n",
        "docs/old.md": "TOKEN old\n",
        "docs/.git-excluded.md": "TOKEN excluded\n",
        ".git/info/exclude": "docs/.git-excluded.md\n",
    }
    for rel, text in files.items():
        write(workspace, rel, text)
    return workspace


KEPT = [
    ".gitignore",
    "app.py",
    "docs/.gitignore",
    "docs/.ignore",
    "docs/draft.md",
    "docs/old.md",
    "keep.log",
    "src/.gitignore",
    "src/lib/.ignore",
    "src/lib/code.py",
    "src/lib/notes.log",
    "src/secret.py",
    "src/top-only.txt",
]


async def test_list_files_leaves_out_what_nested_ignore_files_exclude(call: Call, repo: Path):
    result = await call("list_files")
    assert not result.is_error
    assert result.content.splitlines() == KEPT


async def test_search_text_searches_only_the_files_that_are_not_ignored(call: Call, repo: Path):
    result = await call("search_text", {"pattern": "TOKEN"})
    found = sorted(line.split(":", 1)[0] for line in result.content.splitlines())
    assert found == [rel for rel in KEPT if not rel.endswith((".gitignore", ".ignore"))]


async def test_include_ignored_lists_and_searches_everything_but_the_skipped_dirs(
    call: Call, repo: Path
):
    listed = (await call("list_files", {"includeIgnored": True})).content.splitlines()
    assert {"debug.log", "build/out.py", "top-only.txt", "src/generated/g.py"} <= set(listed)
    assert {"src/lib/a.tmp", "src/lib/other.log", "docs/.git-excluded.md"} <= set(listed)
    assert not any(rel.startswith(".git/") for rel in listed)
    found = (await call("search_text", {"pattern": "TOKEN", "include_ignored": True})).content
    assert "build/out.py:1: TOKEN built" in found
    assert "src/generated/g.py:1: TOKEN generated" in found


async def test_a_walk_below_the_root_still_obeys_the_rules_of_the_directories_above(
    call: Call, repo: Path
):
    result = await call("list_files", {"path": "src/lib"})
    assert result.content.splitlines() == [
        "src/lib/.ignore",
        "src/lib/code.py",
        "src/lib/notes.log",
    ]
    inside = await call("list_files", {"path": "build"})
    assert inside.content == "no files"
    assert (await call("list_files", {"path": "build", "includeIgnored": True})).content == (
        "build/out.py"
    )


async def test_a_negation_cannot_reinclude_a_file_below_an_excluded_directory(
    call: Call, workspace: Path
):
    write(workspace, ".gitignore", "vendor/\n!vendor/keep.py\n")
    write(workspace, "vendor/keep.py", "x\n")
    write(workspace, "main.py", "x\n")
    assert (await call("list_files")).content.splitlines() == [".gitignore", "main.py"]


async def test_comments_blank_lines_and_escapes_follow_gitignore_syntax(
    call: Call, workspace: Path
):
    write(workspace, ".gitignore", "# a comment\n\n\\#hash.txt\n*.bak\n")
    for rel in ["#hash.txt", "a.bak", "# a comment", "kept.txt"]:
        write(workspace, rel, "x\n")
    assert (await call("list_files")).content.splitlines() == [
        "# a comment",
        ".gitignore",
        "kept.txt",
    ]


RULES = [
    "*.log",
    "!keep.log",
    "build/",
    "!build/keep.py",
    "/top.txt",
    "docs/**/draft*",
    "a/**/b",
    "\\!bang",
    "tmp?/",
    "[Ll]ib/*.so",
    "!lib/ok.so",
]
PATHS = [
    "x.log",
    "keep.log",
    "d/keep.log",
    "build/",
    "build/keep.py",
    "build/x/y.py",
    "src/build/",
    "src/build/a.c",
    "top.txt",
    "src/top.txt",
    "docs/a/b/draft1.md",
    "docs/draft.md",
    "a/b",
    "a/x/y/b",
    "a/x/y/b/",
    "!bang",
    "tmp1/",
    "tmp1/z",
    "lib/x.so",
    "Lib/x.so",
    "lib/ok.so",
    "plain.py",
]


@pytest.mark.parametrize("path", PATHS)
def test_the_walks_checks_decide_as_pathspec_does(path: str) -> None:
    from pathspec import GitIgnoreSpec

    from tether.tools.ignores import Rules

    expected = GitIgnoreSpec.from_lines(RULES).check_file(path).include
    assert Rules(RULES).decide(path) == expected


# --- ignore files no walk may read: each engine leaves them out and names them ----------------


HOSTILE = {
    "fifo": lambda path: os.mkfifo(path),
    "/dev/zero": lambda path: path.symlink_to("/dev/zero"),
    "/dev/stdin": lambda path: path.symlink_to("/dev/stdin"),
    "link to a file": lambda path: path.symlink_to("rules.txt"),
    "huge": lambda path: path.write_text("*.log\n" + "#" * MAX_IGNORE_FILE_BYTES),
}


@pytest.fixture(params=list(HOSTILE), ids=list(HOSTILE))
def hostile(request: pytest.FixtureRequest, workspace: Path) -> str:
    """``src/.gitignore``, of a kind no walk reads, over rules that would leave out a log; the
    kind."""
    write(workspace, "src/rules.txt", "*.log\n")
    write(workspace, "src/debug.log", "TOKEN logged\n")
    write(workspace, "src/deep/app.py", "TOKEN = 1\n")
    write(workspace, "other/b.py", "TOKEN = 2\n")
    HOSTILE[request.param](workspace / "src" / ".gitignore")
    return str(request.param)


def left_out_note(content: str) -> str:
    [note] = [line for line in content.splitlines() if line.startswith("[ignore files left out")]
    return note


async def test_list_files_leaves_out_an_ignore_file_no_walk_may_read(
    call: Call, hostile: str
) -> None:
    result = await asyncio.wait_for(call("list_files", {}), 5)
    lines = result.content.splitlines()
    regular = ["src/.gitignore"] if hostile == "huge" else []  # listed as any other file
    assert [line for line in lines if not line.startswith("[")] == [
        "other/b.py",
        *regular,
        "src/debug.log",
        "src/deep/app.py",
        "src/rules.txt",
    ]
    assert left_out_note(result.content).startswith(
        "[ignore files left out (their rules do not apply): src/.gitignore: "
    )


async def test_search_text_leaves_out_an_ignore_file_no_walk_may_read(
    call: Call, hostile: str
) -> None:
    result = await asyncio.wait_for(call("search_text", {"pattern": "TOKEN"}), 5)
    lines = result.content.splitlines()
    assert [line for line in lines if not line.startswith("[")] == [
        "other/b.py:1: TOKEN = 2",
        "src/debug.log:1: TOKEN logged",
        "src/deep/app.py:1: TOKEN = 1",
    ]
    assert "src/.gitignore: " in left_out_note(result.content)


async def test_a_walk_below_a_directory_with_such_an_ignore_file_leaves_it_out(
    call: Call, hostile: str
) -> None:
    result = await asyncio.wait_for(call("list_files", {"path": "src/deep"}), 5)
    assert result.content.splitlines()[0] == "src/deep/app.py"
    assert "src/.gitignore: " in left_out_note(result.content)


async def test_a_fifo_for_the_repositorys_exclude_file_is_left_out(
    call: Call, workspace: Path
) -> None:
    write(workspace, "a.log", "x")
    (workspace / ".git" / "info").mkdir(parents=True)
    os.mkfifo(workspace / ".git" / "info" / "exclude")
    result = await asyncio.wait_for(call("list_files", {}), 5)
    assert result.content.splitlines()[0] == "a.log"
    assert ".git/info/exclude: " in left_out_note(result.content)


@pytest.mark.parametrize("tool", ["list_files", "search_text"])
async def test_such_an_ignore_file_that_would_leave_out_all_of_its_directory_is_left_out(
    call: Call, workspace: Path, tool: str
) -> None:
    """No file of ``hidden/`` is listed if rg applies the linked file's rules: the ignore files
    rg opened are checked, not only those of the directories it listed files in."""
    write(workspace, "rules.txt", "*\n")
    write(workspace, "hidden/a.py", "TOKEN = 1\n")
    (workspace / "hidden" / ".ignore").symlink_to(workspace / "rules.txt")
    arguments = {"pattern": "TOKEN"} if tool == "search_text" else {}
    result = await asyncio.wait_for(call(tool, arguments), 5)
    assert result.content.splitlines()[0].startswith("hidden/a.py")
    assert "hidden/.ignore: " in left_out_note(result.content)


@pytest.fixture
def small_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rg``'s stderr pipe at its smallest (one page): the ``--debug`` log of the trees below
    fills it many times over, so the pipe is emptied while ``rg`` runs, not only at its end."""
    monkeypatch.setattr(ripgrep, "PIPE_BYTES", 4096)


def crowded(workspace: Path) -> None:
    """A tree whose ``rg --debug`` log runs to some 150 KB (a line for each skipped
    directory and binary file), with a symlinked ignore file among them."""
    for index in range(300):
        write(workspace, f"pkg{index:03d}/__pycache__/m.pyc", b"\x00")
        write(workspace, f"pkg{index:03d}/blob.bin", b"TOKEN\x00")
    write(workspace, "pkg150/rules.txt", "*.log\n")
    write(workspace, "pkg150/debug.log", "TOKEN logged\n")
    write(workspace, "pkg299/app.py", "TOKEN = 1\n")
    (workspace / "pkg150" / ".gitignore").symlink_to("rules.txt")


async def test_a_long_rg_log_through_a_small_pipe_loses_no_ignore_file(
    call: Call, workspace: Path, small_pipe: None
) -> None:
    crowded(workspace)
    result = await asyncio.wait_for(call("list_files", {"limit": 5000}), 30)
    lines = [line for line in result.content.splitlines() if not line.startswith("[")]
    assert len(lines) == 300 + 3 and "pkg150/debug.log" in lines
    assert left_out_note(result.content).startswith(
        "[ignore files left out (their rules do not apply): pkg150/.gitignore: "
    )


async def test_a_long_rg_log_through_a_small_pipe_loses_no_skip(
    call: Call, workspace: Path, small_pipe: None
) -> None:
    crowded(workspace)
    (workspace / "pkg150" / ".gitignore").unlink()
    write(workspace, "pkg150/.gitignore", "*.log\n")
    result = await asyncio.wait_for(call("search_text", {"pattern": "TOKEN"}), 30)
    assert result.content.splitlines() == [
        "pkg299/app.py:1: TOKEN = 1",
        "[skipped files: 300 binary]",
    ]
