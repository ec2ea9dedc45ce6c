"""An MCP server's stderr reaches tether's stderr a line at a time, named and escaped."""

from __future__ import annotations

import io
import sys

import anyio
import pytest

from tether.tools.mcp.stdio import STDERR_LINE_BYTES, relay_stderr

pytestmark = pytest.mark.anyio

WRITER = r"""
import sys
err = sys.stderr.buffer
err.write(b"\x1b]52;c;c2VjcmV0\x07clipboard\n")
err.write(b"\x1b[2J\rover\n")
err.write(b"x" * 20000 + b"\n")
err.write("caf\u00e9 \U0001f600\n".encode())
err.flush()
err.write(b"no newline at the end")
"""


async def relayed(code: str) -> list[str]:
    errlog = io.StringIO()
    process = await anyio.open_process([sys.executable, "-c", code])
    async with process:
        await relay_stderr(process.stderr, errlog, "[mcp demo] ")
    return errlog.getvalue().splitlines()


async def test_lines_are_named_and_their_controls_escaped() -> None:
    lines = await relayed(WRITER)
    assert lines[0] == r"[mcp demo] \x1b]52;c;c2VjcmV0\x07clipboard"
    assert lines[1] == r"[mcp demo] \x1b[2J\rover"
    assert "\x1b" not in "".join(lines) and "\r" not in "".join(lines)
    assert lines[3] == "[mcp demo] café 😀"
    assert lines[4] == "[mcp demo] no newline at the end"


async def test_a_long_line_is_cut_with_the_count_left_out() -> None:
    lines = await relayed(WRITER)
    kept = "x" * STDERR_LINE_BYTES
    assert lines[2] == f"[mcp demo] {kept} [{20000 - STDERR_LINE_BYTES} more bytes]"


async def test_a_line_split_over_many_reads_is_one_line() -> None:
    code = (
        "import sys, time\n"
        "for part in (b'one ', b'two ', b'three\\nfour'):\n"
        "    sys.stderr.buffer.write(part); sys.stderr.flush(); time.sleep(0.05)\n"
    )
    assert await relayed(code) == ["[mcp demo] one two three", "[mcp demo] four"]
