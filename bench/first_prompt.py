"""The first prompt: how long an editor waits from spawning tether to its first answered run.

Each start spawns ``python -m tether serve`` and times, from the spawn:

- ``initialize`` answered (the handshake);
- the first ``kernel/run`` answered: ``initialized``, ``session/create`` and a ``kernel/run`` with
  a one-word prompt are sent as soon as the handshake is answered (as an editor does), and the
  scripted provider answers the one turn at once (no model time to subtract).

In the same run, and alternating with tether's starts, the floor server (``floor_server.py``:
raw asyncio + orjson) is spawned and timed to its ``initialize`` answer: the least a Python
JSON-RPC server over stdio takes to start on this machine; and the same floor validating the
handshake's params with a pydantic model (``--pydantic``), the least a server whose protocol is
declared with pydantic takes. Medians of ``--starts`` (20) starts
each, after one discarded start of each. It prints a report and asserts nothing about timing.

    .venv/bin/python bench/first_prompt.py
    .venv/bin/python bench/first_prompt.py --importtime   # also: top import costs of the path
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
from pathlib import Path
from typing import Any

from raw_client import RawClient, frame, result_of

HERE = Path(__file__).resolve().parent
TETHER = [sys.executable, "-m", "tether", "serve"]
FLOOR = [sys.executable, str(HERE / "floor_server.py")]
PYDANTIC_FLOOR = [*FLOOR, "--pydantic"]
GOAL_RUN_VS_INITIALIZE = 1.3
GOAL_INITIALIZE_VS_FLOOR = 2.0


def initialize_params(workspace: Path, script: Path) -> dict[str, Any]:
    return {
        "processId": os.getpid(),
        "capabilities": {},
        "workspaceFolders": [{"uri": workspace.as_uri(), "name": "bench"}],
        "initializationOptions": {"provider": {"type": "scripted", "script": str(script)}},
    }


def start_tether(workspace: Path, script: Path, log: Any) -> tuple[int, int, float, float]:
    """ns from spawn to the ``initialize`` answer and to the first ``kernel/run`` answer; and
    the server's CPU ns by each."""
    began = time.perf_counter_ns()
    client = RawClient(TETHER, stderr=log)
    try:
        client.call("initialize", initialize_params(workspace, script))
        handshake = time.perf_counter_ns() - began
        handshake_cpu = client.cpu_seconds() * 1e9
        # What an editor sends at once; the run's session id comes from the create's answer.
        client.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        session = client.call("session/create", {})
        run = {"sessionId": session["sessionId"], "prompt": "hi"}
        result = answer_of(client, "kernel/run", run)
        first_run = time.perf_counter_ns() - began
        first_run_cpu = client.cpu_seconds() * 1e9
        assert result["response"] == "Hello.", result
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
    workspace: Path, script: Path, log: Any, command: Sequence[str] = FLOOR
) -> tuple[int, float]:
    began = time.perf_counter_ns()
    client = RawClient(list(command), stderr=log)
    try:
        answer = client.call("initialize", initialize_params(workspace, script))
        assert answer is not None
        return time.perf_counter_ns() - began, client.cpu_seconds() * 1e9
    finally:
        client.kill()


def import_costs(workspace: Path, script: Path, top: int) -> list[tuple[int, int, str]]:
    """The heaviest imports (self time, cumulative, module) of a start that answers a run."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    process = subprocess.Popen(
        TETHER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": initialize_params(workspace, script),
        },
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
    ]
    stdin = b"".join(frame(m) for m in messages)
    # A run needs the session's id: wait for the create's answer, then send the run.
    process.stdin.write(stdin)
    process.stdin.write(
        frame({"jsonrpc": "2.0", "id": 2, "method": "session/create", "params": {}})
    )
    process.stdin.flush()
    out = process.stdout
    assert out is not None
    buffer = b""
    session_id = None
    while session_id is None:
        buffer += os.read(out.fileno(), 65536)
        found = re.search(rb'"sessionId":"([^"]+)"', buffer)
        session_id = found.group(1).decode() if found else None
    run = {"sessionId": session_id, "prompt": "hi"}
    process.stdin.write(frame({"jsonrpc": "2.0", "id": 3, "method": "kernel/run", "params": run}))
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--starts", type=int, default=20, help="spawns per server")
    parser.add_argument("--importtime", action="store_true", help="list the top import costs")
    parser.add_argument("--top", type=int, default=15, help="import costs listed")
    args = parser.parse_args(argv)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    tether: list[tuple[int, int, float, float]] = []
    floors: list[tuple[int, float]] = []
    pydantic_floors: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="tether-first-prompt-") as tmp:
        workspace, script = Path(tmp) / "workspace", Path(tmp) / "script.json"
        workspace.mkdir()
        script.write_text(json.dumps([{"text": "Hello."}] * 1))
        with open(Path(tmp) / "servers.log", "ab") as log:
            gc.disable()
            try:
                start_tether(workspace, script, log)  # one discarded start each (disk cache)
                start_floor(workspace, script, log)
                start_floor(workspace, script, log, PYDANTIC_FLOOR)
                for index in range(args.starts):
                    print(f"  start {index + 1}/{args.starts}", file=sys.stderr)
                    if index % 2:
                        floors.append(start_floor(workspace, script, log))
                    tether.append(start_tether(workspace, script, log))
                    pydantic_floors.append(start_floor(workspace, script, log, PYDANTIC_FLOOR))
                    if not index % 2:
                        floors.append(start_floor(workspace, script, log))
            finally:
                gc.enable()
        costs = import_costs(workspace, script, args.top) if args.importtime else []
    handshake, first_run, handshake_cpu, first_run_cpu = (
        statistics.median(t[column] for t in tether) / 1e6 for column in range(4)
    )
    floor, floor_cpu = (statistics.median(f[column] for f in floors) / 1e6 for column in range(2))
    pydantic_floor, pydantic_floor_cpu = (
        statistics.median(f[column] for f in pydantic_floors) / 1e6 for column in range(2)
    )
    print(
        f"tether first-prompt bench: python {platform.python_version()}, {os.cpu_count()} cpus, "
        f"{platform.machine()}; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {args.starts} starts per server, medians; "
        f"took {time.perf_counter() - started:.0f} s"
    )
    print()
    print(f"{'':48}{'wall (ms)':>10}{'server CPU (ms)':>17}")
    rows = [
        ("floor: spawn -> initialize answered", floor, floor_cpu),
        ("floor + pydantic: spawn -> initialize answered", pydantic_floor, pydantic_floor_cpu),
        ("tether: spawn -> initialize answered", handshake, handshake_cpu),
        ("tether: spawn -> first kernel/run answered", first_run, first_run_cpu),
    ]
    for label, wall, cpu in rows:
        print(f"{label:48}{wall:>10.1f}{cpu:>17.1f}")
    print()
    verdict = {True: "met", False: "MISSED"}
    print("goals (report only, nothing is asserted):")
    for label, ratios, goal in (
        (
            "first kernel/run / initialize",
            (first_run / handshake, first_run_cpu / handshake_cpu),
            GOAL_RUN_VS_INITIALIZE,
        ),
        (
            "initialize / floor's initialize",
            (handshake / floor, handshake_cpu / floor_cpu),
            GOAL_INITIALIZE_VS_FLOOR,
        ),
    ):
        print(
            f"  {label}: wall {ratios[0]:.2f}x, server CPU {ratios[1]:.2f}x (goal <= {goal}x)  "
            f"{verdict[ratios[0] <= goal]}"
        )
    print(
        f"  (floor + pydantic / floor: wall {pydantic_floor / floor:.2f}x, server CPU "
        f"{pydantic_floor_cpu / floor_cpu:.2f}x: the least a server that validates its "
        f"handshake with pydantic takes; tether / floor + pydantic: wall "
        f"{handshake / pydantic_floor:.2f}x, server CPU {handshake_cpu / pydantic_floor_cpu:.2f}x)"
    )
    if costs:
        print()
        print(f"top {len(costs)} imports by self time, a start that answers a run (-X importtime):")
        print(f"{'self (ms)':>10}{'cumulative (ms)':>17}  module")
        for own, cumulative, module in costs:
            print(f"{own / 1e3:>10.1f}{cumulative / 1e3:>17.1f}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
