"""MCP servers as tool sources, against a real MCP server (tests/fakes/mcp_server.py) on stdio."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.fakes.sse import sse_server
from tether.protocol import MessageInput, Role
from tether.protocol.limits import MAX_JSON_DEPTH
from tether.protocol.tools import McpServerSpec, ToolKind
from tether.tools import ToolContext, ToolResult, builtin_tools
from tether.tools.mcp import McpExecutor, McpManager
from tether.tools.mcp.tools import render_result, tool_name

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds (it reads another process's doings), polling for 20 s."""
    try:
        async with asyncio.timeout(20):
            while not check():  # noqa: ASYNC110 - nothing to wait on but the other process
                await asyncio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"timed out waiting until {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Fake:
    """Where the fake server reports: its pids, one a line, and the slow tool's marker."""

    def __init__(self, tmp_path: Path) -> None:
        self.pids_file = tmp_path / "pids.txt"
        self.marker = tmp_path / "marker.txt"

    def spec(self, name: str = "fake", **fields: Any) -> McpServerSpec:
        env = {"TETHER_MCP_PIDS": str(self.pids_file), "TETHER_MCP_MARKER": str(self.marker)}
        return McpServerSpec(name=name, command=sys.executable, args=[str(FAKE)], env=env, **fields)

    def pids(self) -> list[int]:
        if not self.pids_file.exists():
            return []
        return [int(line) for line in self.pids_file.read_text().split()]

    def marked(self, text: str) -> bool:
        return self.marker.exists() and self.marker.read_text() == text


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    return Fake(tmp_path)


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


async def executor(
    manager: McpManager,
    workspace: Path,
    *servers: McpServerSpec,
    enabled: list[str] | None = None,
    session_id: str = "s1",
) -> McpExecutor:
    return await manager.executor(
        builtin_tools(),
        servers=servers,
        enabled=enabled,
        session_id=session_id,
        workspace=workspace,
    )


async def call(tools: McpExecutor, context: ToolContext, name: str, **arguments: Any) -> ToolResult:
    return await tools.execute(name, json.dumps(arguments), context)


async def test_the_tools_of_a_server_are_offered_with_its_prefix_schemas_and_kinds(
    manager: McpManager, workspace: Path, fake: Fake
):
    tools = await executor(manager, workspace, fake.spec())

    specs = {spec.name: spec for spec in tools.list()}
    assert [name for name in specs if name.startswith("fake__")] == [
        "fake__echo",
        "fake__count",
        "fake__fail",
        "fake__slow",
        "fake__crash",
        "fake__grow",
    ]
    assert {"read_file", "list_files", "search_text"} <= specs.keys()
    echo = specs["fake__echo"]
    assert echo.description == "Say the text back."
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]
    assert (echo.kind, specs["fake__crash"].kind, specs["fake__count"].kind) == (
        ToolKind.READ,
        ToolKind.EXECUTE,
        ToolKind.EXECUTE,
    )


async def test_a_call_is_forwarded_and_its_text_comes_back(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    tools = await executor(manager, workspace, fake.spec())
    result = await call(tools, context, "fake__echo", text="hello, MCP")
    # the server's structuredContent comes along as the result's output
    assert result == ToolResult("hello, MCP", output={"result": "hello, MCP"})


async def test_an_is_error_result_goes_to_the_model_as_an_error(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    tools = await executor(manager, workspace, fake.spec())
    result = await call(tools, context, "fake__fail", reason="no luck")
    assert result.is_error
    assert "failed on purpose: no luck" in result.content


async def test_progress_notifications_are_reported_through_the_context(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext, progress: list[str]
):
    tools = await executor(manager, workspace, fake.spec())
    result = await call(tools, context, "fake__count", steps=3)
    assert result == ToolResult("counted to 3", output={"result": "counted to 3"})
    assert progress == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]


async def test_a_crash_is_an_error_result_and_the_next_run_restarts_the_server(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    tools = await executor(manager, workspace, fake.spec())
    [first] = fake.pids()

    crashed = await call(tools, context, "fake__crash")
    assert crashed.is_error
    assert "MCP server 'fake' stopped" in crashed.content
    again = await call(tools, context, "fake__echo", text="still there?")
    assert again.is_error and "not running" in again.content

    tools = await executor(manager, workspace, fake.spec())  # the next run
    assert await call(tools, context, "fake__echo", text="back") == ToolResult(
        "back", output={"result": "back"}
    )
    assert len(fake.pids()) == 2 and fake.pids()[0] == first
    await eventually(lambda: not alive(first), "the crashed server is gone")


async def test_a_server_that_fails_to_start_is_a_clear_error_and_the_others_still_work(
    manager: McpManager,
    workspace: Path,
    fake: Fake,
    context: ToolContext,
    caplog: pytest.LogCaptureFixture,
):
    broken = McpServerSpec(name="broken", command=str(workspace / "no-such-program"))
    tools = await executor(manager, workspace, broken, fake.spec())

    assert not [spec for spec in tools.list() if spec.name.startswith("broken__")]
    result = await call(tools, context, "broken__anything")
    assert result.is_error
    assert "MCP server 'broken' is not running (it failed to start" in result.content
    assert any("broken failed to start" in r.getMessage() for r in caplog.records)
    assert await call(tools, context, "fake__echo", text="ok") == ToolResult(
        "ok", output={"result": "ok"}
    )
    assert (await call(tools, context, "read_file", path="nothing.txt")).is_error  # a real tool


async def start_early(manager: McpManager, workspace: Path, *servers: McpServerSpec) -> None:
    await manager.start(servers=servers, enabled=None, session_id="s1", workspace=workspace)


async def test_servers_started_early_serve_the_next_run_without_starting_again(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    await start_early(manager, workspace, fake.spec())
    assert len(fake.pids()) == 1
    tools = await executor(manager, workspace, fake.spec())
    assert await call(tools, context, "fake__echo", text="ok") == ToolResult(
        "ok", output={"result": "ok"}
    )
    assert len(fake.pids()) == 1


async def test_a_run_while_a_server_is_starting_early_waits_for_that_start(
    manager: McpManager, workspace: Path, fake: Fake
):
    starting = asyncio.ensure_future(start_early(manager, workspace, fake.spec()))
    await asyncio.sleep(0)  # the start is under way
    tools = await executor(manager, workspace, fake.spec())
    await starting
    assert "fake__echo" in [spec.name for spec in tools.list()]
    assert len(fake.pids()) == 1


async def test_an_early_start_that_failed_is_the_next_runs_failure_and_the_run_after_retries(
    manager: McpManager, workspace: Path, context: ToolContext, caplog: pytest.LogCaptureFixture
):
    program = workspace / "server-later"
    broken = McpServerSpec(name="broken", command=str(program))
    await start_early(manager, workspace, broken)
    program.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE}\n")
    program.chmod(0o755)  # would start now: the next run still reports the early failure
    first = await executor(manager, workspace, broken)
    assert "broken" in [failure.prefix.removesuffix("__") for failure in first.failures()]
    result = await call(first, context, "broken__echo", text="x")
    assert "MCP server 'broken' is not running (it failed to start" in result.content
    second = await executor(manager, workspace, broken)
    assert await call(second, context, "broken__echo", text="x") == ToolResult(
        "x", output={"result": "x"}
    )


async def test_closing_the_manager_stops_a_server_started_early(
    manager: McpManager, workspace: Path, fake: Fake
):
    await start_early(manager, workspace, fake.spec())
    [pid] = fake.pids()
    await manager.aclose()
    await eventually(lambda: not alive(pid), "the server process is gone")


async def test_cancelling_a_call_cancels_it_at_the_server(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    tools = await executor(manager, workspace, fake.spec())
    task = asyncio.create_task(call(tools, context, "fake__slow"))
    await eventually(lambda: fake.marked("started"), "the slow tool started")

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: fake.marked("cancelled"), "the server saw the cancellation")
    assert await call(tools, context, "fake__echo", text="alive") == ToolResult(
        "alive", output={"result": "alive"}
    )


async def test_a_call_that_takes_too_long_times_out_and_is_cancelled_at_the_server(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    tools = await executor(manager, workspace, fake.spec(timeout=0.5))
    result = await call(tools, context, "fake__slow")
    assert result.is_error
    assert result.content == "'slow' on MCP server 'fake' timed out after 0.5 s"
    await eventually(lambda: fake.marked("cancelled"), "the server saw the cancellation")


async def test_closing_stops_the_server_process(manager: McpManager, workspace: Path, fake: Fake):
    await executor(manager, workspace, fake.spec())
    [pid] = fake.pids()
    assert alive(pid)
    await manager.aclose()
    await eventually(lambda: not alive(pid), "the server process is gone")


async def test_a_sessions_own_servers_stop_when_the_session_is_closed(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    manager.set_session_servers("s1", [fake.spec(name="mine")])
    tools = await executor(manager, workspace, session_id="s1")
    assert await call(tools, context, "mine__echo", text="own") == ToolResult(
        "own", output={"result": "own"}
    )
    other = await executor(manager, workspace, session_id="s2")
    assert not [spec for spec in other.list() if spec.name.startswith("mine__")]

    [pid] = fake.pids()
    await manager.close_session("s1")
    await eventually(lambda: not alive(pid), "the session's server is gone")
    assert not manager.has_session_servers("s1")


async def test_a_server_none_of_whose_tools_is_enabled_is_not_started(
    manager: McpManager, workspace: Path, fake: Fake
):
    tools = await executor(manager, workspace, fake.spec(), enabled=["read_file"])
    assert [spec.name for spec in tools.list()] == ["read_file"]
    assert fake.pids() == []


async def test_a_fork_gets_the_servers_of_its_parent_and_keeps_them_when_the_parent_goes(
    manager: McpManager, workspace: Path, fake: Fake
):
    manager.set_session_servers("parent", [fake.spec(name="mine")])
    manager.share_session_servers("parent", "fork")
    manager.share_session_servers("none", "other")
    await manager.close_session("parent")
    assert manager.has_session_servers("fork")
    assert not manager.has_session_servers("other")


async def test_configured_servers_are_shared_by_the_sessions_of_a_workspace(
    manager: McpManager, workspace: Path, fake: Fake
):
    await executor(manager, workspace, fake.spec(), session_id="s1")
    await executor(manager, workspace, fake.spec(), session_id="s2")
    await executor(manager, workspace, fake.spec(), session_id="s1")
    assert len(fake.pids()) == 1


async def test_the_allow_list_applies_to_mcp_tools_too(
    manager: McpManager, workspace: Path, fake: Fake, context: ToolContext
):
    tools = await executor(manager, workspace, fake.spec(), enabled=["fake__echo", "read_file"])
    assert [spec.name for spec in tools.list()] == ["read_file", "fake__echo"]
    refused = await call(tools, context, "fake__count", steps=1)
    assert refused.is_error and "unknown tool" in refused.content


def test_tool_names_are_sanitized_cut_to_64_characters_and_kept_unique():
    assert tool_name("fs", "read.file/v2") == "fs__read_file_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("server__xxx")
    assert tool_name("fs", "a.b", taken={"fs__a_b"}) == "fs__a_b_2"
    second = tool_name("server", "x" * 101, taken={long})
    assert len(second) == 64 and second.endswith("xx_2")


def test_content_other_than_text_is_described_in_the_result():
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="first"),
            types.ImageContent(type="image", data="aGVsbG8h", mime_type="image/png"),
            types.ResourceLink(type="resource_link", uri="file:///a.txt", name="a"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///b.txt", text="inline"),
            ),
        ]
    )
    assert render_result(result) == ToolResult(
        "first\n[image image/png, 6 bytes]\n[resource file:///a.txt]\ninline"
    )
    structured = types.CallToolResult(content=[], structured_content={"n": 1})
    assert render_result(structured) == ToolResult('{"n": 1}', output={"n": 1})
    assert render_result(types.CallToolResult(content=[], is_error=True)).is_error


def test_structured_content_nested_deeper_than_a_session_keeps_is_left_to_the_text():
    deep: dict[str, Any] = {}
    for _ in range(MAX_JSON_DEPTH):
        deep = {"d": deep}
    result = render_result(types.CallToolResult(content=[], structured_content=deep))
    assert result.output is None and result.content == json.dumps(deep)
    MessageInput(role=Role.TOOL, tool_call_id="c", content=result.content, output=result.output)


# --- streamable HTTP ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def accepting(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
async def http_server(fake: Fake) -> AsyncIterator[str]:
    """The fake server over streamable HTTP on loopback; its endpoint URL."""
    port = free_port()
    env = {
        **os.environ,
        "TETHER_MCP_PIDS": str(fake.pids_file),
        "TETHER_MCP_MARKER": str(fake.marker),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(FAKE), "--http", str(port), env=env, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await eventually(lambda: accepting(port), "the HTTP server listens")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        await process.wait()


async def test_a_server_over_streamable_http_offers_and_runs_its_tools(
    manager: McpManager,
    workspace: Path,
    context: ToolContext,
    progress: list[str],
    http_server: str,
    fake: Fake,
):
    spec = McpServerSpec(name="web", url=http_server, headers={"X-Test": "1"})
    tools = await executor(manager, workspace, spec)
    assert "web__echo" in [spec.name for spec in tools.list()]
    assert await call(tools, context, "web__echo", text="via HTTP") == ToolResult(
        "via HTTP", output={"result": "via HTTP"}
    )
    assert await call(tools, context, "web__count", steps=2) == ToolResult(
        "counted to 2", output={"result": "counted to 2"}
    )
    assert progress == ["step 1 of 2", "step 2 of 2"]

    task = asyncio.create_task(call(tools, context, "web__slow"))
    await eventually(lambda: fake.marked("started"), "the slow tool started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: fake.marked("cancelled"), "the server saw the cancellation")


# --- HTTP+SSE ----------------------------------------------------------------------------------


async def test_a_server_over_sse_offers_and_runs_its_tools_with_the_given_headers(
    manager: McpManager,
    workspace: Path,
    context: ToolContext,
    progress: list[str],
    fake: Fake,
    tmp_path: Path,
):
    headers_file = tmp_path / "headers.txt"
    async with sse_server({"TETHER_MCP_HEADERS": str(headers_file)}) as url:
        spec = McpServerSpec(
            name="events", url=url, transport="sse", headers={"Authorization": "Bearer t"}
        )
        tools = await executor(manager, workspace, spec)
        assert "events__echo" in [spec.name for spec in tools.list()]
        assert await call(tools, context, "events__echo", text="via SSE") == ToolResult(
            "via SSE", output={"result": "via SSE"}
        )
        assert await call(tools, context, "events__count", steps=2) == ToolResult(
            "counted to 2", output={"result": "counted to 2"}
        )
    assert progress == ["step 1 of 2", "step 2 of 2"]
    assert set(headers_file.read_text().split("\n")) - {""} == {"Bearer t"}


def test_transport_goes_with_url_only():
    with pytest.raises(ValueError, match="transport"):
        McpServerSpec(name="x", command="server", transport="sse")
    assert McpServerSpec(name="x", url="http://h/mcp").transport is None
