"""What the OS sandbox costs a command: ``true`` started unconfined, through the Landlock wrapper,
and (for comparison only: tether does not use it) confined by a ``preexec_fn`` in the forked
child; then whole ``run_command`` calls with ``tools.sandbox = "off"`` and the default.

    .venv/bin/python bench/sandbox_bench.py [--runs 60]

A report: nothing in it asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tether.tools import ToolContext, ToolRegistry
from tether.tools.confinement import SandboxPolicy, landlock_abi, wrap
from tether.tools.landlock import parse, restrict
from tether.tools.run_command import RunCommand

Times = tuple[list[float], float]  # wall-clock ms of each run; CPU ms per run (children)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def timed(runs: int, start: Callable[[], None]) -> Times:
    start()  # warm up
    times = []
    cpu = _children_cpu()
    for _ in range(runs):
        began = time.perf_counter()
        start()
        times.append((time.perf_counter() - began) * 1000)
    return times, (_children_cpu() - cpu) / runs


async def timed_async(runs: int, start: Callable[[], Awaitable[object]]) -> Times:
    await start()
    times = []
    cpu = _children_cpu()
    for _ in range(runs):
        began = time.perf_counter()
        await start()
        times.append((time.perf_counter() - began) * 1000)
    return times, (_children_cpu() - cpu) / runs


def report(name: str, measured: Times) -> None:
    times, cpu = measured
    median, mean = statistics.median(times), statistics.mean(times)
    print(f"| {name} | {median:.1f} | {mean:.1f} | {cpu:.1f} |")


def spawns(runs: int, workspace: Path) -> None:
    policy = SandboxPolicy()
    wrapped = wrap(
        policy, ["true"], workspace=workspace, tmpdir=workspace, environ=dict(os.environ)
    )
    read, write, network, _ = parse(wrapped[4:])  # after: python -I -S landlock.py

    def confine() -> None:
        restrict(read, write, network=network)

    report("`true`, unconfined", timed(runs, lambda: subprocess.run(["true"], check=True)))
    report("`true` through the wrapper", timed(runs, lambda: subprocess.run(wrapped, check=True)))
    report(
        "`true` with a preexec_fn (not used)",
        timed(runs, lambda: subprocess.run(["true"], preexec_fn=confine, check=True)),
    )


async def calls(runs: int, workspace: Path) -> None:
    registry = ToolRegistry([RunCommand()])
    for mode in ("off", "workspace-write"):
        context = ToolContext(
            workspace=workspace, session_id="s", run_id="r", sandbox=SandboxPolicy(mode=mode)
        )

        async def call(context: ToolContext = context) -> object:
            result = await registry.execute("run_command", '{"command": ["true"]}', context)
            assert not result.is_error, result.content
            return result

        report(f"run_command `true`, sandbox {mode}", await timed_async(runs, call))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=60)
    runs = parser.parse_args().runs
    print(f"Landlock ABI {landlock_abi()}, Python {sys.version.split()[0]}, {runs} runs each\n")
    print("| what | median ms | mean ms | child CPU ms |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        workspace = Path(directory)
        spawns(runs, workspace)
        asyncio.run(calls(runs, workspace))


if __name__ == "__main__":
    main()
