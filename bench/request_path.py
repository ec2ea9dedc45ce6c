"""tether's request path in process, beside the floor's: CPU per request, no pipes, no client.

    .venv/bin/python bench/request_path.py                  # both servers, minimum of the batches
    .venv/bin/python bench/request_path.py --profile get    # cProfile of tether's pipelined gets
    .venv/bin/python bench/request_path.py --profile append

tether's wire (``Wire`` + ``App`` + the memory store) and the floor's protocol class
(``floor_server.FloorServer``) are fed the same bytes ``rpc_bench.py`` sends: batches of pipelined
``session/get`` frames (one ``data_received`` per batch, as a pipe delivers them) and 10 KB
``session/append`` frames one at a time; what they write is collected, counted and checked.
``time.process_time`` per batch, the minimum of the batches (the machine is shared: the minimum is
what the code costs, the rest is other processes). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from floor_server import FloorServer
from rpc_bench import initialize_params, text_of
from tether.protocol.framing import Frame, FrameDecoder, encode_frame
from tether.rpc.app import App
from tether.rpc.wire import Wire
from tether.sessions.in_memory import MemoryStore


class Sink:
    """Where a server writes (one whole frame or more per write, as both servers write): the
    responses and the errors among them counted, the last write kept; cheap, since its time is
    counted with the server's."""

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.last: bytes = b""

    def write(self, data: bytes) -> None:
        position = 0  # frame by frame from the headers, not scanning the bodies
        while position < len(data):
            start = data.index(b"\r\n\r\n", position) + 4
            position = start + int(data[position + 16 : start - 4])
            self.count += 1
            self.errors += data.find(b'"error":', start, start + 48) >= 0
        self.last = data

    def body(self) -> Any:
        """The last frame written (a call's answer)."""
        frame = FrameDecoder().feed(self.last)[-1]
        assert isinstance(frame, Frame), frame
        return orjson.loads(frame.body)

    def close(self) -> None:
        return None


class Server:
    """One server in process: ``feed`` takes bytes as ``data_received`` does."""

    def __init__(self, name: str, workspace: Path) -> None:
        self.name = name
        self.sink = Sink()
        self.ids = 0
        if name == "tether":
            self.wire = Wire(App(MemoryStore()))
            self.wire.connect(self.sink.write)
            self.feed: Callable[[bytes], None] = self.wire.data_received
        else:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.floor = FloorServer(self.sink, done)  # type: ignore[arg-type]
            self.feed = self.floor.data_received
        self.call("initialize", initialize_params(workspace))
        self.feed(encode_frame(b'{"jsonrpc":"2.0","method":"initialized","params":{}}'))
        self.session_id = self.call("session/create", {})["sessionId"]

    def frame(self, method: str, params: Any) -> bytes:
        self.ids += 1
        body = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        return encode_frame(orjson.dumps(body))

    def call(self, method: str, params: Any) -> Any:
        self.feed(self.frame(method, params))
        self.flush()
        return self.sink.body()["result"]

    def flush(self) -> None:
        if self.name == "tether":
            self.wire.flush()


def gets(server: Server, count: int) -> bytes:
    get = {"sessionId": server.session_id}
    return b"".join(server.frame("session/get", get) for _ in range(count))


def appends(server: Server, count: int, size: int) -> list[bytes]:
    message = {"role": "user", "content": text_of(size)}
    params = {"sessionId": server.session_id, "messages": [message]}
    return [server.frame("session/append", params) for _ in range(count)]


def time_gets(server: Server, batch: int, batches: int) -> float:
    """µs of CPU per pipelined get, the minimum over ``batches`` batches of ``batch``."""
    best = float("inf")
    for _ in range(batches):
        data = gets(server, batch)
        before, start = server.sink.count, time.process_time()
        for offset in range(0, len(data), 65536):  # a pipe's reads
            server.feed(data[offset : offset + 65536])
        server.flush()
        best = min(best, time.process_time() - start)
        assert server.sink.count - before == batch and not server.sink.errors, server.sink.last[
            -300:
        ]
    return best * 1e6 / batch


def time_appends(server: Server, batch: int, batches: int, size: int) -> float:
    """µs of CPU per 10 KB append sent one at a time (each answered before the next)."""
    best = float("inf")
    for _ in range(batches):
        frames = appends(server, batch, size)
        before, start = server.sink.count, time.process_time()
        for frame in frames:
            server.feed(frame)
            server.flush()
        best = min(best, time.process_time() - start)
        assert server.sink.count - before == batch and not server.sink.errors, server.sink.last[
            -300:
        ]
    return best * 1e6 / batch


async def measure(args: argparse.Namespace, workspace: Path) -> None:
    servers = [Server("floor", workspace), Server("tether", workspace)]
    gc.collect()
    gc.freeze()  # as `tether serve` does once started (rpc/transport.py)
    results: dict[str, dict[str, float]] = {s.name: {} for s in servers}
    for _ in range(args.rounds):  # interleaved, so both see the same load
        for server in servers:
            got = time_gets(server, args.batch, 1)
            results[server.name]["get"] = min(results[server.name].get("get", got), got)
        for server in servers:
            got = time_appends(server, args.batch // 10, 1, args.append_bytes)
            results[server.name]["append"] = min(results[server.name].get("append", got), got)
    floor, tether = results["floor"], results["tether"]
    print(
        f"request path in process: python {sys.version.split()[0]}; {args.rounds} rounds of "
        f"{args.batch} pipelined session/get and {args.batch // 10} sequential "
        f"{args.append_bytes}-byte session/append per server; CPU µs per request, minimum"
    )
    print(f"{'':32}{'floor':>10}{'tether':>10}{'ratio':>10}")
    for key, label in (("get", "session/get, pipelined"), ("append", "session/append 10 KB")):
        ratio = tether[key] / floor[key]
        print(f"{label:32}{floor[key]:10.1f}{tether[key]:10.1f}{ratio:9.2f}x")


async def profile(args: argparse.Namespace, workspace: Path) -> None:
    server = Server("tether", workspace)
    time_gets(server, 2000, 2)  # warm up
    gc.collect()
    gc.freeze()
    profiler = cProfile.Profile()
    profiler.enable()
    if args.profile == "get":
        time_gets(server, args.batch, args.rounds)
    else:
        time_appends(server, args.batch // 10, args.rounds, args.append_bytes)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats(args.sort).print_stats(args.top)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--batch", type=int, default=10000, help="gets per batch (appends: /10)")
    parser.add_argument("--append-bytes", type=int, default=10 * 1024)
    parser.add_argument("--profile", choices=["get", "append"])
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime", help="cProfile order: tottime, cumulative")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-request-path-") as tmp:
        run = profile if args.profile else measure
        asyncio.run(run(args, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
