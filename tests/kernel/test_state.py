"""The session state across turns: set by the model in one run, read in the next."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.protocol import Role
from tether.protocol.kernel import PermissionParams, PermissionResult
from tether.protocol.sessions import SessionFields
from tether.tools.state import MAX_STATE_BYTES

from .support import KernelHarness, tool_call


async def test_a_value_set_in_one_run_is_read_by_the_model_in_the_next(tmp_path: Path):
    plan = {"steps": ["read", "fix", "test"], "done": 1}
    harness = KernelHarness(
        tmp_path,
        [
            {"toolCalls": [tool_call("s1", "state_set", key="plan", value=plan)]},
            {"text": "noted"},
            {"toolCalls": [tool_call("g1", "state_get", key="plan")]},
            {"text": "step two"},
        ],
        config={"tools": {"approval": "auto"}},
    )
    sid = await harness.session()
    first = await harness.run(sid)
    assert not first.tool_calls[0].is_error, first.tool_calls[0].result
    assert (await harness.store.get(sid)).state == {"plan": plan}

    second = await harness.run(sid)
    assert json.loads(second.tool_calls[0].result) == plan
    answer = harness.provider.requests[-1].messages[-1]
    assert answer.role is Role.TOOL and json.loads(str(answer.content)) == plan


async def test_state_set_by_the_client_is_what_the_model_reads(tmp_path: Path):
    harness = KernelHarness(
        tmp_path, [{"toolCalls": [tool_call("g1", "state_get")]}, {"text": "ok"}]
    )
    sid = await harness.session(state={"user": "ada"})
    await harness.store.configure(sid, SessionFields(state={"user": "grace", "n": 2}))
    result = await harness.run(sid)
    assert json.loads(result.tool_calls[0].result) == {"user": "grace", "n": 2}


async def test_a_state_set_over_the_cap_fails_the_call_not_the_run(tmp_path: Path):
    harness = KernelHarness(
        tmp_path,
        [
            {"toolCalls": [tool_call("s1", "state_set", key="big", value="x" * MAX_STATE_BYTES)]},
            {"text": "too big"},
        ],
        config={"tools": {"approval": "auto"}},
    )
    sid = await harness.session(state={"kept": True})
    result = await harness.run(sid)
    assert result.tool_calls[0].is_error and "256 KiB" in result.tool_calls[0].result
    assert result.response == "too big"
    assert (await harness.store.get(sid)).state == {"kept": True}


async def test_the_state_tools_obey_the_session_allow_list(tmp_path: Path):
    harness = KernelHarness(
        tmp_path, [{"toolCalls": [tool_call("s1", "state_set", key="k", value=1)]}, {"text": "no"}]
    )
    sid = await harness.session(tools=["read_file"])
    result = await harness.run(sid)
    assert result.tool_calls[0].is_error
    assert (await harness.store.get(sid)).state == {}


def set_plan(call_id: str = "s1") -> dict[str, Any]:
    return tool_call(call_id, "state_set", key="plan", value=["fix"])


async def test_under_ask_a_rejected_state_set_leaves_the_state_as_it_was(tmp_path: Path):
    asked: list[PermissionParams] = []

    async def reject(params: PermissionParams) -> PermissionResult:
        asked.append(params)
        return PermissionResult(outcome="reject")

    harness = KernelHarness(
        tmp_path, [{"toolCalls": [set_plan()]}, {"text": "ok"}], approver=reject
    )
    sid = await harness.session(state={"kept": True})
    result = await harness.run(sid)
    assert [a.tool_call.name for a in asked] == ["state_set"]
    assert result.tool_calls[0].is_error
    assert (await harness.store.get(sid)).state == {"kept": True}


async def test_under_ask_an_allowed_state_set_changes_the_state(tmp_path: Path):
    async def allow(params: PermissionParams) -> PermissionResult:
        return PermissionResult(outcome="allow")

    harness = KernelHarness(tmp_path, [{"toolCalls": [set_plan()]}, {"text": "ok"}], approver=allow)
    sid = await harness.session()
    await harness.run(sid)
    assert (await harness.store.get(sid)).state == {"plan": ["fix"]}


@pytest.mark.parametrize("approval", ["ask", "deny"])
async def test_a_state_set_nobody_approved_changes_nothing(tmp_path: Path, approval: str):
    harness = KernelHarness(
        tmp_path,
        [{"toolCalls": [set_plan()]}, {"text": "ok"}],
        config={"tools": {"approval": approval}},
    )
    sid = await harness.session()
    result = await harness.run(sid)
    assert result.tool_calls[0].is_error
    assert (await harness.store.get(sid)).state == {}


async def test_state_get_needs_no_approval(tmp_path: Path):
    harness = KernelHarness(
        tmp_path,
        [{"toolCalls": [tool_call("g1", "state_get")]}, {"text": "ok"}],
        config={"tools": {"approval": "deny"}},
    )
    result = await harness.run(await harness.session(state={"n": 1}))
    assert json.loads(result.tool_calls[0].result) == {"n": 1}
