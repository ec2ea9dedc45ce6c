"""A stand-in for a server that asks for permissions, reporting the answers it gets.

It answers ``initialize`` and ``shutdown``, reports the ``initialize`` params as a
``test/initialize`` notification, sends one ``tool/requestPermission`` per tool name given on its
command line once ``initialized`` arrives, and reports each response as a ``test/answer``
notification. Run as ``python permission_peer.py read_file write_file``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import orjson

from tether.protocol.framing import Frame, FrameDecoder, encode_frame

INITIALIZE_RESULT = {
    "protocolVersion": 1,
    "serverInfo": {"name": "permission-peer", "version": "0"},
    "capabilities": {
        "sessions": {"store": "memory", "fork": False, "durable": False},
        "methods": [],
    },
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(encode_frame(orjson.dumps({"jsonrpc": "2.0", **message})))
    sys.stdout.buffer.flush()


def messages() -> Iterator[dict[str, Any]]:
    decoder = FrameDecoder()
    while chunk := sys.stdin.buffer.read1(65536):
        for item in decoder.feed(chunk):
            if isinstance(item, Frame):
                yield orjson.loads(item.body)


def main(tools: list[str]) -> None:
    for message in messages():
        method = message.get("method")
        if method == "initialize":
            send({"id": message["id"], "result": INITIALIZE_RESULT})
            send({"method": "test/initialize", "params": message["params"]})
        elif method == "initialized":
            for n, tool in enumerate(tools):
                call = {"id": f"c{n}", "name": tool, "arguments": "{}"}
                params = {"sessionId": "s", "runId": "r", "toolCall": call}
                send({"id": f"ask-{n}", "method": "tool/requestPermission", "params": params})
        elif method is None:  # a response to one of the asks
            send({"method": "test/answer", "params": message})
        elif method == "shutdown":
            send({"id": message["id"], "result": None})
        elif method == "exit":
            return


if __name__ == "__main__":
    main(sys.argv[1:])
