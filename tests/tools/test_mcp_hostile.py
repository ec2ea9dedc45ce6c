"""MCP servers as attackers: a real misbehaving server (tests/fakes/hostile_mcp_server.py) on
stdio, through the SDK's client session and tether's transport, must not stall tether, grow its
memory without bound, or shadow a built-in tool."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tether.protocol.tools import McpServerSpec
from tether.tools import BUILTIN_TOOL_NAMES, ToolContext
from tether.tools.mcp import McpExecutor, McpManager
from tether.tools.mcp.connection import MAX_LIST_PAGES, MAX_TOOLS
from tether.tools.mcp.tools import MAX_RESULT_BYTES, trim_tool

from .test_mcp import alive, call, eventually, executor

HOSTILE = Path(__file__).resolve().parents[1] / "fakes" / "hostile_mcp_server.py"
MiB = 1024 * 1024


def hostile(tmp_path: Path, *options: str, name: str = "h", timeout: float = 30.0) -> McpServerSpec:
    return McpServerSpec(
        name=name,
        command=sys.executable,
        args=[str(HOSTILE), *options],
        env={"TETHER_MCP_PIDS": str(tmp_path / f"{name}-pids.txt")},
        timeout=timeout,
    )


def pids(tmp_path: Path, name: str = "h") -> list[int]:
    path = tmp_path / f"{name}-pids.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def peak_rss_reset() -> bool:
    """Reset this process's peak resident size (VmHWM), where Linux allows it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def rss(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (the peak since the last reset) of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


@pytest.fixture
async def manager() -> AsyncIterator[McpManager]:
    manager = McpManager()
    yield manager
    await manager.aclose()


@pytest.fixture
def progress() -> list[str]:
    return []


@pytest.fixture
def context(workspace: Path, progress: list[str]) -> ToolContext:
    return ToolContext(workspace=workspace, session_id="s1", run_id="r1", progress=progress.append)


async def offered(manager: McpManager, workspace: Path, *specs: McpServerSpec) -> McpExecutor:
    return await executor(manager, workspace, *specs)


async def echo_works(tools: McpExecutor, context: ToolContext, prefix: str = "h") -> bool:
    result = await call(tools, context, f"{prefix}__echo", text="still here")
    return result.content == "still here" and not result.is_error


# Results: too large, never ending, never sent, invalid.


async def test_a_large_result_is_cut_to_the_cap_with_a_note(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path))

    result = await call(tools, context, "h__huge", bytes=2 * MiB)

    assert not result.is_error
    assert len(result.content.encode()) < MAX_RESULT_BYTES + 200
    assert "of output cut here: 2.0 MiB in all" in result.content


async def test_a_message_over_the_limit_fails_its_call_at_once_and_the_server_stays_usable(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path))

    result = await call(tools, context, "h__huge", bytes=20 * MiB)

    assert result.is_error
    assert "over the limit of 8.0 MiB" in result.content
    assert await echo_works(tools, context)


async def test_a_result_that_never_ends_times_out_and_the_stuck_server_is_stopped(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path, timeout=1.0))
    [pid] = pids(tmp_path)

    result = await call(tools, context, "h__endless")

    assert result.is_error
    assert "timed out after 1 s" in result.content
    assert "does not answer a ping either, so it was stopped" in result.content
    after = await call(tools, context, "h__echo", text="x")
    assert after.is_error
    assert "is not running (it stopped answering" in after.content
    await manager.aclose()
    assert not alive(pid)


async def test_a_wedged_server_is_reported_unavailable_and_restarted_at_the_next_run(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    spec = hostile(tmp_path, timeout=1.0)
    tools = await offered(manager, workspace, spec)

    assert (await call(tools, context, "h__wedge")).is_error
    assert "is not running" in (await call(tools, context, "h__echo", text="x")).content

    tools = await offered(manager, workspace, spec)
    assert await echo_works(tools, context)
    assert len(pids(tmp_path)) == 2


async def test_a_call_never_answered_times_out_and_the_live_server_is_kept(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path, timeout=1.0))

    result = await call(tools, context, "h__never")

    assert result.is_error
    assert result.content == "'never' on MCP server 'h' timed out after 1 s"
    assert await echo_works(tools, context)
    assert len(pids(tmp_path)) == 1


async def test_an_answer_that_is_not_json_rpc_fails_its_call_at_once(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path))

    result = await call(tools, context, "h__bad_response")

    assert result.is_error
    assert "sent an invalid answer to 'bad_response'" in result.content
    assert await echo_works(tools, context)


async def test_a_result_that_is_not_a_tool_result_is_a_clear_error(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path))

    result = await call(tools, context, "h__bad_result")

    assert result.is_error
    assert "sent an invalid result for 'bad_result'" in result.content
    assert "content: Input should be a valid list" in result.content
    assert await echo_works(tools, context)


async def test_lines_that_are_not_json_are_named_when_the_call_times_out(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path, timeout=1.0))

    result = await call(tools, context, "h__garbage")

    assert result.is_error
    assert "meanwhile it sent 1 invalid message(s)" in result.content
    assert "this is not JSON at all" in result.content
    assert await echo_works(tools, context)


async def test_a_server_that_exits_during_a_call_is_reported_not_waited_for(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path))

    result = await call(tools, context, "h__exit")

    assert result.is_error
    assert "stopped (it crashed or exited)" in result.content


# Floods: memory stays bounded, calls still complete.


@pytest.mark.parametrize(
    ("tool", "count"), [("flood", 100_000), ("request_flood", 50_000), ("progress_flood", 50_000)]
)
async def test_a_flood_from_the_server_keeps_memory_bounded_and_the_call_completes(
    manager: McpManager,
    workspace: Path,
    tmp_path: Path,
    context: ToolContext,
    progress: list[str],
    tool: str,
    count: int,
):
    tools = await offered(manager, workspace, hostile(tmp_path))
    if not peak_rss_reset():
        pytest.skip("the peak resident size cannot be reset here")
    before = rss("VmRSS")

    result = await call(tools, context, f"h__{tool}", count=count)

    assert result.content == f"{tool} {count}"
    grown = rss("VmHWM") - before
    assert grown < 48 * MiB, f"peak resident size grew by {grown / MiB:.0f} MiB"
    assert len(progress) < 1000  # a burst, then ten a second
    assert await echo_works(tools, context)


async def test_a_flood_while_starting_does_not_keep_the_server_from_starting(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    tools = await offered(manager, workspace, hostile(tmp_path, "--flood-at-start", "20000"))

    assert await echo_works(tools, context)


async def test_a_server_that_never_initializes_is_given_up_at_the_start_timeout_and_stopped(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    mute = hostile(tmp_path, "--never-initialize", name="mute")
    tools = await manager.executor(
        [], servers=[mute], enabled=None, session_id="s1", workspace=workspace, start_timeout=0.5
    )

    [failure] = tools.failures()
    assert failure.reason == "it did not initialize within 0.5 s (mcp.start_timeout)"
    result = await call(tools, context, "mute__echo", text="?")
    assert result.is_error and "MCP server 'mute' is not running" in result.content
    [pid] = pids(tmp_path, "mute")
    await eventually(lambda: not alive(pid), "the server that never initialized is stopped")


async def test_the_start_timeout_bounds_starting_and_listing_together(
    manager: McpManager, workspace: Path, tmp_path: Path
):
    """Each step within the bound, both together over it: the server is given up."""
    slow = hostile(tmp_path, "--slow-start", "0.7", name="slow")
    tools = await manager.executor(
        [], servers=[slow], enabled=None, session_id="s1", workspace=workspace, start_timeout=1
    )

    [failure] = tools.failures()
    assert failure.reason == "it did not list its tools within 1 s (mcp.start_timeout)"


async def test_cancelling_a_run_while_a_server_starts_stops_it_and_propagates(
    manager: McpManager, workspace: Path, tmp_path: Path
):
    mute = hostile(tmp_path, "--never-initialize", name="mute")
    starting = asyncio.ensure_future(
        manager.executor(
            [], servers=[mute], enabled=None, session_id="s1", workspace=workspace, start_timeout=60
        )
    )
    await eventually(lambda: bool(pids(tmp_path, "mute")), "the server runs")
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(starting, 10)
    [pid] = pids(tmp_path, "mute")
    await eventually(lambda: not alive(pid), "the server is stopped")


# Tool lists: how many, how named.


async def test_only_the_first_tools_of_a_server_are_taken_and_the_rest_are_logged(
    manager: McpManager, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    with caplog.at_level(logging.WARNING, logger="tether.tools.mcp.manager"):
        tools = await offered(manager, workspace, hostile(tmp_path, "--tools", "10000"))

    names = [spec.name for spec in tools.list() if spec.name.startswith("h__")]
    assert len(names) == MAX_TOOLS
    assert names[:2] == ["h__echo", "h__huge"]
    [warning] = [r.getMessage() for r in caplog.records if "only the first" in r.getMessage()]
    assert f"offers 10012 tools; only the first {MAX_TOOLS} are taken" in warning
    assert "'t116'" in warning
    assert "and 9864 more" in warning


async def test_a_list_of_tools_that_never_ends_is_read_up_to_the_page_cap(
    manager: McpManager, workspace: Path, tmp_path: Path
):
    tools = await offered(manager, workspace, hostile(tmp_path, "--endless-pages"))

    names = [spec.name for spec in tools.list() if spec.name.startswith("h__")]
    assert names == [f"h__p{page}" for page in range(1, MAX_LIST_PAGES + 1)]


async def test_long_descriptions_are_cut(manager: McpManager, workspace: Path, tmp_path: Path):
    options = ("--description-bytes", "100000")
    tools = await offered(manager, workspace, hostile(tmp_path, *options))

    echo = next(spec for spec in tools.list() if spec.name == "h__echo")
    assert len(echo.description) < 4200
    assert echo.description.endswith("[description cut]")


async def test_tools_named_like_built_ins_never_shadow_them(
    manager: McpManager, workspace: Path, tmp_path: Path, context: ToolContext
):
    (workspace / "mine.txt").write_text("the workspace's own file\n")
    spec = hostile(tmp_path, "--names", "read_file,list_files,h__echo")
    tools = await offered(manager, workspace, spec)

    names = [spec.name for spec in tools.list()]
    assert names.count("read_file") == 1
    assert {"h__read_file", "h__list_files", "h__h__echo"} <= set(names)
    builtin = await call(tools, context, "read_file", path="mine.txt")
    assert builtin.content == "1\tthe workspace's own file"
    remote = await call(tools, context, "h__read_file", path="mine.txt")
    assert remote.content == "ok"


async def test_a_name_clash_between_servers_goes_to_the_first_configured_and_is_logged(
    manager: McpManager, workspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    first = hostile(tmp_path, "--names", "b__c", name="a")  # offers a__b__c
    second = hostile(tmp_path, "--names", "c", name="a__b")  # offers a__b__c too

    def owners(tools: McpExecutor) -> dict[str, Any]:
        found = {}
        for name in ("a__b__c", "a__b__c_2"):
            tool = tools.registry.get(name)
            assert tool is not None, name
            found[name] = tool.server.name  # type: ignore[attr-defined]
        return found

    with caplog.at_level(logging.WARNING, logger="tether.tools.mcp.manager"):
        tools = await offered(manager, workspace, first, second)
    assert owners(tools) == {"a__b__c": "a", "a__b__c_2": "a__b"}
    assert any("is offered as 'a__b__c_2'" in r.getMessage() for r in caplog.records)

    again = await executor(manager, workspace, second, first, session_id="s2")
    assert owners(again) == {"a__b__c": "a__b", "a__b__c_2": "a"}


def test_no_built_in_tool_name_has_the_separator_of_mcp_names():
    assert not [name for name in BUILTIN_TOOL_NAMES if "__" in name]


def test_a_listed_tool_is_trimmed_and_one_with_a_huge_schema_is_left_out(
    caplog: pytest.LogCaptureFixture,
):
    schema = {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(5000)}}
    huge = types.Tool(name="huge", input_schema=schema)
    wordy = types.Tool(
        name="wordy",
        description="w" * 100_000,
        input_schema={"type": "object"},
        output_schema={"type": "object", "description": "o" * 100_000},
    )

    with caplog.at_level(logging.WARNING, logger="tether.tools.mcp.tools"):
        assert trim_tool("h", huge) is None
    assert "its input schema is" in caplog.text
    trimmed = trim_tool("h", wordy)
    assert trimmed is not None
    assert trimmed.output_schema is None
    assert trimmed.description is not None and len(trimmed.description) < 4200
