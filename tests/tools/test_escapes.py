"""Attempts to reach outside the workspace through the tools: none may return outside content."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import sys
import threading
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import Sandbox, ToolContext, ToolError, ToolResult
from tether.tools.edit_file import EditFileArguments, edit_file
from tether.tools.sandbox import Parent
from tether.tools.write_file import write_file
from tether.tools.writing import commit, inspect

from .conftest import SECRET, Call


@pytest.fixture
def context(engine_context: ToolContext) -> ToolContext:
    """Every test of this module runs on each search engine (``tools.search``), the file
    tools whose engine it is not included."""
    return engine_context


PASSWD_MARK = "root:"


@pytest.fixture
def traps(workspace: Path, outside: Path) -> Path:
    """Symlinks, loops and special files planted inside the workspace."""
    write(workspace, "sub/inner.txt", "inner")
    (workspace / "link_out").symlink_to(outside / "secret.txt")
    (workspace / "rel_link_out").symlink_to(Path("..") / "outside" / "secret.txt")
    (workspace / "dir_out").symlink_to(outside)
    (workspace / "sub" / "deep_dir_out").symlink_to(Path("..") / ".." / "outside")
    (workspace / "up").symlink_to("..")
    (workspace / "chain1").symlink_to(workspace / "chain2")
    (workspace / "chain2").symlink_to(workspace / "sub" / "chain3")
    (workspace / "sub" / "chain3").symlink_to(outside / "secret.txt")
    (workspace / "loop1").symlink_to(workspace / "loop2")
    (workspace / "loop2").symlink_to(workspace / "loop1")
    (workspace / "etc_link").symlink_to("/etc/passwd")
    (workspace / "zero").symlink_to("/dev/zero")
    (workspace / "environ").symlink_to("/proc/self/environ")
    os.mkfifo(workspace / "fifo")
    sibling = workspace.parent / (workspace.name + "-evil")
    write(sibling, "secret.txt", SECRET)
    return workspace


def attempts(outside_dir: str, workspace_dir: str) -> list[str]:
    return [
        "../outside/secret.txt",
        "../../etc/passwd",
        "../" * 30 + "etc/passwd",
        "sub/../../outside/secret.txt",
        "./sub/./../../outside/secret.txt",
        "/etc/passwd",
        f"{outside_dir}/secret.txt",
        f"{workspace_dir}/../outside/secret.txt",
        f"{workspace_dir}-evil/secret.txt",
        "link_out",
        "rel_link_out",
        "dir_out/secret.txt",
        "sub/deep_dir_out/secret.txt",
        "up/outside/secret.txt",
        "chain1",
        "loop1",
        "etc_link",
        "zero",
        "environ",
        "/proc/self/environ",
        "/proc/self/root/etc/passwd",
        "/proc/self/cwd/../outside/secret.txt",
        "/dev/zero",
        "/dev/stdin",
        "fifo",
        "secret.txt\x00",
        "link_out\x00.txt",
        "~/../../etc/passwd",
        "..\\outside\\secret.txt",
        "file:///etc/passwd",
        "..",
        "/",
        outside_dir,
        "dir_out",
        "up",
        "sub/deep_dir_out",
        "/proc/self/cwd",
    ]


def leaked(result: ToolResult) -> bool:
    return SECRET in result.content or PASSWD_MARK in result.content


def test_the_suite_has_at_least_thirty_attempts(tmp_path: Path) -> None:
    assert len(set(attempts(str(tmp_path), str(tmp_path)))) >= 30


async def test_read_file_refuses_every_escape_attempt(
    call: Call, traps: Path, outside: Path
) -> None:
    for path in attempts(str(outside), str(traps)):
        result = await asyncio.wait_for(call("read_file", {"path": path}), timeout=5)
        assert result.is_error, path
        assert not leaked(result), path


async def test_list_files_refuses_every_escape_attempt(
    call: Call, traps: Path, outside: Path
) -> None:
    for path in attempts(str(outside), str(traps)):
        result = await asyncio.wait_for(call("list_files", {"path": path}), timeout=5)
        assert result.is_error, path
        assert "secret.txt" not in result.content.replace(path, ""), path  # only echoes the path


async def test_search_text_refuses_every_escape_attempt(
    call: Call, traps: Path, outside: Path
) -> None:
    for path in attempts(str(outside), str(traps)):
        result = await asyncio.wait_for(
            call("search_text", {"pattern": ".", "path": path}), timeout=5
        )
        assert not leaked(result), path
        assert result.is_error or result.content.startswith("no matches"), path


async def test_walking_the_whole_workspace_never_follows_a_planted_symlink(
    call: Call, traps: Path
) -> None:
    listed = await call("list_files")
    assert listed.content.splitlines() == ["sub/inner.txt"]
    searched = await asyncio.wait_for(call("search_text", {"pattern": "SECRET|root"}), 5)
    assert not searched.is_error
    assert not leaked(searched)
    assert searched.content.startswith("no matches")


async def test_globs_cannot_climb_out_of_the_listed_directory(call: Call, traps: Path) -> None:
    for glob in ["../*", "../outside/*", "/etc/*", "**/../../*"]:
        result = await call("list_files", {"glob": glob})
        assert result.is_error, glob
        assert "secret.txt" not in result.content


# Writing: write_file, edit_file and run_command's cwd must never reach outside either.

HARMLESS_INSIDE = {"..\\outside\\secret.txt", "file:///etc/passwd"}  # plain names on POSIX
SYSTEM_FILES = [Path("/etc/passwd"), Path("/etc/hosts")]


@pytest.fixture
def write_traps(traps: Path, outside: Path) -> Path:
    """The read traps, plus links that would create files outside if followed."""
    (traps / "dangling_out").symlink_to(outside / "created-by-link.txt")
    (traps / "dangling_chain").symlink_to(traps / "dangling_out")
    (traps / "sub" / "dangling_rel").symlink_to(Path("..") / ".." / "outside" / "rel.txt")
    return traps


def write_attempts(outside_dir: str, workspace_dir: str) -> list[str]:
    return [
        *attempts(outside_dir, workspace_dir),
        "../created.txt",
        "sub/../../created.txt",
        f"{outside_dir}/created.txt",
        "dir_out/created.txt",
        "dir_out/new/dir/created.txt",
        "sub/deep_dir_out/created.txt",
        "up/created.txt",
        "up/outside/created.txt",
        "dangling_out",
        "dangling_chain",
        "sub/dangling_rel",
        "/proc/self/cwd/created.txt",
        "/proc/self/root/tmp/created.txt",
        "/dev/null",
        "/dev/shm/created.txt",
    ]


def snapshot(root: Path, workspace: Path) -> dict[str, tuple[int, int, bytes | str | None]]:
    """Every entry under ``root`` but the workspace, and a few system files: type and mode,
    modification time, and content (a file's bytes, a symlink's target)."""
    entries: dict[str, tuple[int, int, bytes | str | None]] = {}
    paths = list(SYSTEM_FILES)
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if Path(directory, name) != workspace]
        paths += [Path(directory, name) for name in dirnames + filenames]
    for path in paths:
        info = path.lstat()
        content: bytes | str | None = None
        if stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        elif stat.S_ISLNK(info.st_mode):
            content = os.readlink(path)
        entries[str(path)] = (info.st_mode, info.st_mtime_ns, content)
    return entries


def links_in(workspace: Path) -> dict[str, str]:
    return {str(path): os.readlink(path) for path in workspace.rglob("*") if path.is_symlink()}


def names_in(directory: Path) -> set[str]:
    return {path.name for path in directory.rglob("*")}


def test_the_write_suite_has_at_least_thirty_attempts(tmp_path: Path) -> None:
    assert len(set(write_attempts(str(tmp_path), str(tmp_path)))) >= 45


async def test_write_file_never_creates_or_modifies_anything_outside(
    call: Call, write_traps: Path, outside: Path, tmp_path: Path
) -> None:
    before, links = snapshot(tmp_path, write_traps), links_in(write_traps)
    for path in write_attempts(str(outside), str(write_traps)):
        result = await asyncio.wait_for(
            call("write_file", {"path": path, "content": "PWNED\n"}), timeout=5
        )
        assert result.is_error or path in HARMLESS_INSIDE, (path, result.content)
        assert not leaked(result), path
        assert snapshot(tmp_path, write_traps) == before, path
    assert links_in(write_traps) == links  # no link was written through or replaced
    assert (write_traps / "..\\outside\\secret.txt").read_text() == "PWNED\n"


async def test_edit_file_never_reads_or_modifies_anything_outside(
    call: Call, write_traps: Path, outside: Path, tmp_path: Path
) -> None:
    before, links = snapshot(tmp_path, write_traps), links_in(write_traps)
    for path in write_attempts(str(outside), str(write_traps)):
        for old in ["TOP", "root"]:
            result = await asyncio.wait_for(
                call("edit_file", {"path": path, "oldString": old, "newString": "PWNED"}),
                timeout=5,
            )
            assert result.is_error, (path, result.content)
            assert not leaked(result), path
    assert snapshot(tmp_path, write_traps) == before
    assert links_in(write_traps) == links


async def test_run_command_refuses_every_cwd_outside(
    call: Call, write_traps: Path, outside: Path, tmp_path: Path
) -> None:
    before = snapshot(tmp_path, write_traps)
    for path in write_attempts(str(outside), str(write_traps)):
        result = await asyncio.wait_for(
            call("run_command", {"command": ["touch", "ran-here"], "cwd": path}), timeout=5
        )
        assert result.is_error, (path, result.content)
    assert snapshot(tmp_path, write_traps) == before
    assert "ran-here" not in names_in(write_traps)


async def test_a_hard_link_to_an_outside_file_is_neither_written_through_nor_replaced(
    call: Call, workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "hard")
    result = await call("write_file", {"path": "hard", "content": "inside\n"})
    assert result.is_error  # its old content would show in the diff (see test_hard_links.py)
    assert result.diff is None
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


# A path that changes between the check and the use, made to happen at a chosen moment.


def swap_for_link(path: Path, target: Path) -> None:
    """Put a symlink to ``target`` where ``path`` is (the original moves beside it)."""
    path.rename(path.with_name(path.name + "-moved"))
    path.symlink_to(target)


class LinkedBeforeOpen(Sandbox):
    """``sub`` becomes a symlink out after the path was resolved, before it is opened."""

    def __init__(self, root: Path, outside: Path) -> None:
        super().__init__(root)
        self.outside = outside

    def open_parent(self, real: Path, *, shown: str, create: bool = False) -> Parent:
        swap_for_link(self.root / "sub", self.outside)
        return super().open_parent(real, shown=shown, create=create)


class FileLinkedAfterOpen(LinkedBeforeOpen):
    """The file becomes a symlink out once its directory is open."""

    def open_parent(self, real: Path, *, shown: str, create: bool = False) -> Parent:
        parent = Sandbox.open_parent(self, real, shown=shown, create=create)
        swap_for_link(real, self.outside / "secret.txt")
        return parent


@pytest.mark.parametrize("sandbox_type", [LinkedBeforeOpen, FileLinkedAfterOpen])
def test_write_file_refuses_a_path_that_becomes_a_symlink_after_the_check(
    workspace: Path, outside: Path, tmp_path: Path, sandbox_type: type[LinkedBeforeOpen]
) -> None:
    write(workspace, "sub/note.txt", "inside\n")
    before = snapshot(tmp_path, workspace)
    with pytest.raises(ToolError, match=r"changed|symbolic link"):
        write_file(sandbox_type(workspace, outside), "sub/note.txt", "PWNED\n")
    assert snapshot(tmp_path, workspace) == before
    assert not (outside / "note.txt").exists()


@pytest.mark.parametrize("sandbox_type", [LinkedBeforeOpen, FileLinkedAfterOpen])
def test_edit_file_refuses_a_path_that_becomes_a_symlink_after_the_check(
    workspace: Path, outside: Path, tmp_path: Path, sandbox_type: type[LinkedBeforeOpen]
) -> None:
    write(workspace, "sub/secret.txt", "TOP inside\n")
    before = snapshot(tmp_path, workspace)
    args = EditFileArguments(path="sub/secret.txt", old_string="TOP", new_string="PWNED")
    with pytest.raises(ToolError, match=r"changed|symbolic link") as raised:
        edit_file(sandbox_type(workspace, outside), args)
    assert SECRET not in str(raised.value)
    assert snapshot(tmp_path, workspace) == before


def test_a_new_file_whose_directory_becomes_a_symlink_is_not_created_outside(
    workspace: Path, outside: Path, tmp_path: Path
) -> None:
    (workspace / "sub").mkdir()
    before = snapshot(tmp_path, workspace)
    with pytest.raises(ToolError, match="changed"):
        write_file(LinkedBeforeOpen(workspace, outside), "sub/deeper/new.txt", "PWNED\n")
    assert snapshot(tmp_path, workspace) == before


def test_an_entry_swapped_for_a_symlink_after_inspection_is_never_followed(
    workspace: Path, outside: Path, tmp_path: Path
) -> None:
    note = write(workspace, "note.txt", "inside\n")
    sandbox = Sandbox(workspace)
    before = snapshot(tmp_path, workspace)
    with sandbox.open_parent(sandbox.resolve_for_write("note.txt"), shown="note.txt") as parent:
        info = inspect(parent, "note.txt")
        swap_for_link(note, outside / "secret.txt")
        with pytest.raises(ToolError, match="changed"):
            commit(parent, b"PWNED\n", shown="note.txt", expect=info)
        # even told to expect the link, rename replaces the link itself, never its target
        commit(parent, b"PWNED\n", shown="note.txt", expect=note.lstat())
    assert snapshot(tmp_path, workspace) == before
    assert not note.is_symlink() and note.read_text() == "PWNED\n"


def test_racing_a_directory_against_a_symlink_out_never_writes_outside(
    workspace: Path, outside: Path, tmp_path: Path
) -> None:
    sub = workspace / "sub"
    sub.mkdir()
    before = snapshot(tmp_path, workspace)
    stop = threading.Event()

    def flip() -> None:  # sub: a directory, then a symlink out, then the directory again
        moved = workspace / "sub-moved"
        steps = [
            lambda: sub.rename(moved),
            lambda: sub.symlink_to(outside),
            sub.unlink,
            lambda: shutil.rmtree(sub),  # a directory a write made meanwhile
            lambda: moved.rename(sub),
        ]
        while not stop.is_set():
            for step in steps:
                with contextlib.suppress(OSError):
                    step()

    flipper = threading.Thread(target=flip)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to interleave the two
    flipper.start()
    outcomes = {"written": 0, "refused": 0}
    try:
        sandbox = Sandbox(workspace)
        for attempt in range(500):
            try:
                write_file(sandbox, f"sub/file{attempt}.txt", "PWNED\n")
                outcomes["written"] += 1
            except ToolError:
                outcomes["refused"] += 1
    finally:
        stop.set()
        flipper.join(10)
        sys.setswitchinterval(interval)
    assert not flipper.is_alive()
    assert snapshot(tmp_path, workspace) == before
    assert not list(outside.glob("file*.txt"))
    assert sum(outcomes.values()) == 500
    assert outcomes["refused"] > 0  # the swaps did interleave with the writes
