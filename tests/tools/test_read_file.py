"""read_file: numbered lines of a workspace text file, within a range and the output caps."""

from __future__ import annotations

from pathlib import Path

from tests.files import needs_enforced_modes, write
from tether.tools import ToolContext, ToolRegistry
from tether.tools.read_file import MAX_LINE_CHARS, MAX_OUTPUT_BYTES, MAX_OUTPUT_LINES, ReadFile

from .conftest import Call


def lines_of(count: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, count + 1))


async def test_a_file_comes_back_with_numbered_lines(call: Call, workspace: Path) -> None:
    write(workspace, "src/app.py", "import os\n\nprint(os.sep)\n")
    result = await call("read_file", {"path": "src/app.py"})
    assert not result.is_error
    assert result.content == "1\timport os\n2\t\n3\tprint(os.sep)"


async def test_numbers_are_aligned_to_the_widest_shown(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", lines_of(12))
    result = await call("read_file", {"path": "a.txt", "startLine": 8})
    assert result.content.splitlines()[0] == " 8\tline 8"
    assert result.content.splitlines()[-1] == "12\tline 12"


async def test_a_line_range_is_one_based_and_inclusive(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", lines_of(10))
    result = await call("read_file", {"path": "a.txt", "startLine": 3, "endLine": 5})
    assert result.content == "3\tline 3\n4\tline 4\n5\tline 5"


async def test_an_end_line_past_the_end_is_clamped_with_a_note(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", lines_of(3))
    result = await call("read_file", {"path": "a.txt", "startLine": 2, "endLine": 50})
    assert not result.is_error
    assert result.content.splitlines()[:2] == ["2\tline 2", "3\tline 3"]
    assert "3 lines" in result.content.splitlines()[-1]


async def test_a_start_line_past_the_end_is_an_error(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", lines_of(3))
    result = await call("read_file", {"path": "a.txt", "startLine": 4})
    assert result.is_error


async def test_an_end_line_before_the_start_line_is_an_error(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", lines_of(9))
    result = await call("read_file", {"path": "a.txt", "startLine": 5, "endLine": 4})
    assert result.is_error


async def test_line_numbers_below_one_fail_validation(call: Call, workspace: Path) -> None:
    write(workspace, "a.txt", lines_of(3))
    result = await call("read_file", {"path": "a.txt", "startLine": 0, "endLine": -1})
    assert result.is_error
    assert "startLine" in result.content and "endLine" in result.content


async def test_an_empty_file_says_so(call: Call, workspace: Path) -> None:
    write(workspace, "empty.txt", "")
    result = await call("read_file", {"path": "empty.txt"})
    assert not result.is_error
    assert result.content == "(empty file)"


async def test_crlf_and_a_missing_final_newline_read_as_editors_number_them(
    call: Call, workspace: Path
) -> None:
    write(workspace, "dos.txt", b"one\r\ntwo\r\n\r\nfour")
    result = await call("read_file", {"path": "dos.txt"})
    assert result.content == "1\tone\n2\ttwo\n3\t\n4\tfour"


async def test_an_absolute_path_inside_the_workspace_is_read(call: Call, workspace: Path) -> None:
    path = write(workspace, "a.txt", "x\n")
    result = await call("read_file", {"path": str(path)})
    assert result.content == "1\tx"


async def test_a_symlink_inside_the_workspace_is_read(call: Call, workspace: Path) -> None:
    write(workspace, "docs/real.md", "real\n")
    (workspace / "alias.md").symlink_to("docs/real.md")
    result = await call("read_file", {"path": "alias.md"})
    assert result.content == "1\treal"


async def test_a_missing_file_is_an_error(call: Call) -> None:
    result = await call("read_file", {"path": "nope.txt"})
    assert result.is_error


async def test_a_directory_is_an_error_pointing_at_list_files(call: Call, workspace: Path) -> None:
    (workspace / "src").mkdir()
    result = await call("read_file", {"path": "src"})
    assert result.is_error
    assert "list_files" in result.content


async def test_a_binary_file_is_reported_not_dumped(call: Call, workspace: Path) -> None:
    write(workspace, "logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    result = await call("read_file", {"path": "logo.png"})
    assert result.is_error
    assert "binary" in result.content
    assert "IHDR" not in result.content


async def test_text_that_is_not_utf8_is_shown_with_replacement_characters(
    call: Call, workspace: Path
) -> None:
    write(workspace, "latin1.txt", "café\n".encode("latin-1"))
    result = await call("read_file", {"path": "latin1.txt"})
    assert not result.is_error
    assert result.content.startswith("1\tcaf\ufffd")
    assert "UTF-8" in result.content


async def test_a_file_over_the_size_cap_is_refused(workspace: Path, context: ToolContext) -> None:
    write(workspace, "big.log", "x" * 2000)
    tools = ToolRegistry([ReadFile(max_file_bytes=1000)])
    result = await tools.execute("read_file", '{"path": "big.log"}', context)
    assert result.is_error
    assert "too large" in result.content


async def test_a_file_over_the_default_size_cap_is_refused_without_being_read(
    call: Call, workspace: Path
) -> None:
    with (workspace / "huge.bin").open("wb") as file:
        file.truncate(64 * 1024 * 1024)  # sparse: nothing is written
    result = await call("read_file", {"path": "huge.bin"})
    assert result.is_error
    assert "too large" in result.content


async def test_output_stops_at_the_line_cap_and_says_where_to_go_on(
    call: Call, workspace: Path
) -> None:
    write(workspace, "long.txt", lines_of(MAX_OUTPUT_LINES + 500))
    result = await call("read_file", {"path": "long.txt"})
    lines = result.content.splitlines()
    assert len(lines) == MAX_OUTPUT_LINES + 1
    assert lines[MAX_OUTPUT_LINES - 1].endswith(f"\tline {MAX_OUTPUT_LINES}")
    assert f"startLine={MAX_OUTPUT_LINES + 1}" in lines[-1]
    more = await call("read_file", {"path": "long.txt", "startLine": MAX_OUTPUT_LINES + 1})
    assert more.content.splitlines()[-1].endswith(f"\tline {MAX_OUTPUT_LINES + 500}")


async def test_output_stops_at_the_byte_cap(call: Call, workspace: Path) -> None:
    line = "y" * 1000
    write(workspace, "wide.txt", (line + "\n") * 1000)
    result = await call("read_file", {"path": "wide.txt"})
    assert len(result.content.encode()) <= MAX_OUTPUT_BYTES + 200
    assert "startLine=" in result.content.splitlines()[-1]


async def test_a_very_long_line_is_clipped(call: Call, workspace: Path) -> None:
    write(workspace, "min.js", "z" * (MAX_LINE_CHARS * 3))
    result = await call("read_file", {"path": "min.js"})
    assert not result.is_error
    assert len(result.content) < MAX_LINE_CHARS + 100
    assert str(MAX_LINE_CHARS * 3) in result.content


@needs_enforced_modes
async def test_an_unreadable_file_is_an_error(call: Call, workspace: Path) -> None:
    write(workspace, "locked.txt", "x").chmod(0)
    result = await call("read_file", {"path": "locked.txt"})
    assert result.is_error
