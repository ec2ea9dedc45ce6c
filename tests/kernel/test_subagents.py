"""The ``task`` tool and agent profiles in process: what is offered, and setting a session's
profile (what ``/agent NAME`` does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.protocol import InvalidParams

from .support import KernelHarness, tool_call


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    agents = home / "tether" / "agents"
    agents.mkdir(parents=True)
    (agents / "reader.md").write_text("---\ntools: [read_file]\n---\nYou only read.\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def offered(harness: KernelHarness, request: int = 0) -> list[str]:
    return sorted(spec.name for spec in harness.provider.requests[request].tools)


async def test_set_agent_checks_the_profile_and_none_clears_it(tmp_path: Path):
    harness = KernelHarness(tmp_path, [])
    sid = await harness.session()
    with pytest.raises(InvalidParams) as unknown:
        await harness.kernel.set_agent(sid, "nobody")
    assert unknown.value.data is not None and unknown.value.data["agent"] == "nobody"
    assert (await harness.kernel.set_agent(sid, "reader")).agent == "reader"
    assert (await harness.kernel.set_agent(sid, None)).agent is None
    assert [p.name for p in harness.kernel.agent_profiles(tmp_path)] == ["reader"]


@pytest.mark.parametrize(
    "config",
    [{"kernel": {"max_subagents": 0}}, {"tools": {"enabled": ["read_file", "list_files"]}}],
    ids=["no sub-agents", "not enabled"],
)
async def test_task_is_left_out_by_configuration(tmp_path: Path, config: dict[str, object]):
    harness = KernelHarness(tmp_path, [{"text": "ok"}], config=config)
    await harness.run(await harness.session())
    assert "task" not in offered(harness)


async def test_a_task_names_the_profiles_and_its_child_keeps_within_the_parent_s_tools(
    tmp_path: Path,
):
    turns = [
        {"toolCalls": [tool_call("t1", "task", prompt="look")]},
        {"text": "seen"},
        {"text": "done"},
    ]
    harness = KernelHarness(tmp_path, turns)
    sid = await harness.session(tools=["read_file", "list_files", "task"])
    result = await harness.run(sid)
    assert result.tool_calls[0].result == "seen"
    [task] = [spec for spec in harness.provider.requests[0].tools if spec.name == "task"]
    assert task.parameters["properties"]["agent"]["enum"] == ["reader"]
    assert offered(harness, 0) == ["list_files", "read_file", "task"]
    assert offered(harness, 1) == ["list_files", "read_file", "task"]
    child = await harness.store.get(result.tool_calls[0].output["sessionId"])  # type: ignore[index]
    assert child.tools == ["list_files", "read_file", "task"]


async def test_a_task_under_a_profile_is_narrowed_by_it(tmp_path: Path):
    turns = [
        {"toolCalls": [tool_call("t1", "task", prompt="look", agent="reader")]},
        {"text": "seen"},
        {"text": "done"},
    ]
    harness = KernelHarness(tmp_path, turns)
    await harness.run(await harness.session())
    child_request = harness.provider.requests[1]
    assert offered(harness, 1) == ["read_file"]
    assert child_request.system is not None and child_request.system.startswith("You only read.")
