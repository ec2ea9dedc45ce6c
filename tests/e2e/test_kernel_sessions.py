"""Session state, access control and usage totals through the real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.client import RpcError
from tether.protocol import ErrorCode

from .conftest import start_scripted
from .test_kernel import call, drain, start


async def test_state_set_in_one_run_is_read_in_the_next_and_shown_by_session_get(project: Path):
    connection = await start_scripted(
        project,
        [
            {
                "toolCalls": [call("s1", "state_set", key="todo", value=["tests", "docs"])],
                "usage": {"inputTokens": 30, "outputTokens": 4},
            },
            {"text": "Noted.", "usage": {"inputTokens": 40, "outputTokens": 2}},
            {"toolCalls": [call("g1", "state_get", key="todo")]},
            {"text": "Tests, then docs.", "usage": {"inputTokens": 50, "outputTokens": 6}},
        ],
        tools={"approval": "auto"},  # state_set is an edit: it follows the approval policy
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        first = await connection.request("kernel/run", {"sessionId": sid, "prompt": "Remember."})
        between = await connection.request("session/get", {"sessionId": sid})
        await connection.request(
            "session/configure",
            {"sessionId": sid, "state": {**between["state"], "by": "client"}},
        )
        second = await connection.request("kernel/run", {"sessionId": sid, "prompt": "What next?"})
        after = await connection.request("session/get", {"sessionId": sid})
    finally:
        await connection.close()

    assert first["toolCalls"][0]["isError"] is False
    assert between["state"] == {"todo": ["tests", "docs"]}
    assert json.loads(second["toolCalls"][0]["result"]) == ["tests", "docs"]
    assert after["state"] == {"todo": ["tests", "docs"], "by": "client"}
    assert after["usage"] == {"inputTokens": 120, "outputTokens": 12}


async def test_a_run_outside_the_session_allow_lists_is_refused_and_records_nothing(
    project: Path,
):
    connection = await start(project, [{"text": "Only this one runs."}])
    try:
        sid = (
            await connection.request(
                "session/create", {"tools": ["read_file"], "allowedModels": ["small"]}
            )
        )["sessionId"]
        with pytest.raises(RpcError) as tools:
            await connection.request(
                "kernel/run",
                {"sessionId": sid, "prompt": "hi", "model": "small", "tools": ["search_text"]},
            )
        with pytest.raises(RpcError) as model:
            await connection.request(
                "kernel/run", {"sessionId": sid, "prompt": "hi", "model": "large"}
            )
        refused_events = drain(connection)
        history = await connection.request("session/messages", {"sessionId": sid})
        served = await connection.request(
            "kernel/run", {"sessionId": sid, "prompt": "hi", "model": "small"}
        )
    finally:
        await connection.close()

    assert tools.value.code == ErrorCode.INVALID_PARAMS
    assert tools.value.data["fields"][0]["field"] == "tools"
    assert (tools.value.data["allowed"], tools.value.data["refused"]) == (
        ["read_file"],
        ["search_text"],
    )
    assert model.value.code == ErrorCode.INVALID_PARAMS
    assert model.value.data["fields"][0]["field"] == "model"
    assert model.value.data["allowed"] == ["small"]
    assert refused_events == [] and history["total"] == 0
    assert served["response"] == "Only this one runs."
