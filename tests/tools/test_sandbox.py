"""The sandbox: where a model-supplied path may lead, and what may be read there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import Sandbox, ToolError
from tether.tools.sandbox import format_size

from .conftest import SECRET


@pytest.fixture
def sandbox(workspace: Path) -> Sandbox:
    return Sandbox(workspace, max_file_bytes=1024)


def test_a_relative_path_resolves_against_the_root(sandbox: Sandbox, workspace: Path) -> None:
    write(workspace, "src/app.py", "x")
    assert sandbox.resolve("src/app.py") == workspace / "src/app.py"
    assert sandbox.resolve("./src/../src/app.py") == workspace / "src/app.py"


def test_an_absolute_path_inside_the_root_is_accepted(sandbox: Sandbox, workspace: Path) -> None:
    path = write(workspace, "a.txt", "x")
    assert sandbox.resolve(str(path)) == path


def test_the_root_itself_is_inside(sandbox: Sandbox, workspace: Path) -> None:
    assert sandbox.resolve(".") == workspace
    assert sandbox.relative(workspace) == "."


def test_a_symlink_inside_the_root_resolves_to_its_target(
    sandbox: Sandbox, workspace: Path
) -> None:
    target = write(workspace, "real/file.txt", "x")
    (workspace / "alias").symlink_to(workspace / "real")
    assert sandbox.resolve("alias/file.txt") == target


@pytest.mark.parametrize(
    "path", ["..", "../outside/secret.txt", "a/../../outside", "/etc/passwd", "/"]
)
def test_paths_that_leave_the_root_are_refused(sandbox: Sandbox, path: str) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        sandbox.resolve(path)


def test_a_sibling_directory_sharing_the_roots_name_prefix_is_outside(
    sandbox: Sandbox, workspace: Path
) -> None:
    sibling = workspace.parent / (workspace.name + "-evil")
    write(sibling, "x.txt", "x")
    with pytest.raises(ToolError):
        sandbox.resolve(str(sibling / "x.txt"))


def test_a_nul_byte_is_refused_before_touching_the_filesystem(sandbox: Sandbox) -> None:
    with pytest.raises(ToolError, match="NUL"):
        sandbox.resolve("a.txt\x00.png")


def test_a_path_too_long_for_the_filesystem_is_a_tool_error(sandbox: Sandbox) -> None:
    with pytest.raises(ToolError):
        sandbox.read_bytes("x" * 5000)
    with pytest.raises(ToolError):
        sandbox.read_bytes("a/" * 3000 + "b")


def test_an_empty_path_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ToolError):
        sandbox.resolve("  ")


def test_a_missing_path_is_an_error_unless_it_may_be_created(
    sandbox: Sandbox, workspace: Path
) -> None:
    with pytest.raises(ToolError, match="no such file"):
        sandbox.resolve("new/file.txt")
    assert sandbox.resolve("new/file.txt", must_exist=False) == workspace / "new/file.txt"


def test_a_dangling_symlink_out_of_the_root_is_refused_even_for_creation(
    sandbox: Sandbox, workspace: Path, outside: Path
) -> None:
    (workspace / "drop").symlink_to(outside / "created-by-the-model.txt")
    with pytest.raises(ToolError, match="outside"):
        sandbox.resolve("drop", must_exist=False)


def test_a_symlink_loop_is_refused(sandbox: Sandbox, workspace: Path) -> None:
    (workspace / "loop1").symlink_to(workspace / "loop2")
    (workspace / "loop2").symlink_to(workspace / "loop1")
    with pytest.raises(ToolError):
        sandbox.read_bytes("loop1")


def test_a_missing_workspace_root_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="workspace root"):
        Sandbox(tmp_path / "gone")


def test_read_bytes_returns_a_regular_files_content(sandbox: Sandbox, workspace: Path) -> None:
    write(workspace, "a.txt", b"hello\x00world")
    assert sandbox.read_bytes("a.txt") == b"hello\x00world"


def test_read_bytes_refuses_a_file_over_the_size_cap(sandbox: Sandbox, workspace: Path) -> None:
    write(workspace, "big.txt", "x" * 1025)
    write(workspace, "fits.txt", "x" * 1024)
    with pytest.raises(ToolError, match="too large"):
        sandbox.read_bytes("big.txt")
    assert len(sandbox.read_bytes("fits.txt")) == 1024
    assert sandbox.read_bytes("big.txt", max_bytes=2048) == b"x" * 1025


def test_read_bytes_refuses_a_directory(sandbox: Sandbox, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    with pytest.raises(ToolError, match="directory"):
        sandbox.read_bytes("dir")
    with pytest.raises(ToolError, match="directory"):
        sandbox.read_bytes(".")


def test_read_bytes_refuses_a_fifo_without_blocking(sandbox: Sandbox, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        sandbox.read_bytes("pipe")


def test_a_path_that_becomes_a_symlink_after_the_check_is_not_followed(
    sandbox: Sandbox, workspace: Path, outside: Path
) -> None:
    write(workspace, "sub/secret.txt", "inside")
    real = sandbox.resolve("sub/secret.txt")
    (workspace / "sub").rename(workspace / "sub-before")
    (workspace / "sub").symlink_to(outside)  # now sub/secret.txt is the outside secret
    with pytest.raises(ToolError, match="changed"):
        sandbox.open(real, os.O_RDONLY, shown="sub/secret.txt")


def test_a_file_that_becomes_a_symlink_after_the_check_is_not_followed(
    sandbox: Sandbox, workspace: Path, outside: Path
) -> None:
    path = write(workspace, "note.txt", "inside")
    real = sandbox.resolve("note.txt")
    path.unlink()
    path.symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="changed"):
        sandbox.open(real, os.O_RDONLY, shown="note.txt")
    assert SECRET not in str(real)


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (8 << 20, "8.0 MiB")],
)
def test_sizes_are_shown_in_binary_units(size: int, text: str) -> None:
    assert format_size(size) == text


def test_open_parent_makes_missing_directories_inside_and_lists_them(
    sandbox: Sandbox, workspace: Path
) -> None:
    real = sandbox.resolve_for_write("a/b/c.txt")
    with sandbox.open_parent(real, shown="a/b/c.txt", create=True) as parent:
        assert parent.name == "c.txt"
        assert parent.created == (workspace / "a", workspace / "a/b")
        assert os.path.samestat(os.fstat(parent.fd), (workspace / "a/b").stat())
    with sandbox.open_parent(real, shown="a/b/c.txt", create=True) as again:
        assert again.created == ()


def test_open_parent_without_create_refuses_a_missing_directory(
    sandbox: Sandbox, workspace: Path
) -> None:
    real = sandbox.resolve_for_write("missing/c.txt")
    with pytest.raises(ToolError, match="no such file"):
        sandbox.open_parent(real, shown="missing/c.txt")
    assert not (workspace / "missing").exists()


def test_open_parent_refuses_the_root_itself(sandbox: Sandbox) -> None:
    with pytest.raises(ToolError, match="workspace root"):
        sandbox.open_parent(sandbox.resolve_for_write("."), shown=".")


def test_resolve_for_write_refuses_a_symlink_even_one_pointing_inside(
    sandbox: Sandbox, workspace: Path
) -> None:
    write(workspace, "real.txt", "x")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    with pytest.raises(ToolError, match=r"symbolic link \(to real.txt\)"):
        sandbox.resolve_for_write("alias.txt")
    assert sandbox.resolve_for_write("real.txt") == workspace / "real.txt"


def test_a_directory_made_for_a_write_cannot_be_a_symlink_planted_meanwhile(
    sandbox: Sandbox, workspace: Path, outside: Path
) -> None:
    real = sandbox.resolve_for_write("made/file.txt")
    (workspace / "made").symlink_to(outside)  # planted after the check, before the walk
    with pytest.raises(ToolError, match="changed"):
        sandbox.open_parent(real, shown="made/file.txt", create=True)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
