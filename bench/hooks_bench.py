"""What a hook costs a run: one ``Hooks.run`` of a hook that exits 0 at once (``true``), one that
answers JSON, one that blocks (exit 2), beside the floor (``/bin/sh -c true`` started with asyncio
and waited for, stdin written and outputs read, as a hook is); then a hook killed at its timeout
with two processes of its own (the kill path: ``/proc`` scanned for its tree and its mark).
Wall-clock ms per run (median, p90) and tether's own CPU ms per run (the children's is not
counted: it is the hook's).

    .venv/bin/python bench/hooks_bench.py [--runs 100]

A report: nothing in it asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tether.config import HooksConfig
from tether.kernel.hooks import Hooks
from tether.protocol.kernel import ProgressEvent
from tether.tools.base import ToolContext


def _ignore(event: ProgressEvent) -> None:
    pass


async def floor() -> None:
    process = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        "true",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    await process.communicate(b"{}")


def one_hook(workspace: Path, command: str, timeout: float = 60.0) -> Callable[[], Awaitable[None]]:
    config = HooksConfig.model_validate(
        {"pre_tool_use": [{"command": command, "timeout": timeout}]}
    )
    hooks = Hooks(config, ToolContext(workspace=workspace, session_id="s", run_id="r"))

    async def run() -> None:
        await hooks.run(
            "pre_tool_use",
            {"tool_name": "write_file", "tool_input": {"path": "a.txt", "content": "x" * 200}},
            _ignore,
            tool_name="write_file",
            tool_call_id="c1",
        )

    return run


async def timed(runs: int, run: Callable[[], Awaitable[None]]) -> tuple[list[float], float]:
    await run()  # warm up
    times = []
    cpu = time.process_time()
    for _ in range(runs):
        began = time.perf_counter()
        await run()
        times.append((time.perf_counter() - began) * 1000)
    return times, (time.process_time() - cpu) * 1000 / runs


def report(name: str, times: list[float], cpu: float) -> None:
    p90 = statistics.quantiles(times, n=10)[-1] if len(times) >= 10 else max(times)
    median = statistics.median(times)
    print(f"{name:<34} {median:8.2f} ms  p90 {p90:8.2f} ms  tether CPU {cpu:6.2f} ms")


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        cases: list[tuple[str, Callable[[], Awaitable[None]], int]] = [
            ("floor: sh -c true", floor, runs),
            ("hook: true", one_hook(workspace, "true"), runs),
            (
                "hook: answers JSON",
                one_hook(workspace, 'echo \'{"additionalContext": "ok"}\''),
                runs,
            ),
            ("hook: blocks (exit 2)", one_hook(workspace, "echo no >&2; exit 2"), runs),
            (
                "hook: killed at 0.05 s timeout",
                one_hook(workspace, "sleep 30 & sleep 30 & wait", timeout=0.05),
                max(runs // 5, 5),
            ),
        ]
        for round_ in range(2):  # alternated, so both see the same load
            print(f"-- round {round_ + 1}")
            for name, run, count in cases:
                times, cpu = await timed(count, run)
                report(name, times, cpu)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    asyncio.run(main(parser.parse_args().runs))
