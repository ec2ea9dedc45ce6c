"""Hard links: a file of the workspace that is also a file outside it is neither read nor written.

Every test makes real hard links (``os.link``) between a directory outside the workspace and the
workspace, both under pytest's temporary directory (one filesystem).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.files import write
from tether.memory import MemoryLoadError, read_memory
from tether.tools import Sandbox, ToolContext
from tether.tools.links import LinkCensus
from tether.tools.sandbox import LinkedFileError

from .conftest import SECRET, Call


@pytest.fixture
def context(engine_context: ToolContext) -> ToolContext:
    """Every test of this module runs on each search engine (``tools.search``), the file
    tools whose engine it is not included."""
    return engine_context


@pytest.fixture
def linked(workspace: Path, outside: Path) -> Path:
    """``ws/linked.txt``: a second name of ``outside/secret.txt``."""
    os.link(outside / "secret.txt", workspace / "linked.txt")
    return workspace / "linked.txt"


@pytest.fixture
def twins(workspace: Path) -> tuple[Path, Path]:
    """Two names of one file, both inside the workspace (in a hidden directory, too)."""
    first = write(workspace, "src/a.txt", "shared inside\n")
    second = workspace / ".backup" / "a.txt"
    second.parent.mkdir()
    os.link(first, second)
    return first, second


async def test_read_file_refuses_a_file_linked_from_outside(call: Call, linked: Path) -> None:
    result = await call("read_file", {"path": "linked.txt"})

    assert result.is_error
    assert SECRET not in result.content
    assert "hard links" in result.content


def test_the_refusal_is_a_linked_file_error_with_the_counts(workspace: Path, linked: Path) -> None:
    with pytest.raises(LinkedFileError) as refused:
        Sandbox(workspace).read_bytes("linked.txt")
    assert (refused.value.links, refused.value.inside) == (2, 1)


async def test_a_file_whose_links_are_all_inside_is_read(
    call: Call, twins: tuple[Path, Path]
) -> None:
    for path in ("src/a.txt", ".backup/a.txt"):
        result = await call("read_file", {"path": path})
        assert not result.is_error, result.content
        assert "shared inside" in result.content


async def test_one_link_outside_among_several_inside_is_enough_to_refuse(
    call: Call, twins: tuple[Path, Path], outside: Path
) -> None:
    os.link(twins[0], outside / "third.txt")

    result = await call("read_file", {"path": "src/a.txt"})

    assert result.is_error
    assert "shared inside" not in result.content


async def test_search_text_skips_linked_files_and_says_how_many(
    call: Call, workspace: Path, linked: Path, outside: Path
) -> None:
    write(workspace, "plain.txt", f"not the {SECRET[:3]} you want\n")
    os.link(outside / "secret.txt", workspace / "again.txt")

    result = await call("search_text", {"pattern": SECRET[:3]})

    assert not result.is_error
    assert SECRET not in result.content
    expected = [f"plain.txt:1: not the {SECRET[:3]} you want"]
    if call.context.search == "python":  # it reads every file: ripgrep's look at none of them
        expected.append("[skipped files: 2 with hard links outside the workspace]")
    assert result.content.splitlines() == expected


@pytest.mark.parametrize("include_ignored", [False, True])
async def test_the_answer_does_not_tell_whether_a_linked_file_matches(
    call: Call, workspace: Path, linked: Path, include_ignored: bool
) -> None:
    write(workspace, "plain.txt", "plain\n")

    hit = await call(
        "search_text", {"pattern": f"plain|{SECRET[:3]}", "include_ignored": include_ignored}
    )
    miss = await call(
        "search_text", {"pattern": "plain|zq_nowhere", "include_ignored": include_ignored}
    )

    assert hit.content == miss.content
    assert hit.content.splitlines()[0] == "plain.txt:1: plain"


async def test_search_text_of_a_single_linked_file_shows_nothing_of_it(
    call: Call, linked: Path
) -> None:
    result = await call("search_text", {"pattern": ".", "path": "linked.txt"})

    assert SECRET not in result.content
    assert "1 with hard links outside the workspace" in result.content


async def test_search_text_reads_files_whose_links_are_all_inside(
    call: Call, twins: tuple[Path, Path]
) -> None:
    result = await call("search_text", {"pattern": "shared", "path": "src"})

    assert result.content.splitlines() == ["src/a.txt:1: shared inside"]


async def test_write_file_refuses_a_file_linked_from_outside_and_changes_nothing(
    call: Call, linked: Path, outside: Path
) -> None:
    result = await call("write_file", {"path": "linked.txt", "content": "overwritten"})

    assert result.is_error
    assert SECRET not in result.content
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"
    assert os.stat(linked).st_nlink == 2  # the workspace entry is still the same file


async def test_edit_file_refuses_a_file_linked_from_outside_and_shows_no_diff(
    call: Call, linked: Path, outside: Path
) -> None:
    result = await call(
        "edit_file", {"path": "linked.txt", "oldString": SECRET, "newString": "changed"}
    )

    assert result.is_error
    assert result.diff is None
    assert SECRET not in result.content
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


async def test_a_file_whose_links_are_all_inside_can_be_edited(
    call: Call, twins: tuple[Path, Path]
) -> None:
    result = await call(
        "edit_file", {"path": "src/a.txt", "oldString": "shared", "newString": "edited"}
    )

    assert not result.is_error, result.content
    assert twins[0].read_text() == "edited inside\n"


async def test_list_files_still_lists_a_linked_file(call: Call, linked: Path) -> None:
    result = await call("list_files")

    assert result.content.splitlines() == ["linked.txt"]


def test_memory_refuses_a_workspace_file_linked_from_outside(
    workspace: Path, outside: Path
) -> None:
    (workspace / ".tether" / "memory").mkdir(parents=True)
    os.link(outside / "secret.txt", workspace / ".tether" / "memory" / "notes.md")

    entries, [refused] = read_memory(workspace, [".tether/memory"])
    assert entries == []
    assert isinstance(refused, MemoryLoadError)
    assert (refused.path, refused.reason) == (".tether/memory/notes.md", "hard_links")
    assert SECRET not in str(refused)


def test_memory_reads_a_file_whose_links_are_all_inside(workspace: Path) -> None:
    notes = write(workspace, ".tether/memory/notes.md", "remember this\n")
    os.link(notes, workspace / "notes-copy.md")

    entries, _ = read_memory(workspace, [".tether/memory"])

    assert [entry.text for entry in entries] == ["remember this\n"]


def test_memory_from_an_absolute_path_may_have_links_anywhere(
    workspace: Path, outside: Path, tmp_path: Path
) -> None:
    notes = write(tmp_path / "user-notes", "mine.md", "user notes\n")
    os.link(notes, outside / "mine-copy.md")

    entries, _ = read_memory(workspace, [str(notes)])

    assert [entry.text for entry in entries] == ["user notes\n"]


def test_the_census_counts_each_directory_once_and_stops_at_its_entry_limit(
    workspace: Path, outside: Path
) -> None:
    first = write(workspace, "deep/a/b/c/x.txt", "x")
    os.link(first, workspace / "y.txt")
    info = os.stat(first)

    assert LinkCensus(workspace).inside(info) == 2
    assert LinkCensus(workspace, max_entries=1).inside(info) < 2
    assert LinkCensus(workspace / "deep").inside(info) == 1


def test_a_file_with_one_link_needs_no_walk(workspace: Path) -> None:
    single = write(workspace, "one.txt", "1")
    census = LinkCensus(workspace, max_entries=0)

    assert census.all_inside(os.stat(single))
