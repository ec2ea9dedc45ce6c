"""``tether acp`` against an ACP agent built on the official Python SDK, in one run.

Two agents, each spawned as a real subprocess speaking newline-delimited JSON-RPC over stdio
pipes: ``python -m tether acp``, and ``acp_echo_agent.py`` (the SDK's ``run_agent`` with an agent
that answers ``initialize`` and ``session/new``). Measured:

1. **Cold start**: from spawning the process to reading its ``initialize`` response (median and
   p90 of ``--cold-starts``, after one discarded start each); the process is killed afterwards,
   which is not timed.
2. **``session/new`` round trip**: sequential, one request in flight, on a started agent
   (median and p99 of ``--requests``). tether makes a real session (in its memory store, in a
   temporary directory); the echo agent makes up an id.

Starts and request blocks alternate between the agents, so load from outside the bench falls on
all alike. ``--before PATH`` adds a third agent, ``tether acp`` from another source tree
(``PYTHONPATH=PATH``; ``git archive REV server | tar -x -C /tmp/before``, then
``--before /tmp/before/server``): the before/after of a change, in one run. It is a report:
nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
AGENTS = {
    "tether acp": [sys.executable, "-m", "tether", "acp"],
    "SDK echo agent": [sys.executable, str(HERE / "acp_echo_agent.py")],
}
INITIALIZE = {"protocolVersion": 1, "clientCapabilities": {}}


BEFORE = "tether acp (before)"
PATHS: dict[str, str] = {}  # PYTHONPATH per agent that has its own tree


class Agent:
    """A spawned agent and a blocking line-by-line client on its pipes."""

    def __init__(self, command: list[str], cwd: Path, home: Path, path: str | None = None) -> None:
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config")}
        if path is not None:
            env["PYTHONPATH"] = path
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        self._buffer = b""
        self._next = 0

    def call(self, method: str, params: object) -> dict[str, object]:
        self._next += 1
        line = orjson.dumps(
            {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        )
        os.write(self._in, line + b"\n")
        while True:
            answer = self._line()
            message = orjson.loads(answer)
            if message.get("id") == self._next:
                if "result" not in message:
                    raise RuntimeError(f"{method} failed: {message}")
                return message  # type: ignore[no-any-return]

    def _line(self) -> bytes:
        while b"\n" not in self._buffer:
            select.select([self._out], [], [], 30)
            chunk = os.read(self._out, 65536)
            if not chunk:
                raise RuntimeError("the agent closed its output")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def cold_start(command: list[str], cwd: Path, home: Path, path: str | None) -> float:
    """ms from spawning the agent to reading its ``initialize`` response."""
    began = time.perf_counter_ns()
    agent = Agent(command, cwd, home, path)
    try:
        agent.call("initialize", INITIALIZE)
        return (time.perf_counter_ns() - began) / 1e6
    finally:
        agent.kill()


def round_trips(agents: dict[str, Agent], cwd: Path, total: int) -> dict[str, list[float]]:
    """µs per ``session/new``, in blocks of 50 that alternate between the agents."""
    samples: dict[str, list[float]] = {name: [] for name in agents}
    params = {"cwd": str(cwd), "mcpServers": []}
    for agent in agents.values():  # warm up
        for _ in range(50):
            agent.call("session/new", params)
    for _ in range(max(total // 50, 1)):
        for name, agent in agents.items():
            for _ in range(50):
                began = time.perf_counter_ns()
                agent.call("session/new", params)
                samples[name].append((time.perf_counter_ns() - began) / 1e3)
    return samples


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-starts", type=int, default=20, help="spawns per agent")
    parser.add_argument("--requests", type=int, default=1000, help="session/new per agent")
    parser.add_argument("--before", help="a source tree (its server/) to run tether acp from too")
    args = parser.parse_args(argv)
    if args.before:
        AGENTS[BEFORE] = AGENTS["tether acp"]
        PATHS[BEFORE] = str(Path(args.before).resolve())
    began = time.monotonic()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cwd, home = Path(tmp) / "project", Path(tmp) / "home"
        cwd.mkdir()
        home.mkdir()
        starts: dict[str, list[float]] = {name: [] for name in AGENTS}
        for name, command in AGENTS.items():
            cold_start(command, cwd, home, PATHS.get(name))  # discarded: warms the disk cache
        for _ in range(args.cold_starts):
            for name, command in AGENTS.items():
                starts[name].append(cold_start(command, cwd, home, PATHS.get(name)))
        agents = {
            name: Agent(command, cwd, home, PATHS.get(name)) for name, command in AGENTS.items()
        }
        try:
            for agent in agents.values():
                agent.call("initialize", INITIALIZE)
            trips = round_trips(agents, cwd, args.requests)
        finally:
            for agent in agents.values():
                agent.kill()
    report(starts, trips, args, load, time.monotonic() - began)
    return 0


def report(
    starts: dict[str, list[float]],
    trips: dict[str, list[float]],
    args: argparse.Namespace,
    load: float,
    took: float,
) -> None:
    from importlib.metadata import version

    print(
        f"tether acp bench: python {platform.python_version()}, agent-client-protocol "
        f"{version('agent-client-protocol')}, {os.cpu_count()} cpus, {platform.machine()}; "
        f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; took {took:.0f} s"
    )
    print(f"{args.cold_starts} cold starts and {args.requests} session/new per agent\n")
    names = list(AGENTS)
    print(f"{'':44}" + "".join(f"{name:>20}" for name in names) + f"{'ratio':>10}")
    rows = [
        ("cold start to initialize: median (ms)", starts, 0.5),
        ("cold start to initialize: p90 (ms)", starts, 0.9),
        ("session/new round trip: median (µs)", trips, 0.5),
        ("session/new round trip: p99 (µs)", trips, 0.99),
    ]
    for label, samples, fraction in rows:
        values = [
            statistics.median(samples[n]) if fraction == 0.5 else percentile(samples[n], fraction)
            for n in names
        ]
        cells = "".join(f"{value:>20.1f}" for value in values)
        print(f"{label:44}{cells}{values[1] / values[0]:>9.2f}x")
    print("\nratio: SDK echo agent / tether acp (above 1: tether is faster)")


if __name__ == "__main__":
    sys.exit(main())
