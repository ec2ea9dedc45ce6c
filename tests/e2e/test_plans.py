"""The session plan (``update_plan``) through the real server: the ``plan`` event, ``session/get``,
the SQLite store across processes, forks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.client import Connection

from .conftest import SERVER, initialized, script_options
from .test_kernel import call, drain

FIRST_PLAN = [
    {"content": "Read the README", "status": "completed", "priority": "high"},
    {"content": "Write the tests", "status": "in_progress"},
    {"content": "Update the docs", "status": "pending", "priority": "low"},
]
SECOND_PLAN = [
    {"content": "Read the README", "status": "completed", "priority": "high"},
    {"content": "Write the tests", "status": "completed"},
]


async def _start(
    project: Path, turns: list[dict[str, Any]], env: dict[str, str], name: str
) -> Connection:
    connection = await Connection.spawn(SERVER, env=env)
    await initialized(connection, project, script_options(project, turns, name=name))
    return connection


async def test_update_plan_sends_a_plan_event_and_session_get_keeps_the_plan_across_processes(
    project: Path, tmp_path: Path
) -> None:
    env = {"TETHER_SESSIONS_STORE": "sqlite", "TETHER_SESSIONS_PATH": str(tmp_path / "s.db")}
    first = await _start(
        project,
        [
            {"toolCalls": [call("p1", "update_plan", entries=FIRST_PLAN)]},
            {"toolCalls": [call("p2", "update_plan", entries=SECOND_PLAN)]},
            {"text": "Done."},
        ],
        env,
        "first",
    )
    try:  # no approval configured: update_plan never asks
        sid = (await first.request("session/create", {}))["sessionId"]
        before = await first.request("session/get", {"sessionId": sid})
        run = await first.request("kernel/run", {"sessionId": sid, "prompt": "Plan it."})
        events = [e["event"] for e in drain(first) if e["sessionId"] == sid]
    finally:
        await first.close()

    second = await _start(project, [], env, "second")
    try:
        after = await second.request("session/get", {"sessionId": sid})
        shown = await second.request("kernel/run", {"sessionId": sid, "prompt": "/plan"})
        fork = await second.request("session/fork", {"sessionId": sid})
        cleared = await second.request("session/configure", {"sessionId": sid, "plan": None})
        forked = await second.request("session/get", {"sessionId": fork["sessionId"]})
    finally:
        await second.close()

    assert "plan" not in before
    assert [r["isError"] for r in run["toolCalls"]] == [False, False]
    assert run["toolCalls"][1]["result"] == "[x] Read the README\n[x] Write the tests"
    plans = [e for e in events if e["kind"] == "plan"]
    assert plans == [
        {"kind": "plan", "entries": FIRST_PLAN},
        {"kind": "plan", "entries": SECOND_PLAN},
    ]
    update = next(
        i
        for i, e in enumerate(events)
        if e.get("toolCallId") == "p1" and e["status"] == "completed"
    )
    assert events.index(plans[0]) < update  # the plan is told before the call's result
    assert after["plan"] == SECOND_PLAN
    assert shown["response"] == "Plan:\n[x] Read the README\n[x] Write the tests"  # no model call
    assert fork["plan"] == SECOND_PLAN == forked["plan"]
    assert "plan" not in cleared


async def test_a_bad_plan_is_an_error_the_model_reads_and_changes_nothing(project: Path) -> None:
    connection = await _start(
        project,
        [
            {
                "toolCalls": [
                    call("p1", "update_plan", entries=[{"content": "x", "status": "done"}])
                ]
            },
            {"text": "Sorry."},
        ],
        {},
        "bad",
    )
    try:
        sid = (await connection.request("session/create", {}))["sessionId"]
        run = await connection.request("kernel/run", {"sessionId": sid, "prompt": "Plan it."})
        session = await connection.request("session/get", {"sessionId": sid})
        events = [e["event"] for e in drain(connection)]
    finally:
        await connection.close()

    [record] = run["toolCalls"]
    assert record["isError"] is True and "entries.0.status" in record["result"]
    assert "plan" not in session
    assert not [e for e in events if e["kind"] == "plan"]
