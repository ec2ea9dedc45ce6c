"""The JSON-RPC layer in process: every request gets exactly one response, with the right code."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tether.protocol import ErrorCode
from tether.protocol.framing import encode_frame

from .conftest import Peer


def register_slow(peer: Peer) -> asyncio.Event:
    """A method ``test/slow`` that runs until it is cancelled; the event tells it has started."""
    started = asyncio.Event()

    async def slow(params: Any) -> dict[str, Any]:
        started.set()
        await asyncio.Event().wait()
        return {}

    peer.server.feature("test/slow")(slow)
    return started


def error_code(reply: dict[str, Any]) -> int:
    assert "error" in reply, reply
    return int(reply["error"]["code"])


async def test_a_request_before_initialize_is_refused_with_server_not_initialized(peer: Peer):
    reply = await peer.call("session/list", {})
    assert error_code(reply) == ErrorCode.SERVER_NOT_INITIALIZED


async def test_initialize_answers_protocol_version_server_info_and_capabilities(
    peer: Peer, workspace: Path
):
    result = await peer.result("initialize", {"rootUri": workspace.as_uri()})
    assert result["protocolVersion"] == 1
    assert result["serverInfo"]["name"] == "tether"
    assert result["capabilities"]["sessions"] == {
        "store": "memory",
        "fork": True,
        "durable": False,
    }
    assert "session/create" in result["capabilities"]["methods"]


async def test_initialize_without_params_is_accepted(peer: Peer):
    assert (await peer.result("initialize"))["protocolVersion"] == 1


async def test_a_second_initialize_is_an_invalid_request(ready: Peer):
    assert error_code(await ready.call("initialize", {})) == ErrorCode.INVALID_REQUEST


async def test_initialize_with_ill_typed_params_is_invalid_params(peer: Peer):
    reply = await peer.call("initialize", {"workspaceFolders": "not a list"})
    assert error_code(reply) == ErrorCode.INVALID_PARAMS
    assert reply["error"]["data"]["fields"][0]["field"] == "workspaceFolders"
    assert (await peer.result("initialize", {}))["protocolVersion"] == 1


async def test_a_request_without_params_gets_exactly_one_response(ready: Peer):
    assert (await ready.result("session/list")) == {"sessions": []}
    reply = await ready.call("session/get")
    assert error_code(reply) == ErrorCode.INVALID_PARAMS
    assert reply["error"]["data"]["fields"] == [
        {"field": "sessionId", "message": "Field required", "type": "missing"}
    ]


async def test_invalid_params_name_every_failing_field_by_its_wire_path(ready: Peer):
    session = await ready.result("session/create", {})
    reply = await ready.call(
        "session/append",
        {"sessionId": session["sessionId"], "messages": [{"role": "robot", "content": 1}]},
    )
    assert error_code(reply) == ErrorCode.INVALID_PARAMS
    fields = {f["field"] for f in reply["error"]["data"]["fields"]}
    assert "messages.0.role" in fields


async def test_params_that_are_not_an_object_are_invalid_params(ready: Peer):
    reply = await ready.call("session/list", [1, 2])
    assert error_code(reply) == ErrorCode.INVALID_PARAMS


async def test_an_unknown_method_is_method_not_found(ready: Peer):
    assert error_code(await ready.call("session/teleport", {})) == ErrorCode.METHOD_NOT_FOUND


async def test_an_unknown_notification_gets_no_response_and_breaks_nothing(ready: Peer):
    ready.send({"jsonrpc": "2.0", "method": "tether/unknown", "params": {"x": 1}})
    assert (await ready.result("session/list", {})) == {"sessions": []}
    assert all(m.get("id") is not None for m in ready.messages)


async def test_a_body_that_is_not_json_is_a_parse_error_with_null_id(ready: Peer):
    ready.send_bytes(encode_frame(b'{"jsonrpc": "2.0", "id": 7, "method": '))
    reply = await ready.response(None)
    assert error_code(reply) == ErrorCode.PARSE_ERROR
    assert (await ready.result("session/list", {})) == {"sessions": []}


@pytest.mark.parametrize(
    ("message", "reply_id"),
    [
        ({"jsonrpc": "1.0", "id": 3, "method": "session/list"}, 3),
        ({"id": 4, "method": "session/list"}, 4),
        ({"jsonrpc": "2.0", "id": 5, "method": 42}, 5),
        ({"jsonrpc": "2.0", "id": {"nested": 1}, "method": "session/list"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "session/list"}, None),
    ],
)
async def test_an_invalid_envelope_is_an_invalid_request(
    ready: Peer, message: dict[str, Any], reply_id: Any
):
    ready.send(message)
    assert error_code(await ready.response(reply_id)) == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("body", [b"[]", b'[{"jsonrpc":"2.0","id":1,"method":"x"}]', b"42", b'"s"'])
async def test_a_batch_or_scalar_body_is_an_invalid_request_with_null_id(ready: Peer, body: bytes):
    ready.send_bytes(encode_frame(body))
    assert error_code(await ready.response(None)) == ErrorCode.INVALID_REQUEST


async def test_string_ids_are_echoed_back_as_strings(ready: Peer):
    ready.send({"jsonrpc": "2.0", "id": "abc", "method": "session/list", "params": {}})
    assert (await ready.response("abc"))["result"] == {"sessions": []}


async def test_an_unserializable_result_is_an_internal_error_and_the_server_goes_on(ready: Peer):
    async def broken(params: Any) -> object:
        return object()

    ready.server.feature("test/broken")(broken)
    assert error_code(await ready.call("test/broken", {})) == ErrorCode.INTERNAL_ERROR
    assert (await ready.result("session/list", {})) == {"sessions": []}


async def test_a_handler_that_raises_is_an_internal_error_without_its_traceback(ready: Peer):
    async def crash(params: Any) -> None:
        raise RuntimeError("secret detail")

    ready.server.feature("test/crash")(crash)
    reply = await ready.call("test/crash", {})
    assert error_code(reply) == ErrorCode.INTERNAL_ERROR
    assert "secret detail" not in orjson.dumps(reply).decode()


async def test_cancel_request_answers_the_cancelled_request_with_request_cancelled(ready: Peer):
    started = register_slow(ready)
    msg_id = ready.request("test/slow", {})
    await started.wait()
    ready.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": msg_id}})
    assert error_code(await ready.response(msg_id)) == ErrorCode.REQUEST_CANCELLED


async def test_after_shutdown_requests_are_refused_and_exit_ends_with_code_0(ready: Peer):
    assert (await ready.call("shutdown"))["result"] is None
    assert error_code(await ready.call("session/list", {})) == ErrorCode.INVALID_REQUEST
    ready.send({"jsonrpc": "2.0", "method": "exit"})
    assert ready.wire.stopped.is_set()
    assert ready.wire.exit_code == 0


async def test_exit_without_shutdown_ends_with_code_1(ready: Peer):
    ready.send({"jsonrpc": "2.0", "method": "exit"})
    assert ready.wire.exit_code == 1


async def test_a_result_is_dumped_by_alias_with_unset_optionals_omitted(ready: Peer):
    session = await ready.result("session/create", {})
    assert "sessionId" in session and "session_id" not in session
    assert "title" not in session and None not in session.values()


async def test_a_handler_that_suspends_is_answered_with_its_result_or_its_error(ready: Peer):
    gate = asyncio.Event()

    async def waits(params: Any) -> dict[str, Any]:
        await gate.wait()
        await asyncio.sleep(0)
        if params.get("fail"):
            raise RuntimeError("after waiting")
        return {"waited": True}

    ready.server.feature("test/waits")(waits)
    ok, failing = ready.request("test/waits", {}), ready.request("test/waits", {"fail": True})
    assert (await ready.result("session/list", {})) == {"sessions": []}  # not held up by them
    gate.set()
    assert (await ready.response(ok))["result"] == {"waited": True}
    assert error_code(await ready.response(failing)) == ErrorCode.INTERNAL_ERROR


async def test_a_suspended_handler_sees_the_cancellation_and_can_clean_up(ready: Peer):
    cleaned = asyncio.Event()
    started = asyncio.Event()

    async def guarded(params: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    ready.server.feature("test/guarded")(guarded)
    msg_id = ready.request("test/guarded", {})
    await started.wait()
    ready.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": msg_id}})
    assert error_code(await ready.response(msg_id)) == ErrorCode.REQUEST_CANCELLED
    assert cleaned.is_set()


async def test_a_response_to_no_request_of_ours_is_dropped_and_breaks_nothing(ready: Peer):
    started = register_slow(ready)
    slow_id = ready.request("test/slow", {})
    await started.wait()
    get_id = 500
    ready.send_bytes(
        encode_frame(orjson.dumps({"jsonrpc": "2.0", "id": slow_id, "result": None}))
        + encode_frame(orjson.dumps({"jsonrpc": "2.0", "id": 77, "error": "not an object"}))
        + encode_frame(
            orjson.dumps({"jsonrpc": "2.0", "id": get_id, "method": "session/list", "params": {}})
        )
    )
    assert (await ready.response(get_id))["result"] == {"sessions": []}
    ready.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": slow_id}})
    assert error_code(await ready.response(slow_id)) == ErrorCode.REQUEST_CANCELLED


async def test_after_shutdown_a_running_request_can_still_be_cancelled(ready: Peer):
    started = register_slow(ready)
    slow_id = ready.request("test/slow", {})
    await started.wait()
    shutdown_id = ready.request("shutdown")
    ready.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": slow_id}})
    assert error_code(await ready.response(slow_id)) == ErrorCode.REQUEST_CANCELLED
    assert (await ready.response(shutdown_id))["result"] is None


async def test_initialize_lists_the_tools_the_configuration_enables(peer: Peer, workspace: Path):
    result = await peer.result(
        "initialize",
        {
            "rootUri": workspace.as_uri(),
            "initializationOptions": {"tools": {"enabled": ["read_file", "search_text"]}},
        },
    )
    assert result["capabilities"]["tools"] == ["read_file", "search_text"]
    assert set(result["capabilities"]["providers"]) == {"openai", "anthropic", "gemini", "scripted"}


async def test_invalid_initialization_options_are_a_config_error_and_initialize_can_be_retried(
    peer: Peer,
):
    reply = await peer.call(
        "initialize", {"initializationOptions": {"kernel": {"maxIterations": 0}}}
    )
    assert error_code(reply) == ErrorCode.CONFIG_ERROR
    assert reply["error"]["data"]["key"] == "kernel.max_iterations"
    assert (await peer.result("initialize", {}))["protocolVersion"] == 1


@pytest.mark.parametrize(
    "params",
    [{"id": [1]}, {"id": {"a": 1}}, {"id": None}, {"id": True}, {"id": 1.5}, {}, [1], "x", None],
    ids=repr,
)
async def test_a_cancel_request_without_a_usable_id_is_ignored_at_debug_level(
    ready: Peer, params: Any, caplog: pytest.LogCaptureFixture
):
    started = register_slow(ready)
    slow_id = ready.request("test/slow", {})
    await started.wait()
    caplog.set_level("DEBUG")
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": "$/cancelRequest"}
    if params is not None:
        message["params"] = params
    ready.send(message)
    assert await ready.result("session/list", {}) == {"sessions": []}
    assert [r.levelname for r in caplog.records if r.levelno > 10] == []
    assert not [m for m in ready.messages if m.get("id") == slow_id]  # still running
    ready.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": slow_id}})
    assert error_code(await ready.response(slow_id)) == ErrorCode.REQUEST_CANCELLED


async def test_a_cancel_request_for_a_request_already_answered_is_ignored_quietly(
    ready: Peer, caplog: pytest.LogCaptureFixture
):
    msg_id = ready.request("session/list", {})
    await ready.response(msg_id)
    caplog.set_level("DEBUG")
    ready.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": msg_id}})
    assert await ready.result("session/list", {}) == {"sessions": []}
    assert [r.levelname for r in caplog.records if r.levelno > 10] == []


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 5, "method": "no/such/method", "params": {}},
        {"jsonrpc": "2.0", "method": "kernel/cancel", "params": {"sessionId": "none"}},
        {"jsonrpc": "2.0", "id": "tether-999", "error": {"code": "x", "message": 1}},
        {"jsonrpc": "2.0", "id": "tether-998", "result": {}},
    ],
    ids=["unknown-method", "notification-of-a-request", "malformed-answer", "stray-answer"],
)
async def test_a_clients_mistake_is_not_logged_as_an_error(
    ready: Peer, message: dict[str, Any], caplog: pytest.LogCaptureFixture
):
    caplog.set_level("DEBUG")
    ready.send(message)
    assert await ready.result("session/list", {}) == {"sessions": []}
    assert [r.getMessage() for r in caplog.records if r.levelno >= 40] == []


async def test_pipelined_gets_and_writes_each_answer_the_session_as_it_was_then(ready: Peer):
    """One read holding gets between appends, a configure, a fork and a clear: each get sees
    every write sent before it (the encoding a session keeps is dropped on each write)."""
    sid = (await ready.result("session/create", {}))["sessionId"]

    def request(method: str, **params: Any) -> dict[str, Any]:
        ready._ids += 1
        body = {"jsonrpc": "2.0", "id": ready._ids, "method": method, "params": params}
        return body

    message = {"role": "user", "content": "x" * 300}
    sent = [
        request("session/get", sessionId=sid),
        request("session/append", sessionId=sid, messages=[message]),
        request("session/get", sessionId=sid),
        request("session/configure", sessionId=sid, title="renamed"),
        request("session/get", sessionId=sid),
        request("session/append", sessionId=sid, messages=[message, message]),
        request("session/get", sessionId=sid),
        request("session/clear", sessionId=sid),
        request("session/get", sessionId=sid),
        request("session/get", sessionId="no-such-session"),
        request("session/get", sessionId=7),
    ]
    ready.send_bytes(b"".join(encode_frame(orjson.dumps(body)) for body in sent))
    replies = [await ready.response(body["id"]) for body in sent]
    gets = [
        r["result"]
        for r, b in zip(replies, sent, strict=True)
        if b["method"] == "session/get" and "result" in r
    ]
    assert [g["messageCount"] for g in gets] == [0, 1, 1, 3, 0]
    assert [g.get("title") for g in gets] == [None, None, "renamed", "renamed", "renamed"]
    assert error_code(replies[-2]) == ErrorCode.SESSION_NOT_FOUND
    assert error_code(replies[-1]) == ErrorCode.INVALID_PARAMS
    appended = replies[5]["result"]["messages"]
    assert [m["content"] for m in appended] == [message["content"]] * 2
    assert all(m["role"] == "user" and m["id"] and m["createdAt"] for m in appended)


async def test_an_append_answers_its_messages_as_a_later_read_gives_them(ready: Peer):
    sid = (await ready.result("session/create", {}))["sessionId"]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "look"}], "metadata": {"k": [1]}},
        {
            "role": "assistant",
            "content": None,
            "toolCalls": [{"id": "c1", "name": "read", "arguments": {"path": "a"}}],
            "author": "agent",
        },
        {"role": "tool", "toolCallId": "c1", "name": "read", "content": "ok", "output": [1, 2]},
        {"role": "user", "content": {"any": "json"}},
    ]
    answer = await ready.result("session/append", {"sessionId": sid, "messages": messages})
    read = await ready.result("session/messages", {"sessionId": sid})
    assert answer["messages"] == read["messages"]
    assert answer["messages"][1]["toolCalls"][0]["arguments"] == '{"path":"a"}'
