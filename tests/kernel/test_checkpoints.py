"""A run records its checkpoint in process: one ``checkpoint`` event per step that changed files,
none for a run that changed nothing, and a store that fails is told once without failing the
run."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tether.checkpoints import CheckpointStore
from tether.config import TetherConfig
from tether.kernel.checkpoints import Checkpoints
from tether.kernel.kernel import Kernel
from tether.memory import Memory
from tether.protocol import CreateSessionParams
from tether.protocol.kernel import RunParams
from tether.providers.scripted import ScriptedProvider
from tether.sessions import MemoryStore
from tether.tools import ToolExecutor, builtin_registry

from .support import tool_call

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="checkpoints need git",
)


async def run_events(
    tmp_path: Path, turns: list[dict[str, Any]], root: Path
) -> tuple[list[Any], Checkpoints, str]:
    """The progress events of one run of ``turns`` with checkpoints stored at ``root``."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "a.txt").write_text("a\n")
    store = MemoryStore()
    config = TetherConfig.model_validate(
        {"provider": {"type": "scripted", "model": "m"}, "tools": {"approval": "auto"}}
    )
    checkpoints = Checkpoints(store, CheckpointStore(root), lambda: timedelta(minutes=1))

    async def tools(config: TetherConfig, session_id: str, workspace: Path) -> ToolExecutor:
        return builtin_registry(config.tools.enabled)

    kernel = Kernel(
        store,
        config=lambda folder: config,
        providers=lambda c: ScriptedProvider(turns),
        tools=tools,
        memory=lambda root, paths: Memory(),
        checkpoints=checkpoints,
    )
    sid = (await store.create(CreateSessionParams(), workspace.as_uri())).session_id
    events: list[Any] = []
    await kernel.run(RunParams(session_id=sid, prompt="go"), events.append)
    return [e.event for e in events], checkpoints, sid


async def test_each_step_that_changes_files_sends_the_checkpoint_with_its_files(
    tmp_path: Path,
) -> None:
    turns = [
        {"toolCalls": [tool_call("w1", "write_file", path="b.txt", content="b\n")]},
        {"toolCalls": [tool_call("r1", "read_file", path="b.txt")]},
        {"toolCalls": [tool_call("e1", "edit_file", path="a.txt", old_string="a", new_string="z")]},
        {"text": "done"},
    ]
    events, checkpoints, sid = await run_events(tmp_path, turns, tmp_path / "store")
    recorded = [e for e in events if e.kind == "checkpoint"]
    assert [e.files for e in recorded] == [["b.txt"], ["a.txt", "b.txt"]]
    assert len({e.checkpoint_id for e in recorded}) == 1
    [run_started] = [e for e in events if e.kind == "run_started"]
    listed = await checkpoints.list_checkpoints_of(sid)
    assert [(c.message_id, c.files) for c in listed] == [
        (run_started.user_message_id, ["a.txt", "b.txt"])
    ]


async def test_a_run_that_changes_no_file_records_no_checkpoint(tmp_path: Path) -> None:
    turns = [
        {"toolCalls": [tool_call("c1", "run_command", command="true")]},
        {"text": "done"},
    ]
    events, checkpoints, sid = await run_events(tmp_path, turns, tmp_path / "store")
    assert [e for e in events if e.kind == "checkpoint"] == []
    assert await checkpoints.list_checkpoints_of(sid) == []


async def test_a_store_that_fails_is_told_once_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "not-a-directory").write_text("")
    turns = [
        {"toolCalls": [tool_call("w1", "write_file", path="b.txt", content="b\n")]},
        {"toolCalls": [tool_call("w2", "write_file", path="c.txt", content="c\n")]},
        {"text": "done"},
    ]
    events, _, _ = await run_events(tmp_path, turns, tmp_path / "not-a-directory" / "store")
    notices = [e for e in events if e.kind == "notice"]
    assert len(notices) == 1 and notices[0].data == {"source": "checkpoints"}
    assert events[-1].kind == "run_finished" and events[-1].stop_reason == "end_turn"
    assert (tmp_path / "ws" / "c.txt").read_text() == "c\n"
