"""Agent profiles and ``task`` sub-agents through the real server, against a loopback model
endpoint (what each model request carried is what the test reads)."""

from __future__ import annotations

import asyncio
import sys
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


async def start(
    endpoint: ModelServer, project: Path, config_home: Path, **options: Any
) -> Connection:
    """A server on the loopback endpoint, with the editor's settings ``options`` added."""
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
                **options,
            },
        },
    )
    connection.notify("initialized", {})
    return connection


@pytest.fixture
async def connection(
    endpoint: ModelServer, project: Path, config_home: Path
) -> AsyncIterator[Connection]:
    connection = await start(endpoint, project, config_home)
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


async def test_slash_agent_lists_the_profiles_and_sets_one_without_a_model_call(
    connection: Connection, endpoint: ModelServer
):
    sid = (await connection.request("session/create", {}))["sessionId"]
    listed = await connection.request("session/commands", {"sessionId": sid})
    assert "agent" in [c["name"] for c in listed["commands"] if c["source"] == "builtin"]

    shown = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/agent"})
    assert shown["response"].splitlines() == [
        "The session runs under none. Agent profiles:",
        "- reviewer: Reviews code, never edits it (user)",
    ]
    chosen = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/agent reviewer"})
    assert chosen["response"] == "The session now runs under the agent profile reviewer."
    assert (await connection.request("session/get", {"sessionId": sid}))["agent"] == "reviewer"
    shown = await connection.request("kernel/run", {"sessionId": sid, "prompt": "/agent"})
    assert shown["response"].endswith("(user) (current)")

    with pytest.raises(RpcError) as unknown:
        await connection.request("kernel/run", {"sessionId": sid, "prompt": "/agent nobody"})
    assert unknown.value.code == ErrorCode.INVALID_PARAMS
    assert unknown.value.data["agent"] == "nobody"
    assert "known: reviewer" in unknown.value.message
    assert (await connection.request("session/get", {"sessionId": sid}))["agent"] == "reviewer"
    assert endpoint.requests == []
    messages = await connection.request("session/messages", {"sessionId": sid})
    assert messages["messages"] == []  # a built-in stores nothing


async def test_a_sub_agent_s_prompt_is_never_a_slash_command(
    connection: Connection, endpoint: ModelServer
):
    endpoint.push(
        Reply(tool_calls=[Call("task", {"prompt": "/agent reviewer"}, id="t1")]),
        Reply(text="I was asked for /agent."),
        Reply(text="done"),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
    [call] = result["toolCalls"]
    assert call["result"] == "I was asked for /agent."
    assert user_texts(endpoint.requests[1]) == ["/agent reviewer"]
    child = await connection.request("session/get", {"sessionId": call["output"]["sessionId"]})
    assert "agent" not in child


async def test_a_sub_agent_s_edit_is_checkpointed_in_its_session_and_rewinding_the_parent_undoes_it(
    connection: Connection, endpoint: ModelServer, project: Path
):
    write = {"path": "notes.txt", "content": "the answer is 43\n"}
    endpoint.push(
        Reply(tool_calls=[Call("task", {"prompt": "fix the notes"}, id="t1")]),
        Reply(tool_calls=[Call("write_file", write, id="w1")]),
        Reply(text="fixed"),
        Reply(text="the notes are fixed"),
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "fix it"})
    assert (project / "notes.txt").read_text() == "the answer is 43\n"
    child_id = result["toolCalls"][0]["output"]["sessionId"]
    events = progress_of(connection)
    recorded = {p["sessionId"] for p in events if p["event"]["kind"] == "checkpoint"}
    assert recorded == {sid, child_id}

    [child_checkpoint] = (await connection.request("session/checkpoints", {"sessionId": child_id}))[
        "checkpoints"
    ]
    [parent_checkpoint] = (await connection.request("session/checkpoints", {"sessionId": sid}))[
        "checkpoints"
    ]
    assert child_checkpoint["files"] == parent_checkpoint["files"] == ["notes.txt"]
    [started] = [
        p["event"] for p in events if p["sessionId"] == sid and p["event"]["kind"] == "run_started"
    ]
    assert parent_checkpoint["messageId"] == started["userMessageId"]

    rewound = await connection.request(
        "session/rewind", {"sessionId": sid, "messageId": parent_checkpoint["messageId"]}
    )
    assert rewound["restored"] == ["notes.txt"]
    assert (project / "notes.txt").read_text() == "the answer is 42\n"


async def test_a_sub_agent_s_tool_calls_go_through_the_user_s_hooks(
    endpoint: ModelServer, project: Path, config_home: Path, tmp_path: Path
):
    script = tmp_path / "blocker.py"
    script.write_text(
        "import json, sys\n"
        "payload = json.load(sys.stdin)\n"
        "print(f\"no writes from session {payload['session_id']}\", file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    hooks = {"pre_tool_use": [{"matcher": "write_file", "command": f"{sys.executable} {script}"}]}
    write = {"path": "notes.txt", "content": "overwritten\n"}
    endpoint.push(
        Reply(tool_calls=[Call("task", {"prompt": "overwrite the notes"}, id="t1")]),
        Reply(tool_calls=[Call("write_file", write, id="w1")]),
        Reply(text="I was not allowed to."),
        Reply(text="it could not"),
    )
    connection = await start(endpoint, project, config_home, hooks=hooks)
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "go"})
        events = progress_of(connection)
    finally:
        await connection.close()
    child_id = result["toolCalls"][0]["output"]["sessionId"]
    assert (project / "notes.txt").read_text() == "the answer is 42\n"
    [blocked] = [p for p in events if p["event"]["kind"] == "hook"]
    assert blocked["sessionId"] == child_id and blocked["parentRunId"] == result["runId"]
    assert blocked["event"]["outcome"] == "blocked"
    tool_results = [m for m in endpoint.requests[2].body["messages"] if m["role"] == "tool"]
    assert tool_results[0]["content"] == f"no writes from session {child_id}"
