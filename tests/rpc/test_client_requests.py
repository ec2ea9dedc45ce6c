"""Requests from the server to the client: answers routed back, errors, malformed answers,
and a request withdrawn with ``$/cancelRequest`` when its waiter is cancelled."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tether.rpc.errors import ClientError
from tether.testing import scripted_options, tool_call

from .conftest import Peer


async def sent(peer: Peer, method: str, count: int = 1) -> dict[str, Any]:
    """The ``count``th and last message of ``method`` the server wrote, waiting for it (5 s at
    most)."""
    async with asyncio.timeout(5):
        while True:
            found = [m for m in peer.messages if m.get("method") == method]
            if len(found) >= count:
                assert len(found) == count, found
                return found[-1]
            peer._arrived.clear()
            await peer._arrived.wait()


def ask(peer: Peer) -> asyncio.Task[Any]:
    request = peer.server.protocol.request_client("test/ask", {"question": "ok?"})
    return asyncio.ensure_future(request)


async def test_the_clients_result_is_returned(ready: Peer):
    answer = ask(ready)
    request = await sent(ready, "test/ask")
    assert request["params"] == {"question": "ok?"}
    ready.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": "allow"}})
    assert await asyncio.wait_for(answer, 5) == {"outcome": "allow"}


async def test_an_error_answer_raises_client_error_with_its_code(ready: Peer):
    answer = ask(ready)
    request = await sent(ready, "test/ask")
    error = {"code": -32601, "message": "no such method"}
    ready.send({"jsonrpc": "2.0", "id": request["id"], "error": error})
    with pytest.raises(ClientError) as raised:
        await asyncio.wait_for(answer, 5)
    assert (raised.value.code, raised.value.message) == (-32601, "no such method")


@pytest.mark.parametrize(
    "reply",
    [{}, {"error": "not an object"}, {"error": {"message": "no code"}}],
    ids=["empty", "error-string", "error-without-code"],
)
async def test_a_malformed_answer_fails_the_request_instead_of_leaving_it_waiting(
    ready: Peer, reply: dict[str, Any]
):
    answer = ask(ready)
    request = await sent(ready, "test/ask")
    ready.send({"jsonrpc": "2.0", "id": request["id"], **reply})
    with pytest.raises(ClientError) as raised:
        await asyncio.wait_for(answer, 5)
    assert raised.value.code is None
    assert (await ready.result("session/list", {})) == {"sessions": []}  # the server goes on


async def test_cancelling_the_waiter_sends_cancel_request_and_a_late_answer_is_dropped(
    ready: Peer,
):
    answer = ask(ready)
    request = await sent(ready, "test/ask")
    answer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answer
    cancel = await sent(ready, "$/cancelRequest")
    assert cancel["params"] == {"id": request["id"]}
    ready.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": "allow"}})
    assert (await ready.result("session/list", {})) == {"sessions": []}


async def test_a_question_cancelled_under_a_waiter_that_was_not_raises_client_error(ready: Peer):
    answer = ask(ready)
    request = await sent(ready, "test/ask")
    ready.wire._outgoing._waiting[request["id"]].future.cancel()  # type: ignore[attr-defined]  # as nothing on the wire can
    with pytest.raises(ClientError) as raised:
        await asyncio.wait_for(answer, 5)
    assert raised.value.code is None
    cancel = await sent(ready, "$/cancelRequest")
    assert cancel["params"] == {"id": request["id"]}  # the client stops asking its user


async def initialized(peer: Peer, workspace: Path, turns: list[dict[str, Any]]) -> str:
    """Initialize with the permissions capability and a script; a new session's id."""
    script = workspace.parent / f"{workspace.name}-script.json"
    script.write_text(json.dumps(turns))
    await peer.result(
        "initialize",
        {
            "workspaceFolders": [{"uri": workspace.as_uri()}],
            "capabilities": {"tether": {"permissions": True}},
            "initializationOptions": scripted_options(script),
        },
    )
    peer.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return str((await peer.result("session/create", {}))["sessionId"])


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ({"result": {"outcome": "sure"}}, "is not"),
        ({"result": None}, "is not"),
        ({"error": "boom"}, "not a valid response"),
        ({"error": {"code": -32603, "message": "dialog crashed"}}, "dialog crashed"),
    ],
    ids=["unknown-outcome", "null", "error-string", "error"],
)
async def test_a_bad_answer_to_a_permission_request_is_a_rejection_saying_why(
    peer: Peer, workspace: Path, reply: dict[str, Any], reason: str
):
    write = tool_call("write_file", "c1", path="a.txt", content="x")
    sid = await initialized(peer, workspace, [{"toolCalls": [write]}, {"text": "ok"}])
    run = peer.request("kernel/run", {"sessionId": sid, "prompt": "write"})
    request = await sent(peer, "tool/requestPermission")
    assert request["params"]["toolCall"]["name"] == "write_file"
    peer.send({"jsonrpc": "2.0", "id": request["id"], **reply})
    result = (await peer.response(run))["result"]
    [record] = result["toolCalls"]
    assert record["isError"] is True
    assert reason in record["result"]
    assert not (workspace / "a.txt").exists()


def run_with_id(peer: Peer, msg_id: str, sid: str) -> None:
    """A ``kernel/run`` whose request id is ``msg_id`` (ids are per sender: any string will do)."""
    params = {"sessionId": sid, "prompt": "write"}
    peer.send({"jsonrpc": "2.0", "id": msg_id, "method": "kernel/run", "params": params})


async def test_cancel_request_for_a_client_id_equal_to_ours_cancels_the_run_not_our_question(
    peer: Peer, workspace: Path
):
    write = tool_call("write_file", "c1", path="a.txt", content="x")
    sid = await initialized(peer, workspace, [{"toolCalls": [write]}, {"text": "never asked"}])
    run_with_id(peer, "tether-1", sid)
    asked = await sent(peer, "tool/requestPermission")
    assert asked["id"] == "tether-1"  # the server's first request: the same id as the run
    peer.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "tether-1"}})
    reply = await peer.response("tether-1")
    assert reply["error"]["code"] == -32800, reply
    partial = reply["error"]["data"]
    assert partial["stopReason"] == "cancelled"
    [record] = partial["toolCalls"]
    assert (record["id"], record["result"], record["isError"]) == ("c1", "cancelled", True)
    withdrawn = await sent(peer, "$/cancelRequest")
    assert withdrawn["params"] == {"id": "tether-1"}  # and the question is withdrawn
    peer.send({"jsonrpc": "2.0", "id": "tether-1", "result": {"outcome": "allow"}})  # too late
    assert (await peer.result("session/list", {}))["sessions"][0]["sessionId"] == sid
    assert not (workspace / "a.txt").exists()


async def test_a_client_request_with_the_id_of_our_question_does_not_lose_its_answer(
    peer: Peer, workspace: Path
):
    first = tool_call("write_file", "c1", path="a.txt", content="a")
    second = tool_call("write_file", "c2", path="b.txt", content="b")
    turns = [{"toolCalls": [first]}, {"toolCalls": [second]}, {"text": "one"}, {"text": "two"}]
    sid = await initialized(peer, workspace, turns)
    other = str((await peer.result("session/create", {}))["sessionId"])
    run = peer.request("kernel/run", {"sessionId": sid, "prompt": "write a"})
    asked = await sent(peer, "tool/requestPermission")
    assert asked["id"] == "tether-1"
    run_with_id(peer, "tether-1", other)  # waits on its own question, tether-2
    await sent(peer, "tool/requestPermission", count=2)
    peer.send({"jsonrpc": "2.0", "id": "tether-1", "result": {"outcome": "allow"}})
    result = (await peer.response(run))["result"]
    assert result["toolCalls"][0]["isError"] is False
    assert (workspace / "a.txt").read_text() == "a"
    peer.send({"jsonrpc": "2.0", "id": "tether-2", "result": {"outcome": "reject"}})
    other_result = (await peer.response("tether-1"))["result"]
    assert other_result["toolCalls"][0]["result"] == "rejected by user"
    assert not (workspace / "b.txt").exists()


async def test_requests_sent_by_pygls_and_by_tether_share_one_id_space_and_routing(ready: Peer):
    from lsprotocol import types as lsp

    params = lsp.ShowMessageRequestParams(
        type=lsp.MessageType.Info, message="go?", actions=[lsp.MessageActionItem(title="Go")]
    )
    pygls_side = ready.server.protocol.send_request("window/showMessageRequest", params)
    answer = ask(ready)
    shown = await sent(ready, "window/showMessageRequest")
    asked = await sent(ready, "test/ask")
    assert shown["id"] != asked["id"]
    assert {shown["id"][:7], asked["id"][:7]} == {"tether-"}
    ready.send({"jsonrpc": "2.0", "id": asked["id"], "result": "no"})
    ready.send({"jsonrpc": "2.0", "id": shown["id"], "result": {"title": "Go"}})
    assert await asyncio.wait_for(answer, 5) == "no"
    chosen = await asyncio.wait_for(asyncio.wrap_future(pygls_side), 5)
    assert chosen == lsp.MessageActionItem(title="Go")


async def test_a_pygls_side_request_that_cannot_be_encoded_fails_at_once(ready: Peer):
    """Nothing waits for the answer to a request that was never sent."""
    pygls_side = ready.server.protocol.send_request("window/showMessageRequest", object())
    with pytest.raises(TypeError, match="not JSON serializable"):
        await asyncio.wait_for(asyncio.wrap_future(pygls_side), 5)
    answer = ask(ready)  # the ids and the routing go on as before
    asked = await sent(ready, "test/ask")
    ready.send({"jsonrpc": "2.0", "id": asked["id"], "result": "yes"})
    assert await asyncio.wait_for(answer, 5) == "yes"
