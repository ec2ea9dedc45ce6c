"""An in-process server: bytes in through ``data_received``, frames out through a list."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tether.lsp.server import TetherServer
from tether.protocol.framing import Frame, FrameDecoder, encode_frame
from tether.rpc.app import App
from tether.rpc.wire import Wire


class Peer:
    """A client in process: feeds a server's wire raw bytes and decodes what it writes back."""

    def __init__(self) -> None:
        self.wire = Wire(App())
        self.server = TetherServer(self.wire._app, self.wire)
        self._decoder = FrameDecoder()
        self.messages: list[dict[str, Any]] = []
        self.bad_frames: list[str] = []
        self._arrived = asyncio.Event()
        self.wire.connect(self._written)
        self._ids = 0

    def _written(self, data: bytes) -> None:
        for item in self._decoder.feed(data):
            if isinstance(item, Frame):
                self.messages.append(orjson.loads(item.body))
            else:
                self.bad_frames.append(item.reason)
        self._arrived.set()

    def send_bytes(self, data: bytes) -> None:
        self.wire.data_received(data)

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(encode_frame(orjson.dumps(message)))

    def request(self, method: str, params: Any = None, **extra: Any) -> int:
        self._ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            message["params"] = params
        self.send({**message, **extra})
        return self._ids

    async def response(self, msg_id: Any) -> dict[str, Any]:
        """The one response to ``msg_id``, waiting for it on the event loop (5 s at most)."""
        async with asyncio.timeout(5):
            while True:
                found = [m for m in self.messages if m.get("id") == msg_id and "method" not in m]
                if found:
                    assert len(found) == 1, f"{len(found)} responses to id {msg_id!r}"
                    return found[0]
                self._arrived.clear()
                await self._arrived.wait()

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        return await self.response(self.request(method, params))

    async def result(self, method: str, params: Any = None) -> Any:
        reply = await self.call(method, params)
        assert "error" not in reply, reply
        return reply["result"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    yield Peer()


@pytest.fixture
async def ready(peer: Peer, workspace: Path) -> AsyncIterator[Peer]:
    """A peer whose server has been initialized with ``workspace`` as its folder."""
    await peer.result("initialize", {"workspaceFolders": [{"uri": workspace.as_uri()}]})
    peer.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    yield peer
