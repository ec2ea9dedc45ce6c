"""JSON from the model nested deeper than a session keeps (``maxJsonDepth``): a tool call's
arguments, a structured answer. Neither fails the run or the store: the call gets an error result
the model reads and the run goes on; the answer is invalid output, asked for again. Through the
real server, against a loopback model endpoint in each wire format (arguments as text, or as a
JSON value where the format sends them so)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Call, ModelServer, Reply
from tether.client import Connection
from tether.protocol.limits import MAX_JSON_DEPTH

from .conftest import SERVER

KEY = "sk-e2e-secret-key-0123456789"

# (provider, whether replies are streamed): how each format gives a call's arguments
WIRES = {
    "openai": ("openai", None),  # text, in pieces
    "anthropic": ("anthropic", None),  # text, in pieces (input_json_delta)
    "anthropic-whole": ("anthropic", False),  # a JSON value (tool_use input)
    "gemini": ("gemini", None),  # a JSON value (functionCall args)
}


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


@pytest.fixture(params=list(WIRES))
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def connection(tmp_path: Path, endpoint: ModelServer, wire: str) -> AsyncIterator[Connection]:
    kind = WIRES[wire][0]
    base_url = endpoint.openai_url if kind == "openai" else endpoint.url
    connection = await Connection.spawn(
        SERVER, env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "GEMINI_API_KEY": KEY}
    )
    options = {
        "provider": {"type": kind, "baseUrl": base_url, "model": "m", "maxRetries": 0},
        "sessions": {"store": "sqlite", "path": str(tmp_path / "sessions.db")},
        "tools": {"approval": "auto"},
    }
    await connection.request(
        "initialize",
        {"workspaceFolders": [{"uri": tmp_path.as_uri()}], "initializationOptions": options},
    )
    connection.notify("initialized", {})
    yield connection
    await connection.close()


def reply(wire: str, **fields: Any) -> Reply:
    return Reply(stream=WIRES[wire][1], **fields)


def nested(levels: int) -> str:
    """JSON text of arrays nested ``levels`` deep."""
    return "[" * levels + "]" * levels


def state_set(levels: int) -> Call:
    return Call("state_set", '{"key": "deep", "value": ' + nested(levels) + "}")


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 300, 5000])
async def test_a_tool_call_whose_arguments_nest_too_deep_gets_an_error_result_and_the_run_goes_on(
    connection: Connection, endpoint: ModelServer, wire: str, levels: int
) -> None:
    """The call is refused (nothing stored in the session's state), the model reads the error
    and answers; the session keeps the call and its result, and later runs send them again."""
    if levels > 1000 and wire in ("anthropic-whole", "gemini"):
        pytest.skip("a JSON value this deep is more than a response's JSON decoder takes")
    endpoint.push(reply(wire, tool_calls=[state_set(levels)]), reply(wire, text="It was too deep."))
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "store it"})
    assert result["stopReason"] == "end_turn"
    [call] = result["toolCalls"]
    assert call["name"] == "state_set" and call["isError"] is True
    assert (await connection.request("session/get", {"sessionId": sid}))["state"] == {}
    page = await connection.request("session/messages", {"sessionId": sid})
    assert [m["role"] for m in page["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert page["messages"][2]["isError"] is True

    endpoint.push(reply(wire, text="Again."))
    again = await connection.request("kernel/run", {"sessionId": sid, "prompt": "and now?"})
    assert again["stopReason"] == "end_turn"
    assert len(endpoint.requests) == 3  # the stored call was sent again, and accepted


async def test_a_tool_call_nested_as_deep_as_a_session_keeps_runs(
    connection: Connection, endpoint: ModelServer, wire: str
) -> None:
    """Arguments of ``maxJsonDepth`` levels, the arguments object counted: the call runs."""
    endpoint.push(
        reply(wire, tool_calls=[state_set(MAX_JSON_DEPTH - 1)]), reply(wire, text="Stored.")
    )
    sid = (await connection.request("session/create", {}))["sessionId"]
    result = await connection.request("kernel/run", {"sessionId": sid, "prompt": "store it"})
    assert result["toolCalls"][0]["isError"] is False
    state = (await connection.request("session/get", {"sessionId": sid}))["state"]
    assert state == {"deep": json.loads(nested(MAX_JSON_DEPTH - 1))}


def answer(wire: str, text: str) -> Reply:
    """A final answer (JSON text) as each format gives it: text, or Anthropic's final tool (its
    input wraps a schema that is not an object's as ``{"value": ...}``)."""
    if WIRES[wire][0] == "anthropic":
        return reply(wire, tool_calls=[Call("final_answer", '{"value": ' + text + "}")])
    return reply(wire, text=text)


async def test_a_structured_answer_nested_too_deep_is_invalid_output_and_asked_again(
    connection: Connection, endpoint: ModelServer, wire: str
) -> None:
    endpoint.push(answer(wire, nested(300)), answer(wire, "[[1]]"))
    sid = (await connection.request("session/create", {}))["sessionId"]
    params = {"sessionId": sid, "prompt": "nest", "outputSchema": {}}
    result = await connection.request("kernel/run", params)
    assert result["stopReason"] == "end_turn" and result["iterations"] == 2
    assert result["output"] == [[1]]


async def test_structured_answers_that_stay_too_deep_end_the_run_output_invalid(
    connection: Connection, endpoint: ModelServer, wire: str
) -> None:
    endpoint.push(*[answer(wire, nested(300)) for _ in range(2)])
    sid = (await connection.request("session/create", {}))["sessionId"]
    params = {"sessionId": sid, "prompt": "nest", "outputSchema": {}, "outputRetries": 1}
    result = await connection.request("kernel/run", params)
    assert result["stopReason"] == "output_invalid"
    assert "output" not in result and len(result["outputErrors"]) == 1
    assert (await connection.request("session/get", {"sessionId": sid}))["messageCount"] == 4
