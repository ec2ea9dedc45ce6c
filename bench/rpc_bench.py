"""tether's JSON-RPC path against its floor and stock pygls, side by side in one run.

Three servers, each spawned as a real subprocess speaking LSP framing over stdio pipes, all driven
by the same client (``raw_client.py``):

- floor: a raw asyncio + orjson JSON-RPC loop (``floor_server.py``), the least such a server costs;
- stock pygls: pygls 2.1 with its default converter (``stock_pygls_server.py``);
- tether: ``python -m tether serve``.

Measured: the round trip of a no-op request (``session/get``), one at a time and pipelined; the
round trip of a ``session/append`` of one 10 KB user message; and cold start (spawn to the
``initialize`` response). Request measurements run in rounds, each on fresh processes of all three
servers; sequential requests go in blocks of 100 that alternate between the servers, pipelined
batches and cold starts alternate too, so load from outside the bench falls on all of them alike.
Samples are pooled over the rounds. It prints a report and asserts nothing about timing.

    .venv/bin/python bench/rpc_bench.py            # what ``make bench`` runs
    .venv/bin/python bench/rpc_bench.py --before /tmp/before/server

``--before`` adds a fourth server, tether from another source tree (``PYTHONPATH``; make it with
``git archive REV server | tar -x -C /tmp/before``), and a table of it beside this tether.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from raw_client import RawClient, RpcError, result_of

HERE = Path(__file__).resolve().parent
SERVERS: dict[str, list[str]] = {
    "floor": [sys.executable, str(HERE / "floor_server.py")],
    "stock pygls": [sys.executable, str(HERE / "stock_pygls_server.py")],
    "tether": [sys.executable, "-m", "tether", "serve"],  # the tether PYTHONPATH names, if any
}
FLOOR, STOCK, TETHER = SERVERS
BEFORE = "tether (before)"  # with --before: tether from another source tree, in the same run
PATHS: dict[str, str] = {}  # PYTHONPATH of the servers that run from their own tree


def env_of(name: str) -> dict[str, str] | None:
    return {**os.environ, "PYTHONPATH": PATHS[name]} if name in PATHS else None


TARGET_VS_FLOOR = 1.5
TARGET_VS_STOCK = 4.0
TARGET_COLD_START_MS = 300.0
# The goals of the issue "fast where the user waits", each tether's time / the floor's.
GOAL_PIPELINED_VS_FLOOR = 3.0
GOAL_APPEND_VS_FLOOR = 1.3
GOAL_COLD_START_VS_FLOOR = 2.0
BLOCK = 100  # sequential requests sent to one server before the next server's turn


@dataclass(frozen=True)
class Config:
    rounds: int
    warmup: int
    sequential: int
    pipelined: int
    cold_starts: int
    append_bytes: int


@dataclass
class Samples:
    """Raw timings of one server, in ns, pooled over the rounds."""

    get: list[int] = field(default_factory=list)
    pipelined_per_request: list[float] = field(default_factory=list)  # one per round
    pipelined_cpu: list[float] = field(default_factory=list)  # server CPU ns per request
    append: list[int] = field(default_factory=list)
    cold_start: list[int] = field(default_factory=list)
    cold_start_cpu: list[float] = field(default_factory=list)  # server CPU ns to initialize


# -- payloads ------------------------------------------------------------------------------------


def text_of(size: int) -> str:
    """``size`` characters of ASCII prose and code, with the quotes and newlines JSON escapes."""
    lines = [
        "The handler validates its params into a model and calls one service method.",
        'def handle(params: dict[str, Any]) -> "Result":',
        '    return service.call(Model.model_validate(params or {"key": "value"}))',
        "Appends are O(1); reading the tail of a session is O(limit), never O(history).",
        "\tresult = await store.append(session_id, [message])  # one transaction per step",
    ]
    text = "\n".join(lines) + "\n"
    return (text * (size // len(text) + 1))[:size]


def initialize_params(workspace: Path) -> dict[str, Any]:
    """Valid LSP ``initialize`` params (stock pygls structures them into lsprotocol types)."""
    return {
        "processId": os.getpid(),
        "rootUri": None,
        "capabilities": {},
        "workspaceFolders": [{"uri": workspace.as_uri(), "name": "bench"}],
    }


# -- measurements --------------------------------------------------------------------------------


@dataclass
class Peer:
    """One running server and the requests prepared for it."""

    name: str
    client: RawClient
    get: list[bytes]
    append: list[bytes]
    pipelined: list[bytes]


def start(name: str, workspace: Path, logs: Path) -> RawClient:
    with open(logs / f"{name}.log", "ab") as log:
        client = RawClient(SERVERS[name], stderr=log, env=env_of(name))
    client.call("initialize", initialize_params(workspace))
    client.notify("initialized", {})
    return client


def prepare(name: str, client: RawClient, config: Config) -> Peer:
    session_id = client.call("session/create", {})["sessionId"]
    get = {"sessionId": session_id}
    message = {"role": "user", "content": text_of(config.append_bytes)}
    append = {"sessionId": session_id, "messages": [message]}
    return Peer(
        name,
        client,
        client.request_frames("session/get", get, config.warmup + config.sequential),
        client.request_frames("session/append", append, config.warmup + config.sequential),
        client.request_frames("session/get", get, config.warmup + config.pipelined),
    )


def checked(bodies: Sequence[bytes]) -> None:
    """Every response is a result (an error answered fast would flatter the figures)."""
    for body in bodies:
        result_of(body)


def rotated(peers: Sequence[Peer], shift: int) -> list[Peer]:
    shift %= len(peers)
    return [*peers[shift:], *peers[:shift]]


def sequential(peers: Sequence[Peer], config: Config, method: str) -> dict[str, list[int]]:
    """Round trips in blocks that alternate between the servers; the first ``warmup`` of each
    server are not kept."""
    times: dict[str, list[int]] = {peer.name: [] for peer in peers}
    total = config.warmup + config.sequential
    for index, offset in enumerate(range(0, total, BLOCK)):
        for peer in rotated(peers, index):
            frames = (peer.get if method == "get" else peer.append)[offset : offset + BLOCK]
            block, bodies = peer.client.round_trips(frames)
            checked(bodies)
            times[peer.name] += block
    return {name: kept[config.warmup :] for name, kept in times.items()}


def run_round(round_index: int, config: Config, workspace: Path, logs: Path) -> dict[str, Samples]:
    """One round on fresh processes of every server."""
    samples = {name: Samples() for name in SERVERS}
    clients: dict[str, RawClient] = {}
    try:
        for name in SERVERS:
            clients[name] = start(name, workspace, logs)
        peers = rotated([prepare(name, c, config) for name, c in clients.items()], round_index)
        for name, times in sequential(peers, config, "get").items():
            samples[name].get = times
        for peer in peers:
            checked(peer.client.pipelined(peer.pipelined[: config.warmup])[1])
            cpu_before = peer.client.cpu_seconds()
            elapsed, bodies = peer.client.pipelined(peer.pipelined[config.warmup :])
            cpu = peer.client.cpu_seconds() - cpu_before
            checked(bodies)
            samples[peer.name].pipelined_per_request.append(elapsed / config.pipelined)
            samples[peer.name].pipelined_cpu.append(cpu * 1e9 / config.pipelined)
        # Last, so the history the appends leave cannot slow the other measurements down.
        for name, times in sequential(peers, config, "append").items():
            samples[name].append = times
    finally:
        for client in clients.values():
            client.close()
    return samples


def measure_cold_start(name: str, workspace: Path, logs: Path) -> tuple[int, float]:
    """ns from spawning the server to reading its ``initialize`` response, and the CPU ns the
    server used by then."""
    began = time.perf_counter_ns()
    with open(logs / f"{name}.log", "ab") as log:
        client = RawClient(SERVERS[name], stderr=log, env=env_of(name))
    try:
        client.call("initialize", initialize_params(workspace))
        return time.perf_counter_ns() - began, client.cpu_seconds() * 1e9
    finally:
        client.kill()  # a polite shutdown takes a few hundred ms and measures nothing here


def run(config: Config, workspace: Path, logs: Path) -> dict[str, Samples]:
    samples = {name: Samples() for name in SERVERS}
    for round_index in range(config.rounds):
        print(f"  round {round_index + 1}/{config.rounds}", file=sys.stderr)
        for name, got in run_round(round_index, config, workspace, logs).items():
            samples[name].get += got.get
            samples[name].pipelined_per_request += got.pipelined_per_request
            samples[name].pipelined_cpu += got.pipelined_cpu
            samples[name].append += got.append
    print(f"  cold starts: {config.cold_starts} per server", file=sys.stderr)
    for name in SERVERS:  # one discarded start each, to warm the disk cache
        measure_cold_start(name, workspace, logs)
    for _ in range(config.cold_starts):
        for name in SERVERS:
            wall, cpu = measure_cold_start(name, workspace, logs)
            samples[name].cold_start.append(wall)
            samples[name].cold_start_cpu.append(cpu)
    return samples


# -- report --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True)
class Row:
    label: str
    unit: str
    values: dict[str, float]


def rows_of(samples: dict[str, Samples]) -> list[Row]:
    def per_server(pick: Callable[[Samples], float], scale: float) -> dict[str, float]:
        return {name: pick(s) / scale for name, s in samples.items()}

    get = per_server(lambda s: statistics.median(s.get), 1e3)
    append = per_server(lambda s: statistics.median(s.append), 1e3)
    return [
        Row("session/get, sequential: median", "µs", get),
        Row(
            "session/get, sequential: p99", "µs", per_server(lambda s: percentile(s.get, 0.99), 1e3)
        ),
        Row(
            "session/get, pipelined: per request",
            "µs",
            per_server(lambda s: statistics.median(s.pipelined_per_request), 1e3),
        ),
        Row(
            "session/get, pipelined: server CPU/request",
            "µs",
            per_server(lambda s: statistics.median(s.pipelined_cpu), 1e3),
        ),
        Row("session/append 10 KB, sequential: median", "µs", append),
        Row(
            "session/append 10 KB, sequential: p99",
            "µs",
            per_server(lambda s: percentile(s.append, 0.99), 1e3),
        ),
        Row("append - get (decode + store + echo)", "µs", {n: append[n] - get[n] for n in get}),
        Row(
            "cold start to initialize: median",
            "ms",
            per_server(lambda s: statistics.median(s.cold_start), 1e6),
        ),
        Row(
            "cold start to initialize: server CPU",
            "ms",
            per_server(lambda s: statistics.median(s.cold_start_cpu), 1e6),
        ),
    ]


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.inf


def format_table(rows: Sequence[Row]) -> str:
    header = f"{'':44}{FLOOR:>10}{STOCK:>13}{TETHER:>10}{'tether/floor':>14}{'stock/tether':>14}"
    lines = [header, "-" * len(header)]
    for row in rows:
        v = row.values
        lines.append(
            f"{row.label + f' ({row.unit})':44}{v[FLOOR]:>10.1f}{v[STOCK]:>13.1f}{v[TETHER]:>10.1f}"
            f"{ratio(v[TETHER], v[FLOOR]):>13.2f}x{ratio(v[STOCK], v[TETHER]):>13.2f}x"
        )
    return "\n".join(lines)


def format_before_after(rows: Sequence[Row]) -> str:
    """tether from ``--before``'s tree beside this one, row by row."""
    header = f"{'':44}{BEFORE:>16}{TETHER:>10}{'after/before':>14}"
    lines = [header, "-" * len(header)]
    for row in rows:
        v = row.values
        lines.append(
            f"{row.label + f' ({row.unit})':44}{v[BEFORE]:>16.1f}{v[TETHER]:>10.1f}"
            f"{ratio(v[TETHER], v[BEFORE]):>13.2f}x"
        )
    return "\n".join(lines)


def format_targets(rows: Sequence[Row]) -> str:
    get, _, pipelined, pipelined_cpu, append, _, decode, cold, cold_cpu = rows

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    lines = ["targets (report only, nothing is asserted):"]
    for row in (get, pipelined, append, decode):
        r = ratio(row.values[TETHER], row.values[FLOOR])
        lines.append(
            f"  tether within {TARGET_VS_FLOOR}x of the floor, {row.label}: "
            f"{r:.2f}x  {verdict(r <= TARGET_VS_FLOOR)}"
        )
    for row in (append, decode):
        r = ratio(row.values[STOCK], row.values[TETHER])
        lines.append(
            f"  tether >= {TARGET_VS_STOCK:.0f}x faster than stock pygls, {row.label}: "
            f"{r:.2f}x  {verdict(r >= TARGET_VS_STOCK)}"
        )
    ms = cold.values[TETHER]
    lines.append(
        f"  tether cold start < {TARGET_COLD_START_MS:.0f} ms: {ms:.0f} ms  "
        f"{verdict(ms < TARGET_COLD_START_MS)}"
    )
    lines.append("goals of the request path (tether / floor, same run):")
    for row, goal in (
        (pipelined, GOAL_PIPELINED_VS_FLOOR),
        (pipelined_cpu, GOAL_PIPELINED_VS_FLOOR),
        (append, GOAL_APPEND_VS_FLOOR),
        (cold, GOAL_COLD_START_VS_FLOOR),
        (cold_cpu, GOAL_COLD_START_VS_FLOOR),
    ):
        r = ratio(row.values[TETHER], row.values[FLOOR])
        lines.append(f"  {row.label}: {r:.2f}x (goal <= {goal}x)  {verdict(r <= goal)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per server")
    parser.add_argument("--warmup", type=int, default=500, help="untimed requests first")
    parser.add_argument("--sequential", type=int, default=2000, help="timed requests per round")
    parser.add_argument("--pipelined", type=int, default=10000, help="requests in one batch")
    parser.add_argument("--cold-starts", type=int, default=20, help="spawns per server")
    parser.add_argument("--append-bytes", type=int, default=10 * 1024, help="message size")
    parser.add_argument("--before", help="a source tree (its server/) to run tether from too")
    args = parser.parse_args(argv)
    if args.before:
        SERVERS[BEFORE] = SERVERS[TETHER]
        PATHS[BEFORE] = str(Path(args.before).resolve())
    config = Config(
        rounds=args.rounds,
        warmup=args.warmup,
        sequential=args.sequential,
        pipelined=args.pipelined,
        cold_starts=args.cold_starts,
        append_bytes=args.append_bytes,
    )
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        workspace, logs = Path(tmp), Path(tmp) / "logs"
        logs.mkdir()
        gc.disable()  # the client's own collections must not land in a server's figures
        try:
            samples = run(config, workspace, logs)
        except RpcError:
            for log in sorted(logs.iterdir()):
                tail = log.read_bytes()[-2000:].decode(errors="replace")
                print(f"--- stderr of {log.stem} (tail):\n{tail}", file=sys.stderr)
            raise
        finally:
            gc.enable()
    rows = rows_of(samples)
    print(
        f"tether rpc bench: python {platform.python_version()}, pygls {version('pygls')}, "
        f"orjson {version('orjson')}, {os.cpu_count()} cpus, {platform.machine()}; "
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    print(
        f"{config.rounds} rounds x ({config.sequential} sequential + {config.pipelined} pipelined) "
        f"requests per server, after {config.warmup} warm-up each; {config.cold_starts} cold "
        f"starts; append = one {config.append_bytes}-byte user message; "
        f"took {time.perf_counter() - started:.0f} s"
    )
    print()
    print(format_table(rows))
    print()
    print(format_targets(rows))
    if BEFORE in SERVERS:
        print()
        print(format_before_after(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
