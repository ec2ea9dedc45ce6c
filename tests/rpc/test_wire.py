"""The wire on its own, before any pygls server is attached to it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from tether.lsp.server import TetherServer
from tether.protocol import ErrorCode
from tether.protocol.framing import Frame, FrameDecoder, encode_frame
from tether.rpc.app import App
from tether.rpc.wire import Wire


def frames(*messages: dict[str, object]) -> bytes:
    return b"".join(encode_frame(orjson.dumps(m)) for m in messages)


class Recorder:
    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.replies: list[dict[str, object]] = []

    def __call__(self, data: bytes) -> None:
        for item in self.decoder.feed(data):
            assert isinstance(item, Frame)
            self.replies.append(orjson.loads(item.body))


async def test_initialize_is_answered_before_any_server_is_attached(tmp_path: Path):
    handshakes: list[bool] = []
    wire = Wire(App(), on_initialized=lambda: handshakes.append(True))
    written = Recorder()
    wire.connect(written)
    wire.data_received(
        frames(
            {"jsonrpc": "2.0", "id": 0, "method": "session/list", "params": {}},
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"rootUri": tmp_path.as_uri()},
            },
        )
    )
    await asyncio.sleep(0)  # replies go out once per turn of the loop
    assert [r["id"] for r in written.replies] == [0, 1]
    assert written.replies[0]["error"]["code"] == ErrorCode.SERVER_NOT_INITIALIZED  # type: ignore[index]
    assert written.replies[1]["result"]["protocolVersion"] == 1  # type: ignore[index]
    assert handshakes == [True]


async def test_tethers_methods_are_answered_before_any_server_is_attached(tmp_path: Path):
    app = App()
    wire = Wire(app)
    written = Recorder()
    wire.connect(written)
    wire.data_received(
        frames(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"rootUri": tmp_path.as_uri()},
            },
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/create", "params": {"title": "a"}},
            {"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {}},
        )
    )
    await asyncio.sleep(0)
    assert [r["id"] for r in written.replies] == [1, 2, 3]
    listed = written.replies[2]["result"]["sessions"]  # type: ignore[index]
    assert [s["title"] for s in listed] == ["a"]


async def test_other_requests_wait_for_the_server_and_are_answered_in_order(tmp_path: Path):
    app = App()
    wire = Wire(app)
    written = Recorder()
    wire.connect(written)
    waiting: list[object] = []
    wire.on_waiting = lambda message: waiting.append(message["id"])
    wire.data_received(
        frames(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"rootUri": tmp_path.as_uri()},
            },
            {"jsonrpc": "2.0", "id": 2, "method": "example/first", "params": {}},
            {"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {}},
            {"jsonrpc": "2.0", "id": 4, "method": "example/second", "params": {}},
        )
    )
    await asyncio.sleep(0)
    assert [r["id"] for r in written.replies] == [1, 3]
    assert waiting == [2, 4]  # the loader is told what waits
    TetherServer(app, wire)  # attaching hands over what waited
    await asyncio.sleep(0)
    assert [r["id"] for r in written.replies] == [1, 3, 2, 4]
    codes = [r["error"]["code"] for r in written.replies[2:]]  # type: ignore[index]
    assert codes == [ErrorCode.METHOD_NOT_FOUND] * 2


async def test_shutdown_waits_for_earlier_requests_and_exit_code_follows_it(tmp_path: Path):
    app = App()
    wire = Wire(app)
    written = Recorder()
    wire.connect(written)
    wire.data_received(
        frames(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"rootUri": tmp_path.as_uri()},
            },
            {"jsonrpc": "2.0", "id": 2, "method": "example/unknown", "params": {}},
            {"jsonrpc": "2.0", "id": 3, "method": "shutdown"},
            {"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": {}},
        )
    )
    await asyncio.sleep(0)
    assert [r["id"] for r in written.replies] == [1, 4]  # 4 refused at once; 2 waits for pygls
    assert written.replies[1]["error"]["code"] == ErrorCode.INVALID_REQUEST  # type: ignore[index]
    TetherServer(app, wire)
    await wire.settle(cancel=False)
    await asyncio.sleep(0)
    assert [r["id"] for r in written.replies] == [1, 4, 2, 3]
    assert written.replies[3]["result"] is None
    wire.data_received(frames({"jsonrpc": "2.0", "method": "exit"}))
    assert wire.stopped.is_set() and wire.exit_code == 0


async def test_a_request_to_the_client_is_answered_before_any_server_is_attached(tmp_path: Path):
    app = App()
    wire = Wire(app)
    written = Recorder()
    wire.connect(written)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    wire.data_received(frames(initialize))
    asking = asyncio.ensure_future(app.request_client("test/ask", {"question": "ok?"}))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    [request] = [r for r in written.replies if r.get("method") == "test/ask"]
    wire.data_received(frames({"jsonrpc": "2.0", "id": request["id"], "result": "yes"}))
    assert await asyncio.wait_for(asking, 5) == "yes"
    assert not wire.attached


async def test_a_waiting_tether_request_is_cancelled_by_cancel_request(tmp_path: Path):
    app = App()
    wire = Wire(app)
    written = Recorder()
    wire.connect(written)
    release = asyncio.Event()

    async def slow(params: object) -> dict[str, str]:
        await release.wait()
        return {"never": "sent"}

    app.methods["test/slow"] = slow
    wire.data_received(
        frames(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            {"jsonrpc": "2.0", "id": "s", "method": "test/slow", "params": {}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "s"}},
        )
    )
    for _ in range(3):
        await asyncio.sleep(0)
    [reply] = [r for r in written.replies if r.get("id") == "s"]
    assert reply["error"]["code"] == ErrorCode.REQUEST_CANCELLED  # type: ignore[index]
    release.set()
    await asyncio.sleep(0)
    assert [r.get("id") for r in written.replies].count("s") == 1
    assert not wire.attached


async def test_the_answers_of_one_read_go_out_in_one_write(tmp_path: Path):
    wire = Wire(App())
    writes: list[bytes] = []
    wire.connect(writes.append)
    wire.data_received(frames({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}))
    await asyncio.sleep(0)
    writes.clear()
    wire.data_received(
        frames(
            *(
                {"jsonrpc": "2.0", "id": n, "method": "session/list", "params": {}}
                for n in range(1, 51)
            )
        )
    )
    assert len(writes) == 1  # at the end of the read, without waiting for a turn of the loop
    await asyncio.sleep(0)
    assert len(writes) == 1
    written = Recorder()
    written(writes[0])
    assert [r["id"] for r in written.replies] == list(range(1, 51))
