"""The NDJSON connection in-process: one response per request, whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import orjson

from tether.acp.wire import AcpError, AcpWire, ClientError
from tether.protocol import SessionNotFound


class Dispatcher:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.notified: list[tuple[str, Any]] = []

    def handler(self, method: str) -> Callable[[Any], Coroutine[Any, Any, Any]]:
        return partial(self.request, method)

    async def request(self, method: str, params: Any) -> Any:
        if method == "slow":
            self.started.set()
            await asyncio.Event().wait()
        if method == "unencodable":
            return {"value": object()}
        if method == "unknown_session":
            raise SessionNotFound("s1")
        if method == "boom":
            raise RuntimeError("a bug with a secret in it")
        if method == "refused":
            raise AcpError(-32099, "refused", {"why": "because"})
        return {"echo": params}

    def notification(self, method: str, params: Any) -> None:
        self.notified.append((method, params))


class Out(list[dict[str, Any]]):
    """What the connection wrote, message by message; ``written`` is set by each write."""

    def __init__(self) -> None:
        super().__init__()
        self.written = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.extend(map(orjson.loads, data.splitlines()))
        self.written.set()


def connect() -> tuple[AcpWire, Dispatcher, Out]:
    out = Out()
    dispatcher = Dispatcher()
    return AcpWire(dispatcher, out.write), dispatcher, out


async def written(out: Out, count: int) -> None:
    """Wait until the connection has written ``count`` messages."""
    while len(out) < count:
        out.written.clear()
        await out.written.wait()


def line(**message: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n"


async def test_errors_are_answered_with_their_codes_and_never_leak_internals() -> None:
    connection, _, out = connect()
    for msg_id, method in enumerate(["unencodable", "unknown_session", "boom", "refused", "ok"]):
        connection.data_received(line(id=msg_id, method=method, params={"a": 1}))
    await asyncio.wait_for(connection.wait_all(), 5)
    by_id = {message["id"]: message for message in out}
    assert by_id[0]["error"]["code"] == -32603
    assert by_id[1]["error"] == {
        "code": -32002,
        "message": "session not found: s1",
        "data": {"sessionId": "s1"},
    }
    assert by_id[2]["error"]["code"] == -32603 and "secret" not in by_id[2]["error"]["message"]
    assert by_id[3]["error"] == {"code": -32099, "message": "refused", "data": {"why": "because"}}
    assert by_id[4]["result"] == {"echo": {"a": 1}}
    assert len(out) == 5


async def test_cancel_request_answers_the_request_cancelled() -> None:
    connection, dispatcher, out = connect()
    connection.data_received(line(id="r1", method="slow"))
    await asyncio.wait_for(dispatcher.started.wait(), 5)
    connection.data_received(line(method="$/cancel_request", params={"requestId": "r1"}))
    await asyncio.wait_for(connection.wait_all(), 5)
    assert out == [
        {"jsonrpc": "2.0", "id": "r1", "error": {"code": -32800, "message": "request cancelled"}}
    ]


async def test_a_line_split_across_reads_and_a_request_to_the_client() -> None:
    connection, dispatcher, out = connect()
    data = line(method="note", params={"x": 1})
    connection.data_received(data[:5])
    connection.data_received(data[5:])
    assert dispatcher.notified == [("note", {"x": 1})]
    asked = asyncio.ensure_future(connection.request("session/request_permission", {"q": 1}))
    await asyncio.wait_for(out.written.wait(), 5)
    [question] = out
    assert question["id"] == "tether-1" and question["method"] == "session/request_permission"
    connection.data_received(line(id="tether-1", error={"code": -32000, "message": "no"}))
    try:
        await asyncio.wait_for(asked, 5)
    except ClientError as exc:
        assert (exc.code, exc.message) == (-32000, "no")
    else:
        raise AssertionError("the error answer did not raise")
    connection.data_received(line(id="tether-1", result={}))  # a second answer: ignored


async def test_a_withdrawn_request_drops_its_late_answer_and_a_lost_client_fails_the_rest() -> None:
    connection, _, out = connect()
    withdrawn = asyncio.ensure_future(connection.request("fs/read_text_file", {"path": "a"}))
    waiting = asyncio.ensure_future(connection.request("fs/read_text_file", {"path": "b"}))
    await asyncio.wait_for(written(out, 2), 5)
    withdrawn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await withdrawn
    connection.data_received(line(id="tether-1", result={"content": "late"}))  # dropped
    connection.connection_lost()
    try:
        await asyncio.wait_for(waiting, 5)
    except ConnectionError:
        pass
    else:
        raise AssertionError("a request to a client gone did not fail")
    try:
        await connection.request("fs/read_text_file", {"path": "c"})
    except ConnectionError:
        pass
    else:
        raise AssertionError("a request after the client went away was sent")
    assert [message["id"] for message in out] == ["tether-1", "tether-2"]
