"""The fast paths of ``session/get`` and ``session/append`` (params checked without pydantic, the
memory store answering encoded) against the general path, through the wire.

The general path is taken by the same params with one extra key, which every params model ignores:
both must answer the same bytes (ids and times aside), and bad params must get pydantic's errors.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tether.protocol import ErrorCode
from tether.protocol.limits import Limits
from tether.protocol.sessions import plain_append, plain_session_id

from .conftest import Peer


async def session(peer: Peer) -> str:
    return str((await peer.result("session/create", {"title": "t"}))["sessionId"])


def ignored_key(params: dict[str, Any]) -> dict[str, Any]:
    """The same params with a key no model knows: valid the same, but not the plain shape."""
    return {**params, "ignoredByTheServer": True}


async def test_a_plain_get_answers_the_bytes_the_general_path_does(ready: Peer) -> None:
    sid = await session(ready)
    plain = {"sessionId": sid}
    assert plain_session_id(plain) == sid and plain_session_id(ignored_key(plain)) is None
    fast = await ready.call("session/get", plain)
    general = await ready.call("session/get", ignored_key(plain))
    assert orjson.dumps(fast["result"]) == orjson.dumps(general["result"])
    assert fast["result"]["sessionId"] == sid


@pytest.mark.parametrize(
    "params",
    [{"sessionId": ""}, {"sessionId": 7}, {"sessionId": None}, {}, {"session": "x"}],
)
async def test_a_get_with_bad_params_still_gets_pydantic_s_error(
    ready: Peer, params: dict[str, Any]
) -> None:
    reply = await ready.call("session/get", params)
    assert reply["error"]["code"] == ErrorCode.INVALID_PARAMS
    assert [f["field"] for f in reply["error"]["data"]["fields"]] == ["sessionId"]


async def test_a_get_of_an_unknown_session_is_not_found_on_both_paths(ready: Peer) -> None:
    fast = await ready.call("session/get", {"sessionId": "nope"})
    general = await ready.call("session/get", ignored_key({"sessionId": "nope"}))
    assert fast["error"] == general["error"]
    assert fast["error"]["code"] == ErrorCode.SESSION_NOT_FOUND


def without_ids_and_times(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in m.items() if k not in ("id", "createdAt")} for m in result["messages"]
    ]


async def test_a_plain_append_answers_and_stores_what_the_general_path_does(ready: Peer) -> None:
    sid = await session(ready)
    messages = [
        {"role": "user", "content": 'text with "quotes", \\ and\nlines ' * 50},
        {"role": "assistant", "content": "é 😀"},
        {"role": "system", "content": ""},
    ]
    plain = {"sessionId": sid, "messages": messages}
    assert plain_append(plain, Limits(), 250) is not None
    general_params = {
        "sessionId": sid,
        "messages": [{**m, "ignoredByTheServer": 1} for m in messages],
    }
    assert plain_append(general_params, Limits(), 250) is None

    fast = await ready.result("session/append", plain)
    general = await ready.result("session/append", general_params)
    assert without_ids_and_times(fast) == without_ids_and_times(general)
    assert list(fast["messages"][0]) == list(general["messages"][0])  # same keys, same order
    assert fast["messages"][0]["createdAt"].endswith("Z")

    page = await ready.result("session/messages", {"sessionId": sid})
    assert page["messages"] == fast["messages"] + general["messages"]
    got = await ready.result("session/get", {"sessionId": sid})
    assert got["messageCount"] == 6


async def test_an_append_to_an_unknown_session_is_not_found_on_both_paths(ready: Peer) -> None:
    plain = {"sessionId": "nope", "messages": [{"role": "user", "content": "x"}]}
    fast = await ready.call("session/append", plain)
    general = await ready.call("session/append", ignored_key(plain))
    assert fast["error"] == general["error"]
    assert fast["error"]["code"] == ErrorCode.SESSION_NOT_FOUND


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user", "content": "x" * 11}, "messages.0"),  # over maxMessageBytes
        ({"role": "nobody", "content": "x"}, "messages.0.role"),
        ({"role": "tool", "content": "x"}, "messages.0"),  # no toolCallId
        ({"role": "user"}, "messages.0"),  # no content
    ],
)
async def test_a_bad_or_oversized_append_still_gets_its_error_and_stores_nothing(
    ready: Peer, message: dict[str, Any], field: str
) -> None:
    ready.wire._app.limits = Limits(max_message_bytes=10)
    sid = await session(ready)
    reply = await ready.call("session/append", {"sessionId": sid, "messages": [message]})
    assert reply["error"]["code"] == ErrorCode.INVALID_PARAMS
    assert [f["field"] for f in reply["error"]["data"]["fields"]] == [field]
    assert (await ready.result("session/get", {"sessionId": sid}))["messageCount"] == 0


async def test_a_plain_append_over_max_append_messages_names_the_limit(ready: Peer) -> None:
    ready.wire._app.limits = Limits(max_append_messages=2)
    sid = await session(ready)
    messages = [{"role": "user", "content": "x"}] * 3
    reply = await ready.call("session/append", {"sessionId": sid, "messages": messages})
    assert reply["error"]["data"]["limit"] == "maxAppendMessages"
    assert (await ready.result("session/get", {"sessionId": sid}))["messageCount"] == 0
