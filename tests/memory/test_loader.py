"""Memory entries: which files feed the system prompt, in what order, and which are left out (each
a problem the run reports as a warning, never a failed run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.files import needs_enforced_modes, write
from tether.config import MemoryConfig
from tether.memory import (
    DEFAULT_MEMORY_PATH,
    Memory,
    MemoryLoadError,
    load_memory,
    loader,
    read_memory,
    render_memory,
    surely_no_memory,
)
from tether.protocol import ConfigError, ErrorCode


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def names(workspace: Path, paths: list[str]) -> list[str]:
    entries, problems = read_memory(workspace, paths)
    assert problems == []
    return [entry.name for entry in entries]


def left_out(workspace: Path, paths: list[str], **options: Any) -> ConfigError:
    """The one problem of loading ``paths`` (the memory loads all the same)."""
    [problem] = load_memory(workspace, paths, **options).problems
    assert problem.code == ErrorCode.CONFIG_ERROR
    return problem


def reason(problem: ConfigError) -> str:
    assert isinstance(problem.data, dict)
    return str(problem.data["reason"])


def test_the_default_path_matches_the_configuration_default() -> None:
    assert MemoryConfig().paths == [DEFAULT_MEMORY_PATH]


def test_a_missing_default_path_is_simply_no_memory(workspace: Path) -> None:
    assert load_memory(workspace, [DEFAULT_MEMORY_PATH]) == Memory()
    assert load_memory(workspace, [".tether/memory/"]) == Memory()


def test_no_configured_paths_is_no_memory(workspace: Path) -> None:
    assert load_memory(workspace, []) == Memory()


def test_entries_of_a_directory_come_sorted_by_path_each_headed_by_its_name(
    workspace: Path,
) -> None:
    write(workspace, ".tether/memory/b.md", "Use tabs.\n")
    write(workspace, ".tether/memory/a.md", "Be brief.\n")
    write(workspace, ".tether/memory/team/c.md", "Ask Ann.\n")
    text = load_memory(workspace, [DEFAULT_MEMORY_PATH]).text
    assert text == (
        "# Memory\n\n"
        "## .tether/memory/a.md\n\nBe brief.\n\n"
        "## .tether/memory/b.md\n\nUse tabs.\n\n"
        "## .tether/memory/team/c.md\n\nAsk Ann."
    )


def test_only_visible_markdown_files_are_entries(workspace: Path) -> None:
    write(workspace, ".tether/memory/notes.md", "yes")
    write(workspace, ".tether/memory/UPPER.MD", "yes")
    write(workspace, ".tether/memory/notes.txt", "no")
    write(workspace, ".tether/memory/.draft.md", "no")
    write(workspace, ".tether/memory/.hidden/x.md", "no")
    assert names(workspace, [DEFAULT_MEMORY_PATH]) == [
        ".tether/memory/UPPER.MD",
        ".tether/memory/notes.md",
    ]


def test_a_markdown_entry_that_is_not_a_regular_file_is_left_out_without_being_opened(
    workspace: Path,
) -> None:
    write(workspace, ".tether/memory/notes.md", "yes")
    os.mkfifo(workspace / ".tether/memory/pipe.md")
    entries, [problem] = read_memory(workspace, [DEFAULT_MEMORY_PATH])
    assert [entry.name for entry in entries] == [".tether/memory/notes.md"]
    assert isinstance(problem, MemoryLoadError)
    assert (problem.path, reason(problem)) == (".tether/memory/pipe.md", "not_regular")


def test_empty_entries_are_left_out(workspace: Path) -> None:
    write(workspace, ".tether/memory/empty.md", " \n\n")
    write(workspace, ".tether/memory/full.md", "x")
    assert names(workspace, [DEFAULT_MEMORY_PATH]) == [".tether/memory/full.md"]


def test_configured_paths_keep_their_order_and_a_file_counts_once(workspace: Path) -> None:
    write(workspace, ".tether/memory/a.md", "a")
    write(workspace, "docs/STYLE.md", "style")
    order = names(workspace, ["docs/STYLE.md", DEFAULT_MEMORY_PATH, "docs/STYLE.md"])
    assert order == ["docs/STYLE.md", ".tether/memory/a.md"]


def test_a_configured_file_need_not_end_in_md(workspace: Path) -> None:
    write(workspace, "AGENTS.txt", "rules")
    assert names(workspace, ["AGENTS.txt"]) == ["AGENTS.txt"]


def test_an_absolute_path_outside_the_workspace_is_headed_as_configured(
    workspace: Path, tmp_path: Path
) -> None:
    write(tmp_path / "home-notes", "me.md", "I like short answers.")
    write(tmp_path / "home-notes", "sub/more.md", "More.")
    configured = str(tmp_path / "home-notes")
    assert names(workspace, [configured]) == [f"{configured}/me.md", f"{configured}/sub/more.md"]


def test_a_byte_order_mark_is_dropped(workspace: Path) -> None:
    write(workspace, "m.md", "\ufeffhello".encode())
    [entry], _ = read_memory(workspace, ["m.md"])
    assert entry.text == "hello"


def test_an_explicitly_configured_missing_path_is_left_out_with_a_problem(workspace: Path) -> None:
    write(workspace, "AGENTS.md", "rules")
    memory = load_memory(workspace, ["docs/memory", "AGENTS.md"])
    assert "rules" in memory.text
    [problem] = memory.problems
    assert not isinstance(problem, MemoryLoadError)
    assert problem.code == ErrorCode.CONFIG_ERROR
    assert problem.data == {"key": "memory.paths", "path": "docs/memory", "reason": "missing"}


def test_a_missing_absolute_path_is_left_out(workspace: Path, tmp_path: Path) -> None:
    assert reason(left_out(workspace, [str(tmp_path / "nowhere")])) == "missing"


@pytest.mark.parametrize("configured", ["", "bad\x00path"])
def test_an_unusable_path_is_left_out(workspace: Path, configured: str) -> None:
    assert reason(left_out(workspace, [configured])) == "unreadable"


def test_a_configured_fifo_is_left_out_without_being_opened(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe.md")
    assert reason(left_out(workspace, ["pipe.md"])) == "not_regular"


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/stdin"])
def test_a_memory_file_linking_to_a_device_is_left_out(workspace: Path, target: str) -> None:
    (workspace / ".tether" / "memory").mkdir(parents=True)
    (workspace / ".tether" / "memory" / "notes.md").symlink_to(target)
    write(workspace, ".tether/memory/style.md", "Use tabs.")
    memory = load_memory(workspace, [DEFAULT_MEMORY_PATH])
    assert "Use tabs." in memory.text
    assert [reason(problem) for problem in memory.problems] == ["outside"]


def test_a_workspace_path_that_resolves_outside_it_is_refused(
    workspace: Path, tmp_path: Path
) -> None:
    write(tmp_path / "elsewhere", "secret.md", "key")
    (workspace / ".tether").mkdir()
    (workspace / ".tether" / "memory").symlink_to(tmp_path / "elsewhere")
    assert reason(left_out(workspace, [DEFAULT_MEMORY_PATH])) == "outside"
    assert reason(left_out(workspace, ["../elsewhere"])) == "outside"


def test_an_entry_linking_outside_the_workspace_is_refused(workspace: Path, tmp_path: Path) -> None:
    secret = write(tmp_path, "id_rsa", "PRIVATE KEY")
    (workspace / ".tether" / "memory").mkdir(parents=True)
    (workspace / ".tether" / "memory" / "key.md").symlink_to(secret)
    write(workspace, ".tether/memory/style.md", "Use tabs.")
    memory = load_memory(workspace, [DEFAULT_MEMORY_PATH])
    assert "Use tabs." in memory.text and "PRIVATE KEY" not in memory.text
    [problem] = memory.problems
    assert isinstance(problem, MemoryLoadError) and reason(problem) == "outside"
    assert "PRIVATE KEY" not in problem.message


def test_an_entry_linking_inside_the_workspace_is_read(workspace: Path) -> None:
    write(workspace, "docs/style.md", "style")
    (workspace / ".tether" / "memory").mkdir(parents=True)
    (workspace / ".tether" / "memory" / "style.md").symlink_to(workspace / "docs/style.md")
    assert names(workspace, [DEFAULT_MEMORY_PATH]) == [".tether/memory/style.md"]


def test_a_file_that_is_not_utf8_is_left_out(workspace: Path) -> None:
    write(workspace, ".tether/memory/latin.md", "caf\xe9".encode("latin-1"))
    problem = left_out(workspace, [DEFAULT_MEMORY_PATH])
    assert isinstance(problem, MemoryLoadError)
    assert problem.path == ".tether/memory/latin.md"
    assert reason(problem) == "not_utf8"


@needs_enforced_modes
def test_an_unreadable_file_is_left_out(workspace: Path) -> None:
    path = write(workspace, ".tether/memory/locked.md", "x")
    path.chmod(0)
    assert reason(left_out(workspace, [DEFAULT_MEMORY_PATH])) == "unreadable"


@needs_enforced_modes
def test_an_unreadable_directory_is_left_out(workspace: Path) -> None:
    directory = workspace / ".tether" / "memory"
    write(directory, "a.md", "x")
    directory.chmod(0)
    try:
        assert reason(left_out(workspace, [DEFAULT_MEMORY_PATH])) == "unreadable"
    finally:
        directory.chmod(0o755)


def test_memory_over_the_size_cap_keeps_the_files_before_the_one_that_passes_it(
    workspace: Path,
) -> None:
    write(workspace, ".tether/memory/a.md", "a" * 60)
    write(workspace, ".tether/memory/b.md", "b" * 40)
    write(workspace, ".tether/memory/c.md", "c")
    entries, problems = read_memory(workspace, [DEFAULT_MEMORY_PATH], max_bytes=101)
    assert len(entries) == 3 and problems == []
    entries, problems = read_memory(workspace, [DEFAULT_MEMORY_PATH], max_bytes=99)
    assert [entry.name for entry in entries] == [".tether/memory/a.md"]
    [problem] = problems
    assert isinstance(problem, MemoryLoadError)
    assert (problem.path, reason(problem)) == (".tether/memory/b.md", "too_large")


def test_a_huge_file_is_refused_without_being_read_whole(workspace: Path) -> None:
    with (workspace / "huge.md").open("wb") as file:
        file.truncate(1 << 30)
    assert reason(left_out(workspace, ["huge.md"])) == "too_large"


def test_a_memory_directory_past_the_entry_cap_keeps_what_was_found_and_says_so(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "MAX_MEMORY_ENTRIES", 3)
    for name in ("a.md", "b.md", "c.md", "d.md", "e.md"):
        write(workspace, f".tether/memory/{name}", name)
    entries, problems = read_memory(workspace, [DEFAULT_MEMORY_PATH])
    kept = [entry.name for entry in entries]  # those the directory listed first
    assert len(kept) == 3 and set(kept) < {f".tether/memory/{n}.md" for n in "abcde"}
    [problem] = problems
    assert (problem.data, problem.code) == (
        {"key": "memory.paths", "path": DEFAULT_MEMORY_PATH, "reason": "truncated"},
        ErrorCode.CONFIG_ERROR,
    )
    assert "stopped after 3 entries" in problem.message


def test_a_memory_walk_past_its_time_budget_stops_and_says_so(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "MEMORY_WALK_SECONDS", 0.0)  # a deadline already passed
    write(workspace, ".tether/memory/a.md", "a")
    entries, problems = read_memory(workspace, [DEFAULT_MEMORY_PATH])
    assert entries == []
    assert [reason(problem) for problem in problems] == ["truncated"]


def test_rendering_no_entries_is_empty() -> None:
    assert render_memory([]) == ""


def test_no_memory_is_sure_only_without_paths_or_with_an_absent_default(workspace: Path) -> None:
    assert surely_no_memory(workspace, [])
    assert surely_no_memory(workspace, [DEFAULT_MEMORY_PATH])
    assert surely_no_memory(workspace, [".tether/memory/", DEFAULT_MEMORY_PATH])
    assert not surely_no_memory(workspace, ["notes"])  # missing: load_memory reports it
    assert not surely_no_memory(workspace, [DEFAULT_MEMORY_PATH, "~/memory.md"])
    (workspace / ".tether").write_text("")  # a file where the directory would be
    assert surely_no_memory(workspace, [DEFAULT_MEMORY_PATH])
    (workspace / ".tether").unlink()
    write(workspace, ".tether/memory/a.md", "Be brief.\n")
    assert not surely_no_memory(workspace, [DEFAULT_MEMORY_PATH])


@pytest.mark.parametrize(
    ("make", "sure"),
    [
        (lambda ws: (ws / ".tether").mkdir(), True),
        (lambda ws: (ws / ".tether").write_text(""), True),
        (lambda ws: (ws / ".tether").symlink_to(ws / "nowhere"), True),
        (lambda ws: ((ws / ".tether").mkdir(), (ws / ".tether/memory").symlink_to("gone")), False),
        (lambda ws: write(ws, ".tether/memory/empty.md", "  \n"), False),
    ],
    ids=["no-memory-dir", "tether-is-a-file", "dangling-tether", "dangling-memory", "blank-entry"],
)
def test_an_absent_default_is_told_on_the_spot_and_read_as_no_memory_either_way(
    workspace: Path, make: Any, sure: bool
) -> None:
    make(workspace)
    assert surely_no_memory(workspace, [DEFAULT_MEMORY_PATH]) is sure
    assert load_memory(workspace, [DEFAULT_MEMORY_PATH]) == Memory()  # what the thread would say
