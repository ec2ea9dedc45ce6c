"""Size limits answered with errors that name them, and big requests that do not hold others up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tether.protocol import ErrorCode
from tether.protocol.framing import encode_frame
from tether.protocol.limits import Limits
from tether.rpc.handlers import SLICE

from .conftest import Peer


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def session(peer: Peer) -> str:
    return str((await peer.result("session/create", {}))["sessionId"])


async def test_an_append_over_max_append_messages_names_the_limit(ready: Peer):
    ready.wire._app.limits = Limits(max_append_messages=3)
    sid = await session(ready)
    reply = await ready.call("session/append", {"sessionId": sid, "messages": [user("x")] * 4})
    assert reply["error"]["code"] == ErrorCode.INVALID_PARAMS
    assert reply["error"]["data"]["limit"] == "maxAppendMessages"
    assert reply["error"]["data"]["value"] == 3
    assert (await ready.result("session/get", {"sessionId": sid}))["messageCount"] == 0


async def test_a_message_over_max_message_bytes_names_the_limit_and_the_message(ready: Peer):
    ready.wire._app.limits = Limits(max_message_bytes=10)
    sid = await session(ready)
    messages = [user("short"), user("é" * 6)]  # 12 bytes of UTF-8
    reply = await ready.call("session/append", {"sessionId": sid, "messages": messages})
    assert reply["error"]["data"]["limit"] == "maxMessageBytes"
    assert reply["error"]["data"]["value"] == 10
    assert [f["field"] for f in reply["error"]["data"]["fields"]] == ["messages.1"]


async def test_a_big_append_is_validated_in_slices_and_names_the_failing_message(ready: Peer):
    sid = await session(ready)
    messages = [user(str(n)) for n in range(3 * SLICE)]
    messages[2 * SLICE + 5] = {"role": "nobody"}
    reply = await ready.call("session/append", {"sessionId": sid, "messages": messages})
    assert reply["error"]["code"] == ErrorCode.INVALID_PARAMS
    fields = {f["field"] for f in reply["error"]["data"]["fields"]}
    assert f"messages.{2 * SLICE + 5}.role" in fields
    assert (await ready.result("session/get", {"sessionId": sid}))["messageCount"] == 0


async def test_a_big_append_answers_every_message_in_order_and_stores_them_all(ready: Peer):
    sid = await session(ready)
    count = 2 * SLICE + 7
    result = await ready.result(
        "session/append", {"sessionId": sid, "messages": [user(str(n)) for n in range(count)]}
    )
    assert [m["content"] for m in result["messages"]] == [str(n) for n in range(count)]
    assert set(result["messages"][0]) == {"role", "content", "id", "createdAt"}
    page = await ready.result("session/messages", {"sessionId": sid, "limit": 2, "order": "desc"})
    assert page["total"] == count
    assert [m["content"] for m in page["messages"]] == [str(count - 1), str(count - 2)]


async def test_requests_sent_after_a_big_append_are_answered_before_it(ready: Peer):
    sid = await session(ready)
    big = ready.request("session/append", {"sessionId": sid, "messages": [user("x")] * (5 * SLICE)})
    small = ready.request("session/get", {"sessionId": sid})
    await ready.response(big)
    ids = [m.get("id") for m in ready.messages]
    assert ids.index(small) < ids.index(big)


async def test_a_frame_over_max_frame_bytes_is_a_parse_error_naming_the_limit(
    peer: Peer, workspace: Path
):
    options = {"limits": {"maxFrameBytes": 100_000}}
    await peer.result(
        "initialize", {"rootUri": workspace.as_uri(), "initializationOptions": options}
    )
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": "big",
            "method": "session/create",
            "params": {"title": "x" * 200_000},
        }
    )
    peer.send_bytes(encode_frame(body))
    assert await peer.result("session/list", {}) == {"sessions": []}
    errors = [m["error"] for m in peer.messages if m.get("id") is None]
    assert errors[0]["code"] == ErrorCode.PARSE_ERROR
    assert errors[0]["data"] == {"limit": "maxFrameBytes", "value": 100_000}
    assert not [m for m in peer.messages if m.get("id") == "big"]


async def test_a_result_with_a_long_list_of_plain_values_is_answered_as_usual(ready: Peer):
    tools = [f"tool_{n}" for n in range(2 * SLICE)]
    session = await ready.result("session/create", {"tools": tools})
    assert (await ready.result("session/get", {"sessionId": session["sessionId"]}))[
        "tools"
    ] == tools


def mixed(count: int) -> list[dict[str, Any]]:
    """Messages of every shape: text, blocks, tool calls and their results, metadata."""
    messages: list[dict[str, Any]] = []
    for n in range(count):
        kind = n % 4
        if kind == 0:
            messages.append({"role": "user", "content": f"{n}: é \u2028", "metadata": {"n": [n]}})
        elif kind == 1:
            call = {"id": f"c{n}", "name": "read", "arguments": {"path": f"{n}.txt"}}
            messages.append({"role": "assistant", "toolCalls": [call], "author": "model"})
        elif kind == 2:
            messages.append({"role": "tool", "toolCallId": f"c{n - 1}", "content": "ok"})
        else:
            blocks = [{"type": "text", "text": str(n)}, {"type": "resource_link", "uri": "a:b"}]
            messages.append({"role": "assistant", "content": blocks, "name": "x"})
    return messages


async def every_message(peer: Peer, sid: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"sessionId": sid, "limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = await peer.result("session/messages", params)
        found += page["messages"]
        cursor = page.get("nextCursor")
        if cursor is None:
            return found


async def test_a_big_append_answers_exactly_what_session_messages_returns_after(ready: Peer):
    sid = await session(ready)
    await ready.result("session/append", {"sessionId": sid, "messages": [user("before")]})
    count = 6 * SLICE + 3
    result = await ready.result("session/append", {"sessionId": sid, "messages": mixed(count)})
    stored = await every_message(ready, sid)
    assert len(result["messages"]) == count
    assert result["messages"] == stored[1:]
    assert len({m["id"] for m in result["messages"]}) == count
    assert all("createdAt" in m for m in result["messages"])


async def test_a_big_append_stores_nothing_when_a_message_in_a_middle_slice_answers_no_call(
    ready: Peer,
):
    sid = await session(ready)
    messages = mixed(6 * SLICE)
    bad = next(n for n in range(3 * SLICE, 4 * SLICE) if n % 4 == 2)  # a tool result
    messages[bad]["toolCallId"] = "no-such-call"
    reply = await ready.call("session/append", {"sessionId": sid, "messages": messages})
    assert reply["error"]["code"] == ErrorCode.INVALID_PARAMS
    assert [f["field"] for f in reply["error"]["data"]["fields"]] == [f"messages.{bad}.toolCallId"]
    assert (await ready.result("session/get", {"sessionId": sid}))["messageCount"] == 0
    assert await every_message(ready, sid) == []
    answered = await ready.result(
        "session/append", {"sessionId": sid, "messages": mixed(SLICE + 1)}
    )
    assert len(answered["messages"]) == SLICE + 1


async def test_a_big_append_to_a_session_deleted_while_it_is_validated_stores_nothing(
    ready: Peer,
):
    sid = await session(ready)
    big = ready.request("session/append", {"sessionId": sid, "messages": mixed(8 * SLICE)})
    deleted = ready.request("session/delete", {"sessionId": sid})
    reply = await ready.response(big)
    assert (await ready.response(deleted))["result"] == {"deleted": True}
    assert reply["error"]["code"] == ErrorCode.SESSION_NOT_FOUND
