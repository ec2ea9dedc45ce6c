"""What the run lease costs an append: SQLite append throughput of this checkout against a git
revision from before the lease, interleaved round by round in one run.

Each round runs the same workload in a fresh process for each code base (``PYTHONPATH`` points at
this checkout's ``server/`` or at an export of the revision's): a session on a new SQLite file,
then ``--append`` messages written as the kernel writes them, one call per step of 1-3 messages.
Two workloads: a client's appends (no run id) and a run's (with a run id; on this checkout the run
first claims the session's lease, so every append also checks that the run still holds it).

It reports the median messages/s and the median CPU time per message of each. It is a report:
nothing asserts a timing. Run it from the repository's root:

    .venv/bin/python bench/lease_bench.py --before af31568 --rounds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = r"""
import asyncio, sys, tempfile, time
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from session_bench import messages_of, WORKSPACE
from tether.protocol.sessions import CreateSessionParams
from tether.sessions.sql import SqlStore, sqlite_url

async def main(count, as_run):
    with tempfile.TemporaryDirectory() as directory:
        store = await SqlStore.open(sqlite_url(Path(directory) / "lease.db"))
        session = await store.create(CreateSessionParams(), WORKSPACE)
        run_id = None
        if as_run:
            run_id = "bench-run"
            if hasattr(store, "claim_run"):
                await store.claim_run(session.session_id, run_id, timedelta(hours=1))
        work = messages_of(count)
        wall, cpu = time.perf_counter(), time.process_time()
        for step in work:
            await store.append(session.session_id, step, run_id=run_id)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        await store.aclose()
        print(count / wall, cpu / count * 1e6)

asyncio.run(main(int(sys.argv[2]), sys.argv[3] == "run"))
"""


def export(revision: str, into: Path) -> Path:
    """The revision's ``server/`` tree, exported under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "server"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "server"


def measure(server: Path, count: int, workload: str) -> tuple[float, float]:
    """One round in a fresh process: (messages/s, CPU µs per message)."""
    env = {**os.environ, "PYTHONPATH": str(server), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-c", WORKLOAD, str(ROOT / "bench"), str(count), workload]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    rate, cpu = done.stdout.split()
    return float(rate), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="af31568", help="a revision without the lease")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--append", type=int, default=5000, help="messages per round")
    options = parser.parse_args()
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as directory:
        trees = {"before": export(options.before, Path(directory)), "lease": ROOT / "server"}
        for _ in range(options.rounds):
            for workload in ("client", "run"):
                for name, tree in trees.items():
                    results.setdefault((name, workload), []).append(
                        measure(tree, options.append, workload)
                    )
    print(f"SQLite appends, {options.append} messages, {options.rounds} interleaved rounds")
    print(f"{'':24}{'msg/s (median)':>16}{'CPU µs/msg (median)':>22}")
    for workload in ("client", "run"):
        before = results[("before", workload)]
        for name in ("before", "lease"):
            rounds = results[(name, workload)]
            rate = statistics.median(r for r, _ in rounds)
            cpu = statistics.median(c for _, c in rounds)
            change = rate / statistics.median(r for r, _ in before) - 1
            label = f"{workload} appends, {name}"
            print(f"{label:24}{rate:16,.0f}{cpu:22.1f}   ({change:+.1%} msg/s)")


if __name__ == "__main__":
    main()
