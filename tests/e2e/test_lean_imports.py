"""What a plain run does not import: the first prompt does not wait for packages only some
runs need (jsonschema for ``outputSchema``, pathspec for a tree with ignore files, pygls for
the standard LSP methods). A server where importing them fails still answers such a run, and
one that needs them reports the failure."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tether.client import TetherClient
from tether.protocol.kernel import RunResult
from tether.testing import scripted_options, tool_call

REFUSED = "jsonschema,pathspec,pygls,lsprotocol"
SERVER = [sys.executable, "-P", str(Path(__file__).with_name("imports_refused.py")), REFUSED]


async def run_in(project: Path, turns: list[Any], prompt: str, **options: Any) -> RunResult:
    """One run of ``turns`` on a server that may not import them, as an editor starts it."""
    script = project.parent / "script.json"
    script.write_text(json.dumps(turns))
    async with asyncio.timeout(30):
        async with TetherClient.spawn(
            workspace=project, options=scripted_options(script) | options, argv=SERVER
        ) as client:
            client.connection.notify("initialized", {})
            session = await client.create_session()
            return await client.run(session.session_id, prompt)


async def test_a_run_that_reads_and_lists_files_imports_none_of_them(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("print('hi')\n")
    turns = [
        {"toolCalls": [tool_call("list_files", "c1", path=".")]},
        {"toolCalls": [tool_call("read_file", "c2", path="src/app.py")]},
        {"text": "It prints hi."},
    ]
    result = await run_in(project, turns, "what does it print?")
    assert result.response == "It prints hi."
    assert [call.is_error for call in result.tool_calls] == [False, False]
    assert "src/app.py" in str(result.tool_calls[0].result)


async def test_a_run_that_needs_one_of_them_reports_it(tmp_path: Path) -> None:
    """The refusal is real: an ignore file makes the Python walk import pathspec, which fails
    (ripgrep's walk reads ignore files itself)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / ".gitignore").write_text("*.log\n")
    turns = [{"toolCalls": [tool_call("list_files", "c1", path=".")]}, {"text": "done"}]
    result = await run_in(project, turns, "list", tools={"search": "python"})
    assert result.tool_calls[0].is_error
    assert "pathspec" in str(result.tool_calls[0].result)


async def test_the_server_never_imports_the_terminal_packages(tmp_path: Path) -> None:
    """prompt_toolkit and rich are tether chat's and tether run's: a server refused them runs."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("hi\n")
    script = project.parent / "script.json"
    turns = [{"toolCalls": [tool_call("read_file", "c1", path="notes.txt")]}, {"text": "hi"}]
    script.write_text(json.dumps(turns))
    argv = [sys.executable, "-P", str(Path(__file__).with_name("imports_refused.py"))]
    async with asyncio.timeout(30):
        async with TetherClient.spawn(
            workspace=project,
            options=scripted_options(script),
            argv=[*argv, "prompt_toolkit,rich"],
        ) as client:
            session = await client.create_session()
            result = await client.run(session.session_id, "read it")
    assert result.response == "hi"
    assert [call.is_error for call in result.tool_calls] == [False]


HANDSHAKE_REFUSED = (
    "tether.kernel,tether.protocol.kernel,tether.providers,tether.tools.mcp,httpx,aiohttp,mcp,"
    "pygls,lsprotocol,jsonschema,pathspec"
)


async def test_the_handshake_imports_neither_the_kernel_nor_its_models_nor_a_provider_stack(
    tmp_path: Path,
) -> None:
    """``initialize`` waits only for what it needs: the kernel, the ``kernel/*`` models, the
    providers and MCP load after it (in the background, or when a run needs them)."""
    script = tmp_path / "script.json"
    script.write_text("[]")
    argv = [sys.executable, "-P", str(Path(__file__).with_name("imports_refused.py"))]
    async with asyncio.timeout(30):
        async with TetherClient.spawn(
            workspace=tmp_path, options=scripted_options(script), argv=[*argv, HANDSHAKE_REFUSED]
        ) as client:
            session = await client.create_session()
    assert session.session_id


SESSION_LAYER = (
    "tether.protocol.sessions,tether.protocol.messages,tether.protocol.checkpoints,"
    "tether.sessions.service,tether.sessions.in_memory,tether.rpc.handlers"
)


async def test_the_handshake_makes_no_session_service_nor_builds_the_session_models(
    tmp_path: Path,
) -> None:
    """``initialize`` is answered (the session methods and the store named) without the session
    service, its store and the session, message and checkpoint models: they load after it, in
    the background, and the first ``session/*`` request waits for them."""
    script = tmp_path / "script.json"
    script.write_text("[]")
    argv = [sys.executable, "-P", str(Path(__file__).with_name("imports_refused.py"))]
    async with asyncio.timeout(30):
        async with TetherClient.spawn(
            workspace=tmp_path, options=scripted_options(script), argv=[*argv, SESSION_LAYER]
        ) as client:
            capabilities = client.initialize_result.capabilities
    assert {"session/create", "session/get", "session/rewind"} <= set(capabilities.methods)
    assert (capabilities.sessions.store, capabilities.sessions.durable) == ("memory", False)
