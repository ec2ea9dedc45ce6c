"""Sequential requests to the floor, tether from another source tree ("before") and this tether
("after"), in one run: the before/after of a change to the request path, on the same load.

    git archive main server | tar -x -C /tmp/before       # the tree to compare with
    .venv/bin/python bench/before_after.py --before /tmp/before/server
    .venv/bin/python bench/before_after.py --before /tmp/before/server --method get

The three servers (``floor_server.py`` and ``python -m tether serve``, the "before" one with
``PYTHONPATH`` set to ``--before``) run at once, driven by ``raw_client.py``, in blocks of 100
requests that alternate between them, so load from outside the bench falls on all of them alike.
Reported per server: the median round trip, and the server's CPU per request (from
``/proc/PID/task/*/schedstat``, all its threads, over the timed blocks). ``--trace strace`` or
``--trace perf`` attaches ``strace -c -f`` (system calls) or ``perf stat`` (page faults, context
switches) to each server over the timed blocks, written beside the report. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raw_client import RawClient, result_of
from rpc_bench import SERVERS, initialize_params, text_of

BLOCK = 100
TRACERS = {
    "strace": ["strace", "-f", "-c", "-o"],
    "perf": ["perf", "stat", "-e", "task-clock,page-faults,context-switches", "-o"],
}


def start(argv: list[str], env: dict[str, str], workspace: Path, log: Path) -> RawClient:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        with open(log, "ab") as stderr:
            client = RawClient(argv, stderr=stderr)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    client.call("initialize", initialize_params(workspace))
    client.notify("initialized", {})
    return client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--before", required=True, help="a tree's server/ to put on PYTHONPATH")
    parser.add_argument("--method", choices=["append", "get"], default="append")
    parser.add_argument("--requests", type=int, default=3000, help="timed, per server")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--append-bytes", type=int, default=10 * 1024)
    parser.add_argument("--trace", choices=sorted(TRACERS))
    parser.add_argument(
        "--agents-md", action="store_true", help="an AGENTS.md at the workspace root"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tether-before-after-"))
    if args.agents_md:
        (tmp / "AGENTS.md").write_text("Run make test before you commit.\n" * 100)
    env = dict(os.environ)
    servers = {
        "floor": (SERVERS["floor"], env),
        "before": (SERVERS["tether"], {**env, "PYTHONPATH": args.before}),
        "after": (SERVERS["tether"], {k: v for k, v in env.items() if k != "PYTHONPATH"}),
    }
    clients = {name: start(a, e, tmp, tmp / f"{name}.log") for name, (a, e) in servers.items()}
    total = args.warmup + args.requests
    frames: dict[str, list[bytes]] = {}
    for name, client in clients.items():
        session_id = client.call("session/create", {})["sessionId"]
        params: dict[str, object] = {"sessionId": session_id}
        if args.method == "append":
            message = {"role": "user", "content": text_of(args.append_bytes)}
            params["messages"] = [message]
        frames[name] = client.request_frames(f"session/{args.method}", params, total)
    time.sleep(1.0)  # tether's background imports after the handshake are done by then
    wall: dict[str, list[int]] = {name: [] for name in clients}
    cpu = dict.fromkeys(clients, 0.0)
    tracers: list[subprocess.Popen[bytes]] = []
    gc.disable()
    try:
        for offset in range(0, total, BLOCK):
            if offset == args.warmup and args.trace:
                for name, client in clients.items():
                    out = tmp / f"{args.trace}-{name}.txt"
                    argv = [*TRACERS[args.trace], str(out), "-p", str(client.process.pid)]
                    tracers.append(subprocess.Popen(argv, stderr=subprocess.DEVNULL))
                time.sleep(1.0)
            for name, client in clients.items():
                cpu_before = client.cpu_seconds()
                times, bodies = client.round_trips(frames[name][offset : offset + BLOCK])
                for body in bodies:
                    result_of(body)
                if offset >= args.warmup:
                    wall[name] += times
                    cpu[name] += client.cpu_seconds() - cpu_before
    finally:
        gc.enable()
        for tracer in tracers:
            tracer.send_signal(signal.SIGINT)
            tracer.wait()
        for client in clients.values():
            client.close()
    print(
        f"{args.requests} sequential session/{args.method} per server after {args.warmup} "
        f"warm-up, blocks of {BLOCK} alternating; load average {os.getloadavg()[0]:.2f}"
    )
    floor = statistics.median(wall["floor"])
    print(f"{'':8}{'median (µs)':>13}{'/ floor':>9}{'server CPU/request (µs)':>26}")
    for name in clients:
        median = statistics.median(wall[name])
        print(
            f"{name:8}{median / 1e3:13.1f}{median / floor:8.2f}x"
            f"{cpu[name] * 1e6 / args.requests:26.1f}"
        )
    if args.trace:
        print(f"{args.trace} reports: {tmp}/{args.trace}-*.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
