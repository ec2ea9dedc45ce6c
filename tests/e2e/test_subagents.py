"""Agent profiles and ``task`` sub-agents through the real server, against a loopback model
endpoint (what each model request carried is what the test reads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Call, Hang, ModelServer, RecordedRequest, Reply
from tether.client import Connection, RpcError
from tether.protocol import ErrorCode

from .conftest import SERVER

REVIEWER = """---
description: Reviews code, never edits it
tools: [read_file, search_text]
model: review-model
maxIterations: 3
---
You are a careful reviewer. Read, then judge.
"""


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("the answer is 42\n")
    return root


@pytest.fixture
def config_home(tmp_path: Path) -> Path:
    """The user's configuration directory, with the profile ``reviewer``."""
    agents = tmp_path / "config" / "tether" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text(REVIEWER)
    return tmp_path / "config"


@pytest.fixture
async def connection(
    endpoint: ModelServer, project: Path, config_home: Path
) -> AsyncIterator[Connection]:
    connection = await Connection.spawn(
        SERVER, env={"OPENAI_API_KEY": "sk-test", "XDG_CONFIG_HOME": str(config_home)}
    )
    provider = {"type": "openai", "baseUrl": endpoint.openai_url, "model": "main-model"}
    await connection.request(
        "initialize",
        {
            "workspaceFolders": [{"uri": project.as_uri()}],
            "initializationOptions": {
                "provider": provider,
                "kernel": {"systemPrompt": "You are the main agent."},
                "tools": {"approval": "auto"},
            },
        },
    )
    connection.notify("initialized", {})
    yield connection
    await connection.close()


def tool_names(request: RecordedRequest) -> list[str]:
    return sorted(tool["function"]["name"] for tool in request.body.get("tools", []))


def system_text(request: RecordedRequest) -> str:
    return next(m["content"] for m in request.body["messages"] if m["role"] == "system")


def user_texts(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


def progress_of(connection: Connection) -> list[dict[str, Any]]:
    """Every ``kernel/progress`` received so far (the queue is drained)."""
    found = []
    while not connection.notifications.empty():
        method, params = connection.notifications.get_nowait()
        if method == "kernel/progress":
            found.append(params)
    return found


async def first_child(connection: Connection) -> str:
    """The session of the first sub-agent whose progress arrives (waited for)."""
    async with asyncio.timeout(10):
        while True:
            method, params = await connection.notifications.get()
            if method == "kernel/progress" and params.get("parentRunId"):
                return str(params["sessionId"])


async def test_a_profile_s_prompt_tools_model_and_iterations_reach_the_model(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(Reply(text="Looks fine."))
    session = await connection.request("session/create", {"agent": "reviewer"})
    assert session["agent"] == "reviewer"
    result = await connection.request(
        "kernel/run", {"sessionId": session["sessionId"], "prompt": "Review notes.txt"}
    )
    assert result["response"] == "Looks fine."
    [request] = endpoint.requests
    assert request.body["model"] == "review-model"
    assert system_text(request).startswith("You are a careful reviewer. Read, then judge.")
    assert "main agent" not in system_text(request)
    assert tool_names(request) == ["read_file", "search_text"]
    started = [p for p in progress_of(connection) if p["event"]["kind"] == "run_started"]
    assert started[0]["event"]["maxIterations"] == 3


async def test_an_unknown_agent_is_refused_naming_it(connection: Connection):
    with pytest.raises(RpcError) as created:
        await connection.request("session/create", {"agent": "nobody"})
    assert created.value.code == ErrorCode.INVALID_PARAMS
    assert created.value.data["agent"] == "nobody"

    sid = (await connection.request("session/create", {}))["sessionId"]
    with pytest.raises(RpcError) as configured:
        await connection.request("session/configure", {"sessionId": sid, "agent": "nobody"})
    assert configured.value.code == ErrorCode.INVALID_PARAMS
    assert configured.value.data["agent"] == "nobody"
    session = await connection.request("session/configure", {"sessionId": sid, "agent": "reviewer"})
    assert session["agent"] == "reviewer"
    session = await connection.request("session/configure", {"sessionId": sid, "agent": None})
    assert "agent" not in session


async def test_a_workspace_profile_cannot_widen_the_session_s_tools(
    connection: Connection, endpoint: ModelServer, project: Path
):
    agents = project / ".tether" / "agents"
    agents.mkdir(parents=True)
    (agents / "wide.md").write_text(
        "---\ntools: [read_file, run_command, write_file]\n---\nDo anything.\n"
    )
    endpoint.push(Reply(text="ok"))
    sid = (
        await connection.request(
            "session/create", {"agent": "wide", "tools": ["read_file", "list_files"]}
        )
    )["sessionId"]
    await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
    [request] = endpoint.requests
    assert tool_names(request) == ["read_file"]
    assert system_text(request).startswith("Do anything.")


async def test_a_workspace_profile_s_model_stays_within_allowed_models(
    connection: Connection, endpoint: ModelServer, project: Path
):
    agents = project / ".tether" / "agents"
    agents.mkdir(parents=True)
    (agents / "pricey.md").write_text("---\nmodel: pricey-model\n---\nThink hard.\n")
    sid = (
        await connection.request(
            "session/create", {"agent": "pricey", "allowedModels": ["main-model"]}
        )
    )["sessionId"]
    with pytest.raises(RpcError) as refused:
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
    assert refused.value.code == ErrorCode.INVALID_PARAMS
    assert refused.value.data["refused"] == ["pricey-model"]
    assert endpoint.requests == []


async def test_a_task_runs_a_sub_agent_in_its_own_session_and_answers_with_its_result(
    connection: Connection, endpoint: ModelServer
):
    task = {"prompt": "Is notes.txt right?", "description": "Check notes", "agent": "reviewer"}
    endpoint.push(
        Reply(text="Delegating.", tool_calls=[Call("task", task, id="t1")], usage=(100, 10)),
        Reply(text="Yes, it says 42.", usage=(30, 5)),
        Reply(text="The reviewer agrees.", usage=(120, 8)),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "Check my notes"})

    assert result["response"] == "The reviewer agrees."
    [call] = result["toolCalls"]
    assert call["result"] == "Yes, it says 42." and not call["isError"]
    child_id = call["output"]["sessionId"]
    assert result["usage"]["inputTokens"] == 250 and result["usage"]["outputTokens"] == 23

    parent_request, child_request, _ = endpoint.requests
    assert "task" in tool_names(parent_request)
    assert user_texts(child_request) == ["Is notes.txt right?"]  # none of the parent's history
    assert system_text(child_request).startswith("You are a careful reviewer.")
    assert child_request.body["model"] == "review-model"
    assert set(tool_names(child_request)) <= set(tool_names(parent_request))

    child = await connection.request("session/get", {"sessionId": child_id})
    assert child["spawnedBy"] == {"sessionId": sid, "runId": result["runId"], "toolCallId": "t1"}
    assert child["agent"] == "reviewer" and child["title"] == "Check notes"
    listed = await connection.request("session/list", {})
    assert child_id in [s["sessionId"] for s in listed["sessions"]]
    messages = (await connection.request("session/messages", {"sessionId": child_id}))["messages"]
    assert [m["content"] for m in messages] == ["Is notes.txt right?", "Yes, it says 42."]

    events = progress_of(connection)
    child_events = [p for p in events if p["sessionId"] == child_id]
    assert child_events and all(p["parentRunId"] == result["runId"] for p in child_events)
    assert all(p["parentToolCallId"] == "t1" for p in child_events)
    assert "Yes, " in "".join(
        p["event"]["text"] for p in child_events if p["event"]["kind"] == "message_delta"
    )
    assert all("parentRunId" not in p for p in events if p["sessionId"] == sid)


async def test_two_tasks_run_at_once_and_are_cancelled_with_their_parent(
    connection: Connection, endpoint: ModelServer
):
    calls = [Call("task", {"prompt": f"job {n}"}, id=f"t{n}") for n in (1, 2)]
    endpoint.push(Reply(tool_calls=calls), Hang(), Hang())
    sid = (await connection.request("session/create", {}))["sessionId"]
    run = asyncio.ensure_future(
        connection.request("kernel/run", {"sessionId": sid, "prompt": "two jobs"})
    )
    # Each child's model request hangs: the second arrives only if both run at once.
    requests = await endpoint.wait_for_requests(3, seconds=10)
    assert sorted(user_texts(r)[0] for r in requests[1:]) == ["job 1", "job 2"]

    await connection.request("kernel/cancel", {"sessionId": sid})
    result = await asyncio.wait_for(run, 10)
    assert result["stopReason"] == "cancelled"
    assert sorted(c["result"] for c in result["toolCalls"]) == ["cancelled", "cancelled"]
    children = {
        p["sessionId"]: p["event"]["stopReason"]
        for p in progress_of(connection)
        if p.get("parentRunId") == result["runId"] and p["event"]["kind"] == "run_finished"
    }
    assert len(children) == 2 and set(children.values()) == {"cancelled"}
    for child_id in children:
        child = await connection.request("session/get", {"sessionId": child_id})
        assert child["running"] is False


async def test_a_sub_agent_s_sub_agent_is_not_offered_task(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(
        Reply(tool_calls=[Call("task", {"prompt": "level 1"}, id="t1")]),
        Reply(tool_calls=[Call("task", {"prompt": "level 2"}, id="t2")]),
        Reply(text="deep answer"),
        Reply(text="middle answer"),
        Reply(text="top answer"),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "level 0"})
    assert result["response"] == "top answer"
    assert result["toolCalls"][0]["result"] == "middle answer"
    top, middle, deep, _, _ = endpoint.requests
    assert "task" in tool_names(top) and "task" in tool_names(middle)
    assert "task" not in tool_names(deep)
    assert user_texts(deep) == ["level 2"]
    grandchild_events = [p for p in progress_of(connection) if p["event"]["kind"] == "run_started"][
        2
    ]
    assert grandchild_events["parentToolCallId"] == "t2"


async def test_a_task_naming_an_unknown_agent_or_a_model_not_allowed_fails_and_makes_no_session(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(
        Reply(
            tool_calls=[
                Call("task", {"prompt": "x", "agent": "nobody"}, id="t1"),
                Call("task", {"prompt": "y", "agent": "reviewer"}, id="t2"),
            ]
        ),
        Reply(text="both failed"),
    )
    sid = (await connection.request("session/create", {"allowedModels": ["main-model"]}))[
        "sessionId"
    ]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
    unknown, refused = result["toolCalls"]
    assert unknown["isError"] and "no agent profile 'nobody'" in unknown["result"]
    assert refused["isError"] and "review-model" in refused["result"]
    listed = await connection.request("session/list", {})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid]


async def test_cancelling_a_sub_agent_s_session_stops_it_alone(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(
        Reply(tool_calls=[Call("task", {"prompt": "slow job"}, id="t1")]),
        Hang(),
        Reply(text="carried on without it"),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    run = asyncio.ensure_future(
        connection.request("kernel/run", {"sessionId": sid, "prompt": "delegate"})
    )
    child_id = await first_child(connection)
    await endpoint.wait_for_requests(2, seconds=10)
    assert (await connection.request("kernel/cancel", {"sessionId": child_id}))["cancelled"]
    result = await asyncio.wait_for(run, 10)
    assert result["stopReason"] == "end_turn" and result["response"] == "carried on without it"
    [call] = result["toolCalls"]
    assert call["isError"] and call["result"].endswith("(the sub-agent stopped: cancelled)")
    assert call["output"] == {
        "sessionId": child_id,
        "runId": call["output"]["runId"],
        "stopReason": "cancelled",
    }
