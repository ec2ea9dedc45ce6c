"""edit_file: exact-string replacement with a uniqueness check and a unified diff."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

import tether.tools.edit_file as edit_file_module
from tests.files import write
from tether.tools import ToolContext, ToolRegistry
from tether.tools.edit_file import EditFile

from .conftest import Call
from .test_write_file import HeldCommit, leftovers

APP = "def main():\n    print('hello')\n    return 0\n"


async def test_a_unique_string_is_replaced_and_the_diff_returned(
    call: Call, workspace: Path
) -> None:
    path = write(workspace, "app.py", APP)
    result = await call(
        "edit_file",
        {"path": "app.py", "oldString": "print('hello')", "newString": "print('bye')"},
    )
    assert not result.is_error, result.content
    assert path.read_text() == APP.replace("hello", "bye")
    diff = (
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n def main():\n"
        "-    print('hello')\n+    print('bye')\n     return 0\n"
    )
    assert result.diff == diff
    assert result.content == f"edited app.py: replaced 1 occurrence\n{diff}"
    assert leftovers(workspace) == []


async def test_a_string_that_is_not_there_is_an_error_and_nothing_changes(
    call: Call, workspace: Path
) -> None:
    path = write(workspace, "app.py", APP)
    result = await call("edit_file", {"path": "app.py", "oldString": "nope", "newString": "x"})
    assert result.is_error
    assert "not found" in result.content
    assert path.read_text() == APP


async def test_a_string_found_more_than_once_is_an_error_with_the_count(
    call: Call, workspace: Path
) -> None:
    path = write(workspace, "a.txt", "x = 1\nx = 1\nx = 1\n")
    result = await call("edit_file", {"path": "a.txt", "oldString": "x = 1", "newString": "y"})
    assert result.is_error
    assert "3 times" in result.content and "replaceAll" in result.content
    assert path.read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_replace_all_replaces_every_occurrence(call: Call, workspace: Path) -> None:
    path = write(workspace, "a.txt", "x = 1\nx = 1\nz\n")
    result = await call(
        "edit_file", {"path": "a.txt", "oldString": "x", "newString": "y", "replaceAll": True}
    )
    assert not result.is_error
    assert result.content.startswith("edited a.txt: replaced 2 occurrences")
    assert path.read_text() == "y = 1\ny = 1\nz\n"


async def test_a_binary_file_is_refused_and_not_shown(call: Call, workspace: Path) -> None:
    path = write(workspace, "blob.bin", b"\x00\x01SECRET-BYTES\x02")
    result = await call("edit_file", {"path": "blob.bin", "oldString": "S", "newString": "T"})
    assert result.is_error
    assert "binary" in result.content
    assert "SECRET-BYTES" not in result.content
    assert path.read_bytes() == b"\x00\x01SECRET-BYTES\x02"


async def test_a_missing_file_is_an_error(call: Call, workspace: Path) -> None:
    result = await call("edit_file", {"path": "nope.txt", "oldString": "a", "newString": "b"})
    assert result.is_error
    assert "no such file" in result.content
    assert not (workspace / "nope.txt").exists()


async def test_identical_strings_are_an_error(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", "abc")
    result = await call("edit_file", {"path": "a.txt", "oldString": "b", "newString": "b"})
    assert result.is_error
    assert "same" in result.content


async def test_an_empty_old_string_fails_validation(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", "abc")
    result = await call("edit_file", {"path": "a.txt", "oldString": "", "newString": "b"})
    assert result.is_error
    assert "oldString" in result.content


async def test_a_crlf_file_is_matched_with_lf_strings_and_keeps_crlf(
    call: Call, workspace: Path
) -> None:
    path = write(workspace, "dos.txt", b"one\r\ntwo\r\nthree\r\n")
    result = await call(
        "edit_file", {"path": "dos.txt", "oldString": "one\ntwo", "newString": "1\n2\n2.5"}
    )
    assert not result.is_error, result.content
    assert path.read_bytes() == b"1\r\n2\r\n2.5\r\nthree\r\n"


async def test_undecodable_bytes_elsewhere_in_the_file_survive_an_edit(
    call: Call, workspace: Path
) -> None:
    path = write(workspace, "latin1.txt", b"caf\xe9\nold\n")
    result = await call("edit_file", {"path": "latin1.txt", "oldString": "old", "newString": "new"})
    assert not result.is_error, result.content
    assert path.read_bytes() == b"caf\xe9\nnew\n"


async def test_a_file_over_the_size_cap_is_refused(workspace: Path) -> None:
    context = ToolContext(workspace=workspace, session_id="s", run_id="r")
    call = Call(ToolRegistry([EditFile(max_file_bytes=10)]), context)
    write(workspace, "big.txt", "x" * 11)
    write(workspace, "fits.txt", "x" * 10)
    result = await call("edit_file", {"path": "big.txt", "oldString": "x", "newString": "y"})
    assert result.is_error and "too large" in result.content
    grown = await call(
        "edit_file", {"path": "fits.txt", "oldString": "x" * 10, "newString": "y" * 11}
    )
    assert grown.is_error and "too large" in grown.content
    assert (workspace / "fits.txt").read_text() == "x" * 10


async def test_a_symlink_is_not_edited_through(call: Call, workspace: Path) -> None:
    target = write(workspace, "target.txt", "abc\n")
    (workspace / "alias.txt").symlink_to(target)
    result = await call("edit_file", {"path": "alias.txt", "oldString": "b", "newString": "x"})
    assert result.is_error and "symbolic link" in result.content
    assert target.read_text() == "abc\n"


async def test_a_directory_is_refused(call: Call, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    result = await call("edit_file", {"path": "dir", "oldString": "a", "newString": "b"})
    assert result.is_error and "directory" in result.content


async def test_an_edited_file_keeps_its_permission_bits(call: Call, workspace: Path) -> None:
    path = write(workspace, "run.sh", "#!/bin/sh\necho a\n")
    path.chmod(0o700)
    await call("edit_file", {"path": "run.sh", "oldString": "echo a", "newString": "echo b"})
    assert path.read_text() == "#!/bin/sh\necho b\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


async def test_an_edit_cancelled_once_under_way_finishes_and_returns_its_result(
    call: Call, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(workspace, "app.py", APP)
    held = HeldCommit(monkeypatch, edit_file_module)
    arguments = {"path": "app.py", "oldString": "hello", "newString": "bye"}
    task = asyncio.ensure_future(call("edit_file", arguments))
    await held.wait_entered()
    task.cancel()
    held.release.set()
    result = await task
    assert not result.is_error and result.content.startswith("edited app.py")
    assert (workspace / "app.py").read_text() == APP.replace("hello", "bye")
