"""search_text: 'path:line: text' matches of a regex, skipping what cannot or should not be read."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from tests.files import needs_enforced_modes, write
from tether.tools import ToolContext, search_text
from tether.tools.search_text import MAX_LINE_CHARS, MAX_SEARCH_FILE_BYTES

from .conftest import Call


@pytest.fixture
def context(engine_context: ToolContext) -> ToolContext:
    """Every test of this module runs on each search engine (``tools.search``)."""
    return engine_context


@pytest.fixture
def tree(workspace: Path) -> Path:
    write(workspace, "src/app.py", "import os\n\ndef main():\n    return TODO\n")
    write(workspace, "src/util.py", "# todo: tidy\nVALUE = 1\n")
    write(workspace, "README.md", "Nothing TODO here.\n")
    write(workspace, ".git/HEAD", "TODO in git\n")
    write(workspace, "node_modules/m/index.js", "// TODO\n")
    return workspace


async def test_matches_come_as_path_line_text_in_path_order(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": "TODO"})
    assert not result.is_error
    assert result.content.splitlines() == [
        "README.md:1: Nothing TODO here.",
        "src/app.py:4:     return TODO",
    ]


async def test_ignore_case_matches_either_case(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": "todo", "ignoreCase": True, "glob": "*.py"})
    assert result.content.splitlines() == [
        "src/app.py:4:     return TODO",
        "src/util.py:1: # todo: tidy",
    ]


async def test_the_pattern_is_a_python_regex_matched_per_line(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": r"^def \w+\(\):$"})
    assert result.content.splitlines() == ["src/app.py:3: def main():"]


async def test_a_path_can_name_a_single_file(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": "=", "path": "src/util.py"})
    assert result.content.splitlines() == ["src/util.py:2: VALUE = 1"]


async def test_an_invalid_regex_is_an_error(call: Call, tree: Path) -> None:
    for pattern in ["(unclosed", "[z-a]", "*star", "a{2,1}"]:
        result = await call("search_text", {"pattern": pattern})
        assert result.is_error, pattern


async def test_an_empty_pattern_fails_validation(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": ""})
    assert result.is_error


async def test_a_bad_glob_is_an_error(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": "x", "glob": "[oops"})
    assert result.is_error


async def test_no_match_is_not_an_error(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": "no such text anywhere"})
    assert not result.is_error
    assert result.content.startswith("no matches")


async def test_the_limit_stops_the_search_with_a_note(call: Call, workspace: Path) -> None:
    write(workspace, "many.txt", "hit\n" * 50)
    result = await call("search_text", {"pattern": "hit", "limit": 10})
    lines = result.content.splitlines()
    assert lines[:10] == [f"many.txt:{n}: hit" for n in range(1, 11)]
    assert len(lines) == 11
    assert "limit" in lines[10]


async def test_exactly_limit_matches_has_no_note(call: Call, workspace: Path) -> None:
    write(workspace, "few.txt", "hit\n" * 3)
    result = await call("search_text", {"pattern": "hit", "limit": 3})
    assert len(result.content.splitlines()) == 3


async def test_binary_and_huge_files_are_skipped_and_counted(call: Call, workspace: Path) -> None:
    write(workspace, "blob.bin", b"needle\x00\x01\x02")
    write(workspace, "huge.txt", "needle\n" + "x" * MAX_SEARCH_FILE_BYTES)
    write(workspace, "small.txt", "needle\n")
    result = await call("search_text", {"pattern": "needle"})
    lines = result.content.splitlines()
    assert lines[0] == "small.txt:1: needle"
    assert "1 binary" in lines[1] and "1 over" in lines[1]
    assert len(lines) == 2


async def test_a_long_matching_line_is_clipped(call: Call, workspace: Path) -> None:
    write(workspace, "min.js", "needle" + "q" * (MAX_LINE_CHARS * 10) + "\n")
    result = await call("search_text", {"pattern": "needle"})
    assert len(result.content) < MAX_LINE_CHARS + 100


async def test_a_missing_path_is_an_error(call: Call, tree: Path) -> None:
    result = await call("search_text", {"pattern": "x", "path": "nope"})
    assert result.is_error


@needs_enforced_modes
async def test_unreadable_files_are_skipped_and_counted(call: Call, workspace: Path) -> None:
    write(workspace, "locked.txt", "needle").chmod(0)
    write(workspace, "open.txt", "needle")
    result = await call("search_text", {"pattern": "needle"})
    assert result.content.splitlines() == ["open.txt:1: needle", "[skipped files: 1 unreadable]"]


async def test_a_pattern_that_backtracks_without_end_is_stopped_and_the_loop_keeps_running(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_text, "TIME_BUDGET_SECONDS", 1.0)
    write(workspace, "evil.txt", "a" * 60 + "b\n")
    if call.context.search == "ripgrep":  # a finite automaton: no backtracking to stop
        result = await call("search_text", {"pattern": "(a|aa)+$"})
        assert result.content == "no matches in 1 files"
        return
    search = asyncio.ensure_future(call("search_text", {"pattern": "(a|aa)+$"}))
    ticked = asyncio.Event()
    asyncio.get_running_loop().call_later(0.1, ticked.set)
    await asyncio.wait_for(ticked.wait(), 5)
    assert not search.done()  # the event loop ran while the pattern was being matched
    result = await asyncio.wait_for(search, 10)
    assert not result.is_error
    [note] = [line for line in result.content.splitlines() if line.startswith("[")]
    assert note.startswith("[stopped after 1 s of matching (0 of 1 files searched): the pattern")
    assert "backtracks" in note


async def test_a_search_out_of_time_over_many_files_says_so_and_claims_no_full_search(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget is spent before the first file (a deadline already passed), as many large
    files spend it: the pattern is not to blame, and not every file was searched."""
    monkeypatch.setattr(search_text, "TIME_BUDGET_SECONDS", 0.0)
    for n in range(3):
        write(workspace, f"f{n}.txt", "nothing here\n")
    result = await call("search_text", {"pattern": "needle"})
    assert not result.is_error
    assert result.content.splitlines() == [
        "no matches in the 0 files searched (the search stopped early)",
        "[stopped after 0 s of matching (0 of 3 files searched), so some files were not "
        "searched: narrow with path and glob]",
    ]


async def test_a_search_whose_walk_stopped_early_claims_no_full_search(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_text, "MAX_SCANNED", 2)
    for n in range(5):
        write(workspace, f"f{n}.txt", "nothing here\n")
    result = await call("search_text", {"pattern": "needle"})
    first, note = result.content.splitlines()
    assert first == "no matches in the 2 files searched (the search stopped early)"
    assert note.startswith("[stopped after scanning 2 entries, so some files were not searched")


# --- the open buffers of an editor (FileAccess), on each engine ----------------------------------


class Buffers:
    """An editor's open buffers as the ACP face gives them: their text, by path."""

    def __init__(self, texts: dict[Path, str]) -> None:
        self.texts = texts
        self.asked: set[Path] = set()

    def read_text(self, path: Path) -> str | None:
        self.asked.add(path)
        return self.texts.get(path)

    def write_text(self, path: Path, text: str) -> None:
        raise AssertionError("search_text writes nothing")

    def interrupt(self) -> None:
        return None


class ListedBuffers(Buffers):
    """Buffers as the LSP face gives them: it also lists which files it holds, so the ripgrep
    engine searches the others in one pass."""

    def open_paths(self) -> list[Path]:
        return list(self.texts)


@pytest.fixture(params=[Buffers, ListedBuffers], ids=["unlisted", "listed"])
def kind(request: pytest.FixtureRequest) -> type[Buffers]:
    return request.param  # type: ignore[no-any-return]


def with_buffers(call: Call, buffers: Buffers) -> Call:
    return Call(call.registry, dataclasses.replace(call.context, files=buffers))


async def test_an_open_buffer_is_searched_instead_of_the_disk(
    call: Call, workspace: Path, kind: type[Buffers]
) -> None:
    write(workspace, "a.py", "value = 1  # saved\n")
    write(workspace, "b.py", "value = 2  # saved\n")
    write(workspace, "c.py", "value = 3  # saved\n")
    buffers = kind({workspace / "b.py": "first = 0\nvalue = 20  # unsaved\n"})
    result = await with_buffers(call, buffers)("search_text", {"pattern": r"value = \d+"})
    assert result.content.splitlines() == [
        "a.py:1: value = 1  # saved",
        "b.py:2: value = 20  # unsaved",
        "c.py:1: value = 3  # saved",
    ]
    assert workspace / "b.py" in buffers.asked


async def test_a_buffer_of_a_file_binary_or_too_large_on_disk_is_searched(
    call: Call, workspace: Path, kind: type[Buffers]
) -> None:
    write(workspace, "blob.dat", b"needle\x00\x01")
    write(workspace, "huge.txt", "needle\n" + "x" * MAX_SEARCH_FILE_BYTES)
    write(workspace, "plain.txt", "needle on disk\n")
    buffers = kind(
        {workspace / "blob.dat": "needle in the buffer\n", workspace / "huge.txt": "a needle\n"}
    )
    result = await with_buffers(call, buffers)("search_text", {"pattern": "needle"})
    assert result.content.splitlines() == [
        "blob.dat:1: needle in the buffer",
        "huge.txt:1: a needle",
        "plain.txt:1: needle on disk",
    ]


async def test_a_buffer_that_no_longer_matches_hides_what_the_disk_says(
    call: Call, workspace: Path, kind: type[Buffers]
) -> None:
    write(workspace, "a.py", "TODO: saved\n")
    buffers = kind({workspace / "a.py": "done\n"})
    result = await with_buffers(call, buffers)("search_text", {"pattern": "TODO"})
    assert result.content == "no matches in 1 files"


async def test_a_buffer_of_a_file_the_walk_leaves_out_is_not_searched(
    call: Call, workspace: Path, kind: type[Buffers]
) -> None:
    write(workspace, ".gitignore", "build/\n*.log\n")
    write(workspace, "src/a.py", "needle = 1\n")
    write(workspace, "build/out.py", "plain\n")
    write(workspace, "run.log", "plain\n")
    write(workspace, "node_modules/m/index.js", "plain\n")
    write(workspace, "docs/b.md", "plain\n")
    texts = {
        workspace / "build" / "out.py": "needle in an ignored directory\n",
        workspace / "run.log": "needle in an ignored file\n",
        workspace / "node_modules" / "m" / "index.js": "needle in a skipped directory\n",
        workspace / "docs" / "b.md": "needle outside the path searched\n",
        workspace / "src" / "gone.py": "needle in a file no longer on disk\n",
    }
    result = await with_buffers(call, kind(texts))(
        "search_text", {"pattern": "needle", "path": "src"}
    )
    assert result.content.splitlines() == ["src/a.py:1: needle = 1"]
    everything = await with_buffers(call, kind(texts))(
        "search_text", {"pattern": "needle", "include_ignored": True}
    )
    assert everything.content.splitlines() == [
        "build/out.py:1: needle in an ignored directory",
        "docs/b.md:1: needle outside the path searched",
        "run.log:1: needle in an ignored file",
        "src/a.py:1: needle = 1",
    ]


# --- what the ripgrep engine's first pass must judge as Python does, on each engine ---------------


@pytest.mark.parametrize("nul_at", [9_000, 70_000])
async def test_a_file_with_a_nul_past_the_first_8_kib_is_searched_as_text(
    call: Call, workspace: Path, nul_at: int
) -> None:
    """rg leaves such a file out as binary (a NUL in what it read first) or stops at the NUL:
    the Python engine reads it as text, so both engines do."""
    head = b"needle before\n" + b"x\n" * ((nul_at - 14) // 2)
    write(workspace, "late.dat", head + b"\x00\nneedle after\n")
    write(workspace, "early.dat", b"needle\x00\n")
    result = await call("search_text", {"pattern": "needle"})
    lines = result.content.splitlines()
    after = head.count(b"\n") + 2
    assert lines == [
        "late.dat:1: needle before",
        f"late.dat:{after}: needle after",
        "[skipped files: 1 binary]",
    ]


async def test_the_first_matches_in_path_order_across_many_files(
    call: Call, workspace: Path
) -> None:
    for n in range(40):
        write(workspace, f"d{n % 4}/f{n:02d}.txt", "hit\nmiss\nhit\n" if n % 3 else "miss\n")
    write(workspace, "d0/blob.bin", b"hit\x00")
    result = await call("search_text", {"pattern": "hit", "limit": 7})
    lines = result.content.splitlines()
    assert lines[:7] == [
        "d0/f04.txt:1: hit",
        "d0/f04.txt:3: hit",
        "d0/f08.txt:1: hit",
        "d0/f08.txt:3: hit",
        "d0/f16.txt:1: hit",
        "d0/f16.txt:3: hit",
        "d0/f20.txt:1: hit",
    ]
    assert "there may be more" in lines[7]
    assert lines[8:] == ["[skipped files: 1 binary]"]


async def test_a_search_of_more_files_than_a_walk_scans_says_so_with_matches_too(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_text, "MAX_SCANNED", 2)
    for n in range(5):
        write(workspace, f"f{n}.txt", "needle\n")
    result = await call("search_text", {"pattern": "needle"})
    assert result.content.splitlines()[-1].startswith("[stopped after scanning 2 entries")


async def test_a_file_name_with_a_line_end_is_searched(call: Call, workspace: Path) -> None:
    write(workspace, "a\nb.txt", "needle\n")
    write(workspace, "c.txt", "needle\n")
    result = await call("search_text", {"pattern": "needle"})
    assert result.content.splitlines() == ["a", "b.txt:1: needle", "c.txt:1: needle"]
    nothing = await call("search_text", {"pattern": "zq_nowhere"})
    assert nothing.content == "no matches in 2 files"


async def test_a_binary_file_whose_name_holds_a_carriage_return_is_counted(
    call: Call, workspace: Path
) -> None:
    """rg names it in its log on a line of its own: the line is not cut at the \\r."""
    write(workspace, "a\rb.bin", b"needle\x00")
    write(workspace, "c.txt", "needle\n")
    result = await call("search_text", {"pattern": "needle"})
    assert result.content.splitlines() == ["c.txt:1: needle", "[skipped files: 1 binary]"]
