"""write_file: create or replace a workspace file atomically, with a diff of the change."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import tether.tools.write_file as write_file_module
from tests.files import write
from tether.tools import ToolContext, ToolRegistry
from tether.tools.write_file import WriteFile
from tether.tools.writing import MAX_DIFF_INPUT_BYTES, TEMP_PREFIX

from .conftest import Call


def leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.startswith(TEMP_PREFIX)]


async def test_a_new_file_is_created_with_its_parent_directories(
    call: Call, workspace: Path
) -> None:
    result = await call("write_file", {"path": "src/pkg/app.py", "content": "x = 1\ny = 2\n"})
    assert not result.is_error, result.content
    assert (workspace / "src/pkg/app.py").read_text() == "x = 1\ny = 2\n"
    assert result.content.startswith("created src/pkg/app.py (2 lines, 12 B)")
    assert "made the directories src, src/pkg" in result.content
    assert result.diff == ("--- /dev/null\n+++ b/src/pkg/app.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n")


async def test_an_existing_file_is_replaced_and_the_diff_shows_the_change(
    call: Call, workspace: Path
) -> None:
    path = write(workspace, "notes.txt", "one\ntwo\nthree\n")
    result = await call("write_file", {"path": "notes.txt", "content": "one\n2\nthree"})
    assert not result.is_error
    assert path.read_text() == "one\n2\nthree"
    assert result.content == "replaced notes.txt (3 lines, 11 B; it had 3 lines)"
    assert result.diff == (
        "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n one\n-two\n-three\n+2\n+three\n"
        "\\ No newline at end of file\n"
    )
    assert leftovers(workspace) == []


async def test_a_replaced_file_keeps_its_permission_bits(call: Call, workspace: Path) -> None:
    path = write(workspace, "run.sh", "#!/bin/sh\n")
    path.chmod(0o750)
    await call("write_file", {"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o750


async def test_the_same_content_is_not_written_again(call: Call, workspace: Path) -> None:
    path = write(workspace, "a.txt", "same\n")
    before = path.stat()
    result = await call("write_file", {"path": "a.txt", "content": "same\n"})
    assert not result.is_error
    assert "nothing was written" in result.content
    assert result.diff is None
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_an_absolute_path_inside_the_workspace_is_written(
    call: Call, workspace: Path
) -> None:
    result = await call("write_file", {"path": str(workspace / "abs.txt"), "content": "x"})
    assert not result.is_error
    assert (workspace / "abs.txt").read_text() == "x"


async def test_a_symlinked_directory_inside_is_written_through_its_real_path(
    call: Call, workspace: Path
) -> None:
    (workspace / "real").mkdir()
    (workspace / "alias").symlink_to(workspace / "real")
    result = await call("write_file", {"path": "alias/new.txt", "content": "x\n"})
    assert not result.is_error
    assert result.content.startswith("created real/new.txt")
    assert (workspace / "real/new.txt").read_text() == "x\n"


async def test_content_over_the_size_cap_is_refused(workspace: Path) -> None:
    context = ToolContext(workspace=workspace, session_id="s", run_id="r")
    call = Call(ToolRegistry([WriteFile(max_file_bytes=10)]), context)
    result = await call("write_file", {"path": "big.txt", "content": "x" * 11})
    assert result.is_error
    assert "too large" in result.content
    assert not (workspace / "big.txt").exists()
    fits = await call("write_file", {"path": "fits.txt", "content": "x" * 10})
    assert not fits.is_error


async def test_a_directory_is_not_overwritten(call: Call, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    for path in ["dir", "."]:
        result = await call("write_file", {"path": path, "content": "x"})
        assert result.is_error, path
        assert "directory" in result.content or "root" in result.content
    assert (workspace / "dir").is_dir()


async def test_a_symlink_inside_the_workspace_is_not_written_through(
    call: Call, workspace: Path
) -> None:
    target = write(workspace, "target.txt", "original\n")
    (workspace / "alias.txt").symlink_to(target)
    result = await call("write_file", {"path": "alias.txt", "content": "changed\n"})
    assert result.is_error
    assert "symbolic link" in result.content and "target.txt" in result.content
    assert target.read_text() == "original\n"
    assert (workspace / "alias.txt").is_symlink()


async def test_a_fifo_is_refused_without_blocking(call: Call, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    result = await call("write_file", {"path": "pipe", "content": "x"})
    assert result.is_error
    assert "not a regular file" in result.content


async def test_a_file_where_a_directory_should_be_is_an_error(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", "x")
    result = await call("write_file", {"path": "a.txt/b.txt", "content": "x"})
    assert result.is_error
    assert "a.txt is a file, not a directory" in result.content
    assert (workspace / "a.txt").read_text() == "x"
    assert leftovers(workspace) == []


async def test_content_with_a_lone_surrogate_is_refused(call: Call, workspace: Path) -> None:
    result = await call("write_file", '{"path": "a.txt", "content": "bad \\ud800"}')
    assert result.is_error
    assert "surrogate" in result.content
    assert not (workspace / "a.txt").exists()


async def test_binary_content_gets_a_binary_diff(call: Call, workspace: Path) -> None:
    result = await call("write_file", {"path": "blob.bin", "content": "a\u0000b"})
    assert not result.is_error
    assert (workspace / "blob.bin").read_bytes() == b"a\x00b"
    assert result.diff == "Binary files /dev/null and b/blob.bin differ\n"


async def test_missing_arguments_fail_validation(call: Call) -> None:
    result = await call("write_file", {"path": "a.txt"})
    assert result.is_error
    assert "content" in result.content


async def test_an_empty_new_file_is_created_without_a_diff(call: Call, workspace: Path) -> None:
    result = await call("write_file", {"path": "empty.txt", "content": ""})
    assert not result.is_error
    assert result.content == "created empty.txt (0 lines, 0 B)"
    assert result.diff is None
    assert (workspace / "empty.txt").read_bytes() == b""


async def test_a_file_too_large_to_diff_is_still_replaced(call: Call, workspace: Path) -> None:
    path = write(workspace, "big.txt", "x" * (MAX_DIFF_INPUT_BYTES + 1))
    result = await call("write_file", {"path": "big.txt", "content": "small\n"})
    assert not result.is_error
    assert "too large to show a diff" in result.content
    assert result.diff is None
    assert path.read_text() == "small\n"


class HeldCommit:
    """Replaces ``commit`` in ``module``: the write waits in its thread until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = module.commit

        def held(*args: Any, **kwargs: Any) -> None:
            self.entered.set()
            self.release.wait(30)
            real(*args, **kwargs)

        monkeypatch.setattr(module, "commit", held)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30)


async def test_a_write_cancelled_once_under_way_finishes_and_returns_its_result(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldCommit(monkeypatch, write_file_module)
    task = asyncio.ensure_future(call("write_file", {"path": "a.txt", "content": "new\n"}))
    await held.wait_entered()
    task.cancel()
    held.release.set()
    result = await task
    assert not result.is_error and result.content.startswith("created a.txt")
    assert (workspace / "a.txt").read_text() == "new\n"


async def test_a_write_cancelled_before_its_thread_starts_writes_nothing(
    call: Call, workspace: Path
) -> None:
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(1)
    loop.set_default_executor(pool)
    busy = threading.Event()
    occupied = loop.run_in_executor(None, busy.wait, 30)  # the only worker is taken
    task = asyncio.ensure_future(call("write_file", {"path": "a.txt", "content": "new\n"}))
    await asyncio.sleep(0)  # the call is queued behind the busy worker
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    busy.set()
    await occupied
    pool.shutdown(wait=True)  # the queued write has had its turn
    assert not (workspace / "a.txt").exists()
