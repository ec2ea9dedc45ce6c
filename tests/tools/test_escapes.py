"""Attempts to reach outside the workspace through the tools: none may return outside content."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.files import write
from tether.tools import ToolResult

from .conftest import SECRET, Call

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
