"""The NDJSON wire of ``tether acp`` as raw bytes: bad input is answered, never met with silence,
and stdout carries protocol lines only."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.acp.conftest import AGENT, COMMANDS_UPDATE, Setup, schema_problems
from tether.protocol.limits import MAX_REQUEST_DEPTH

TEXT = {"type": "text", "text": "hi"}

RESULT_OF = {1: "initialize", 3: "initialize"}


async def exchange(lines: list[bytes], cwd: Path, home: Path) -> tuple[list[dict[str, Any]], int]:
    """Send ``lines``, close stdin, and return every line the agent wrote (but the commands a
    new session is told of) and its exit code."""
    process = await asyncio.create_subprocess_exec(
        *AGENT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )
    out, _ = await asyncio.wait_for(process.communicate(b"".join(lines)), 30)
    written = [json.loads(line) for line in out.splitlines()]
    return [m for m in written if not _commands_update(m)], process.returncode or 0


def _commands_update(message: dict[str, Any]) -> bool:
    update = message.get("params", {}).get("update") if message.get("method") else None
    return isinstance(update, dict) and update.get("sessionUpdate") == COMMANDS_UPDATE


def request(msg_id: int, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


async def test_bad_input_is_answered_and_every_request_gets_one_response(
    project: Path, tmp_path: Path
) -> None:
    answers, code = await exchange(
        [
            request(1, "session/new", {"cwd": str(project), "mcpServers": []}),
            b"this is not json\n",
            b"[1, 2]\n",
            b'{"id": 2, "method": "initialize"}\n',
            request(3, "initialize", {"protocolVersion": 1}),
            request(4, "no/such/method"),
            b'{"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}}\r\n',
            b"\n",
            request(5, "session/prompt", {"sessionId": "nope", "prompt": [TEXT]}),
            request(7, "initialize", {"protocolVersion": 1}),
            request(6, "session/new", {"cwd": str(project), "mcpServers": []})[:-1],
        ],
        project,
        tmp_path,
    )
    assert code == 0
    by_id: dict[Any, list[dict[str, Any]]] = {}
    for answer in answers:
        by_id.setdefault(answer.get("id"), []).append(answer)
    assert [a["error"]["code"] for a in by_id[None]] == [-32700, -32600]
    assert by_id[1][0]["error"]["code"] == -32600  # before initialize
    assert by_id[2][0]["error"]["code"] == -32600  # no "jsonrpc": "2.0"
    assert by_id[3][0]["result"]["protocolVersion"] == 1
    assert by_id[4][0]["error"]["code"] == -32601
    assert by_id[5][0]["error"]["code"] == -32002  # unknown session
    assert "sessionId" in by_id[6][0]["result"]  # a last line without its newline
    assert by_id[7][0]["error"]["code"] == -32600  # a second initialize
    assert all(len(v) == 1 for k, v in by_id.items() if k is not None)
    sent = {3: "initialize", 6: "session/new"}
    assert [p for a in answers for p in schema_problems(a, sent) if a.get("id") in sent] == []


async def test_a_request_nested_deeper_than_the_decoder_takes_is_answered_with_its_id(
    project: Path, tmp_path: Path
) -> None:
    deep = b"[" * MAX_REQUEST_DEPTH + b"]" * MAX_REQUEST_DEPTH
    answers, code = await exchange(
        [
            request(1, "initialize", {"protocolVersion": 1}),
            b'{"jsonrpc":"2.0","params":{"cwd":' + deep + b'},"id":2,"method":"session/new"}\n',
            b'{"jsonrpc":"2.0","method":"session/cancel","params":' + deep + b"}\n",
            request(3, "session/new", {"cwd": str(project), "mcpServers": []}),
        ],
        project,
        tmp_path,
    )
    assert code == 0
    by_id = {answer.get("id"): answer for answer in answers}
    assert by_id[2]["error"]["code"] == -32600
    assert by_id[2]["error"]["data"] == {"limit": "maxRequestDepth", "value": MAX_REQUEST_DEPTH}
    assert by_id[None]["error"]["code"] == -32700  # a notification: no id to answer
    assert "sessionId" in by_id[3]["result"]
    assert len(answers) == 4


async def answer_to(stdout: asyncio.StreamReader, msg_id: int) -> dict[str, Any]:
    """The agent's answer to request ``msg_id``, skipping what it sends before it."""
    while True:
        line = await asyncio.wait_for(stdout.readline(), 20)
        assert line, f"the agent closed its stdout before answering request {msg_id}"
        message = json.loads(line)
        if message.get("id") == msg_id and "method" not in message:
            return message


async def test_a_cancel_in_the_same_write_as_its_prompt_cancels_the_turn(
    setup: Setup, project: Path
) -> None:
    """The prompt's handler starts before the cancel after it is read: the cancel is not lost
    (the model would think for a minute)."""
    setup.script([{"text": "Thinking about it for a long while", "delay": 60}])
    process = await asyncio.create_subprocess_exec(
        *AGENT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=project,
        env={
            "HOME": str(setup.home),
            "XDG_CONFIG_HOME": str(setup.home / "config"),
            "XDG_DATA_HOME": str(setup.home / "data"),
            "PATH": "/usr/bin:/bin",
        },
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(request(1, "initialize", {"protocolVersion": 1}))
        process.stdin.write(request(2, "session/new", {"cwd": str(project), "mcpServers": []}))
        session_id = (await answer_to(process.stdout, 2))["result"]["sessionId"]
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
        prompt = request(3, "session/prompt", {"sessionId": session_id, "prompt": [TEXT]})
        process.stdin.write(prompt + json.dumps(cancel).encode() + b"\n")  # one write
        answer = await answer_to(process.stdout, 3)
        assert answer["result"] == {"stopReason": "cancelled"}
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


NOISY_AGENT = """
import sys
from tether.acp.agent import AcpAgent
from tether.cli import main

initialize = AcpAgent.initialize

async def noisy(self, params):
    print("stray")
    return await initialize(self, params)

AcpAgent.initialize = noisy
sys.exit(main(["acp"]))
"""


async def test_stdout_carries_protocol_lines_only(project: Path, tmp_path: Path) -> None:
    """Whatever tether or a library prints goes to stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        NOISY_AGENT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=project,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    out, _ = await asyncio.wait_for(
        process.communicate(request(1, "initialize", {"protocolVersion": 1})), 30
    )
    assert b"stray" not in out
    [line] = out.splitlines()
    assert json.loads(line)["id"] == 1


def test_the_schema_check_fails_a_message_that_does_not_validate() -> None:
    """The check the end-to-end tests rely on finds a bad update and a bad result."""
    bad_update = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c",
                "status": "cancelled",
            },
        },
    }
    bad_result = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "max_iterations"}}
    good_result = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}
    assert schema_problems(bad_update, {})
    assert schema_problems(bad_result, {1: "session/prompt"})
    assert schema_problems(good_result, {1: "session/prompt"}) == []


@pytest.mark.parametrize("line", [b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'])
async def test_tether_serve_answers_an_ndjson_line_naming_tether_acp(
    line: bytes, tmp_path: Path
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether",
        "serve",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    out, _ = await asyncio.wait_for(process.communicate(line), 30)
    [answer] = [json.loads(text) for text in out.splitlines()]
    assert answer["id"] == 1
    assert answer["error"]["code"] == -32600
    assert "tether acp" in answer["error"]["message"]
