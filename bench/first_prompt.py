"""The first prompt: how long an editor waits from spawning tether to its first answered run.

Each start spawns ``python -m tether serve`` and times, from the spawn:

- ``initialize`` answered (the handshake);
- the first ``kernel/run`` answered: ``initialized``, ``session/create`` and a ``kernel/run`` with
  a one-word prompt are sent as soon as the handshake is answered (as an editor does), and the
  scripted provider answers the one turn at once (no model time to subtract);
- the same with the OpenAI-compatible provider against the loopback endpoint
  (``model_endpoint.py``, in a thread of this process, answering at once): what a real provider's
  first run costs beyond the scripted one (its HTTP stack, the provider module, the first
  connection).

In the same run, and alternating with tether's starts, the floor server (``floor_server.py``:
raw asyncio + orjson) is spawned and timed to its ``initialize`` answer: the least a Python
JSON-RPC server over stdio takes to start on this machine; and the same floor validating the
handshake's params with a pydantic model (``--pydantic``), the least a server whose protocol is
declared with pydantic takes. Medians of ``--starts`` (20) starts
each, after one discarded start of each. It prints a report and asserts nothing about timing.

Server CPU is read from ``/proc/PID/task/*/schedstat``: the threads alive when it is read. A
thread that has ended by then (the provider's background loading) is not counted, so the wall
figures are the ones to compare for the OpenAI-compatible provider.

``--before PATH`` starts tether from another source tree too (``PYTHONPATH``; ``git archive REV
server | tar -x -C /tmp/before``, then ``--before /tmp/before/server``), alternating with this
one's starts: the before/after of a change in one run.

    .venv/bin/python bench/first_prompt.py [--before /tmp/before/server]
    .venv/bin/python bench/first_prompt.py --importtime   # also: top import costs, to
                                                          # initialize and to the first run
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_endpoint import ANSWER_TEXT, BenchEndpoint
from raw_client import RawClient, frame, result_of

HERE = Path(__file__).resolve().parent
TETHER = [sys.executable, "-m", "tether", "serve"]
FLOOR = [sys.executable, str(HERE / "floor_server.py")]
PYDANTIC_FLOOR = [*FLOOR, "--pydantic"]
GOAL_RUN_VS_INITIALIZE = 1.3
GOAL_INITIALIZE_VS_PYDANTIC_FLOOR = 1.3


def scripted(script: Path) -> dict[str, Any]:
    """The scripted provider playing ``script``."""
    return {"type": "scripted", "script": str(script)}


def openai_compatible(base_url: str) -> dict[str, Any]:
    """The OpenAI-compatible provider at ``base_url`` (the loopback endpoint)."""
    return {"type": "openai", "model": "bench", "baseUrl": base_url, "maxRetries": 0}


def initialize_params(workspace: Path, provider: dict[str, Any]) -> dict[str, Any]:
    return {
        "processId": os.getpid(),
        "capabilities": {},
        "workspaceFolders": [{"uri": workspace.as_uri(), "name": "bench"}],
        "initializationOptions": {"provider": provider},
    }


def start_tether(
    workspace: Path,
    provider: dict[str, Any],
    log: Any,
    answer: str = "Hello.",
    command: Sequence[str] = TETHER,
) -> tuple[int, int, float, float]:
    """ns from spawn to the ``initialize`` answer and to the first ``kernel/run`` answer; and
    the server's CPU ns by each."""
    began = time.perf_counter_ns()
    client = RawClient(list(command), stderr=log)
    try:
        client.call("initialize", initialize_params(workspace, provider))
        handshake = time.perf_counter_ns() - began
        handshake_cpu = client.cpu_seconds() * 1e9
        # What an editor sends at once; the run's session id comes from the create's answer.
        client.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        session = client.call("session/create", {})
        run = {"sessionId": session["sessionId"], "prompt": "hi"}
        result = answer_of(client, "kernel/run", run)
        first_run = time.perf_counter_ns() - began
        first_run_cpu = client.cpu_seconds() * 1e9
        assert result["response"] == answer, result
        return handshake, first_run, handshake_cpu, first_run_cpu
    finally:
        client.kill()


def answer_of(client: RawClient, method: str, params: dict[str, Any]) -> Any:
    """The result of one request, past the notifications (``kernel/progress``) before it."""
    client.write(frame({"jsonrpc": "2.0", "id": "first", "method": method, "params": params}))
    while True:
        body = client.read_body()
        if b'"method"' not in body[:40]:
            return result_of(body)


def start_floor(
    workspace: Path, provider: dict[str, Any], log: Any, command: Sequence[str] = FLOOR
) -> tuple[int, float]:
    began = time.perf_counter_ns()
    client = RawClient(list(command), stderr=log)
    try:
        answer = client.call("initialize", initialize_params(workspace, provider))
        assert answer is not None
        return time.perf_counter_ns() - began, client.cpu_seconds() * 1e9
    finally:
        client.kill()


def import_costs(
    workspace: Path, provider: dict[str, Any], top: int, *, handshake_only: bool
) -> list[tuple[int, int, str]]:
    """The heaviest imports (self time, cumulative, module) of a start that answers a run, or
    (``handshake_only``) of one that answers ``initialize`` and exits."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    process = subprocess.Popen(
        TETHER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    params = initialize_params(workspace, provider)
    process.stdin.write(
        frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    )
    process.stdin.flush()
    if not handshake_only:
        process.stdin.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        # A run needs the session's id: wait for the create's answer, then send the run.
        create = {"jsonrpc": "2.0", "id": 2, "method": "session/create", "params": {}}
        process.stdin.write(frame(create))
        process.stdin.flush()
    buffer = b""
    wanted = rb'"id":1' if handshake_only else rb'"sessionId":"([^"]+)"'
    while (found := re.search(wanted, buffer)) is None:
        buffer += os.read(process.stdout.fileno(), 65536)
    if not handshake_only:
        run = {"sessionId": found.group(1).decode(), "prompt": "hi"}
        process.stdin.write(
            frame({"jsonrpc": "2.0", "id": 3, "method": "kernel/run", "params": run})
        )
    process.stdin.write(frame({"jsonrpc": "2.0", "id": 4, "method": "shutdown"}))
    process.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))
    _, stderr = process.communicate(timeout=60)
    rows = []
    for line in stderr.decode().splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            rows.append((int(match.group(1)), int(match.group(2)), match.group(4)))
    rows.sort(reverse=True)
    return rows[:top]


@dataclass
class Starts:
    """What the starts of one server measured, each a tuple of ns."""

    samples: list[tuple[float, ...]] = field(default_factory=list)

    def median(self, column: int) -> float:
        """The median of one column, in ms."""
        return statistics.median(sample[column] for sample in self.samples) / 1e6


def run_starts(
    args: argparse.Namespace, workspace: Path, script: Path, base_url: str, log: Any
) -> dict[str, Starts]:
    """Every server's starts, interleaved (one discarded start of each first: the disk cache)."""
    providers = {"scripted": scripted(script), "openai": openai_compatible(base_url)}
    tethers = {"tether": TETHER, **({"before": before_command(args.before)} if args.before else {})}
    starts: dict[str, Starts] = {}

    def each_once(keep: bool) -> None:
        for name, command in (("floor", FLOOR), ("floor + pydantic", PYDANTIC_FLOOR)):
            sample = start_floor(workspace, providers["scripted"], log, command)
            if keep:
                starts.setdefault(name, Starts()).samples.append(sample)
        for tether, command in tethers.items():
            for kind, provider in providers.items():
                answer = "Hello." if kind == "scripted" else ANSWER_TEXT
                sample = start_tether(workspace, provider, log, answer, command)
                if keep:
                    starts.setdefault(f"{tether} {kind}", Starts()).samples.append(sample)

    each_once(keep=False)
    for index in range(args.starts):
        print(f"  start {index + 1}/{args.starts}", file=sys.stderr)
        each_once(keep=True)
    return starts


def before_command(tree: str) -> list[str]:
    """tether from another source tree (its ``server/``), through ``env`` for ``PYTHONPATH``."""
    return ["env", f"PYTHONPATH={Path(tree).resolve()}", *TETHER]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--starts", type=int, default=20, help="spawns per server")
    parser.add_argument("--importtime", action="store_true", help="list the top import costs")
    parser.add_argument("--top", type=int, default=15, help="import costs listed")
    parser.add_argument("--before", help="a source tree (its server/) to start tether from too")
    args = parser.parse_args(argv)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="tether-first-prompt-") as tmp:
        workspace, script = Path(tmp) / "workspace", Path(tmp) / "script.json"
        workspace.mkdir()
        script.write_text(json.dumps([{"text": "Hello."}] * 1))
        with (
            open(Path(tmp) / "servers.log", "ab") as log,
            BenchEndpoint.in_thread(latency=0.0, tool_turns=0) as endpoint,
        ):
            gc.disable()
            try:
                starts = run_starts(args, workspace, script, endpoint.openai_url, log)
            finally:
                gc.enable()
        costs = {
            what: import_costs(workspace, scripted(script), args.top, handshake_only=only)
            for what, only in (("initialize", True), ("first run", False))
            if args.importtime
        }
    print(
        f"tether first-prompt bench: python {platform.python_version()}, {os.cpu_count()} cpus, "
        f"{platform.machine()}; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {args.starts} starts per server, medians; "
        f"took {time.perf_counter() - started:.0f} s"
    )
    print()
    report(starts, ["tether", *(["before"] if args.before else [])])
    for what, rows in costs.items():
        print()
        print(f"top {len(rows)} imports by self time, a start that answers {what} (-X importtime):")
        print(f"{'self (ms)':>10}{'cumulative (ms)':>17}  module")
        for own, cumulative, module in rows:
            print(f"{own / 1e3:>10.1f}{cumulative / 1e3:>17.1f}  {module}")
    return 0


def report(starts: dict[str, Starts], tethers: list[str]) -> None:
    """The table of medians, then the goals' ratios for each tether."""
    print(f"{'':56}{'wall (ms)':>10}{'server CPU (ms)':>17}")
    floor, pydantic_floor = starts["floor"], starts["floor + pydantic"]
    # (label, wall ms, server CPU ms); a floor's samples are (wall, CPU), tether's (wall to
    # initialize, wall to the first run, CPU by initialize, CPU by the first run)
    rows = [
        ("floor: spawn -> initialize answered", floor.median(0), floor.median(1)),
        (
            "floor + pydantic: spawn -> initialize answered",
            pydantic_floor.median(0),
            pydantic_floor.median(1),
        ),
    ]
    for tether in tethers:
        for kind in ("scripted", "openai"):
            own = starts[f"{tether} {kind}"]
            rows.append(
                (f"{tether} ({kind}): spawn -> initialize answered", own.median(0), own.median(2))
            )
            rows.append(
                (
                    f"{tether} ({kind}): spawn -> first kernel/run answered",
                    own.median(1),
                    own.median(3),
                )
            )
    for label, wall, cpu in rows:
        print(f"{label:56}{wall:>10.1f}{cpu:>17.1f}")
    print()
    verdict = {True: "met", False: "MISSED"}
    print("goals (report only, nothing is asserted):")
    for tether in tethers:
        for kind in ("scripted", "openai"):
            own = starts[f"{tether} {kind}"]
            wall, cpu = own.median(1) / own.median(0), own.median(3) / own.median(2)
            print(
                f"  {tether} ({kind}): first kernel/run / initialize: wall {wall:.2f}x, server CPU "
                f"{cpu:.2f}x (goal <= {GOAL_RUN_VS_INITIALIZE}x)  "
                f"{verdict[wall <= GOAL_RUN_VS_INITIALIZE]}"
            )
        own = starts[f"{tether} scripted"]
        wall = own.median(0) / pydantic_floor.median(0)
        cpu = own.median(2) / pydantic_floor.median(1)
        print(
            f"  {tether}: initialize / floor + pydantic's: wall {wall:.2f}x, server CPU {cpu:.2f}x "
            f"(goal <= {GOAL_INITIALIZE_VS_PYDANTIC_FLOOR}x)  "
            f"{verdict[wall <= GOAL_INITIALIZE_VS_PYDANTIC_FLOOR]}"
        )
    print(
        f"  (floor + pydantic / floor: wall {pydantic_floor.median(0) / floor.median(0):.2f}x, "
        f"server CPU {pydantic_floor.median(1) / floor.median(1):.2f}x: the least a server that "
        "validates its handshake with pydantic takes)"
    )


if __name__ == "__main__":
    sys.exit(main())
