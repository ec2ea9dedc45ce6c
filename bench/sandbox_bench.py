"""What the command wrapper costs a command: ``true`` started directly, through the wrapper
unconfined (``tools.sandbox = "off"``: its process tree watched by a subreaper), confined in mount
and pid namespaces, and confined by Landlock alone (``TETHER_SANDBOX_NAMESPACES=0``); for
comparison only (tether does not use it), the same Landlock rules applied by a ``preexec_fn`` in
the forked child; then whole ``run_command`` calls; then the two checks tether makes before each
confined command, on a bare directory, a ``git init`` repository with 20 memory files, and this
checkout: what to protect (:func:`protection`: ``.git``, ``.tether``, the installation,
``sys.path``, each resolved link by link) and whether a file it protects has a second hard link
(:func:`hard_links_refusal`).

    .venv/bin/python bench/sandbox_bench.py [--runs 60]

A report: nothing in it asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tether.tools import ToolContext, ToolRegistry
from tether.tools.confinement import (
    NAMESPACES_VARIABLE,
    SandboxPolicy,
    hard_links_refusal,
    isolation,
    landlock_abi,
    protection,
    wrap,
    wrapper_command,
)
from tether.tools.landlock import restrict
from tether.tools.run_command import RunCommand
from tether.tools.wrapper import parse

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


@contextmanager
def namespaces(allowed: bool) -> Iterator[None]:
    """Commands confined with namespaces (where the system allows them) or Landlock alone."""
    if allowed:
        os.environ.pop(NAMESPACES_VARIABLE, None)
    else:
        os.environ[NAMESPACES_VARIABLE] = "0"
    isolation.cache_clear()
    try:
        yield
    finally:
        os.environ.pop(NAMESPACES_VARIABLE, None)
        isolation.cache_clear()


def spawns(runs: int, workspace: Path) -> None:
    def through(policy: SandboxPolicy) -> list[str]:
        return wrap(policy, ["true"], workspace=workspace, tmpdir=workspace, environ=os.environ)

    report("`true`, directly", timed(runs, lambda: subprocess.run(["true"], check=True)))
    unconfined = through(SandboxPolicy(mode="off"))
    start = functools.partial(_run, unconfined)
    report("`true` through the wrapper, unconfined", timed(runs, start))
    for allowed, name in ((True, "namespaces"), (False, "Landlock alone")):
        with namespaces(allowed):
            confined = through(SandboxPolicy())
            start = functools.partial(_run, confined)
            report(f"`true` through the wrapper, {name}", timed(runs, start))
    options = parse(confined[len(wrapper_command()) :])

    def confine() -> None:
        restrict(options.read, options.write, network=False, listable=options.listable)

    report(
        "`true` with a preexec_fn (not used)",
        timed(runs, lambda: subprocess.run(["true"], preexec_fn=confine, check=True)),
    )


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True)


async def calls(runs: int, workspace: Path) -> None:
    registry = ToolRegistry([RunCommand()])
    cases = [("off", True, "off"), ("workspace-write", True, "namespaces")]
    cases.append(("workspace-write", False, "Landlock alone"))
    for mode, allowed, name in cases:
        context = ToolContext(
            workspace=workspace, session_id="s", run_id="r", sandbox=SandboxPolicy(mode=mode)
        )

        async def call(context: ToolContext = context) -> object:
            result = await registry.execute("run_command", '{"command": ["true"]}', context)
            assert not result.is_error, result.content
            return result

        with namespaces(allowed):
            report(f"run_command `true`, sandbox {mode} ({name})", await timed_async(runs, call))


CHECKOUT = Path(__file__).resolve().parents[1]


def checks(runs: int, workspace: Path) -> None:
    repository = workspace / "repository"
    repository.mkdir()
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    for number in range(20):
        memory = repository / ".tether" / "memory" / f"note-{number}.md"
        memory.parent.mkdir(parents=True, exist_ok=True)
        memory.write_text("be brief\n")
    print("\n| check before a command | where | median µs |\n|---|---|---|")
    for name, root in (("bare", workspace), ("git init", repository), ("checkout", CHECKOUT)):
        real = str(root.resolve())
        for what, check in (
            ("protection", lambda real=real: protection(Path(real), [real])),
            ("hard links", lambda root=root: hard_links_refusal(SandboxPolicy(), root)),
        ):
            times = []
            for _ in range(runs):
                began = time.perf_counter()
                check()
                times.append((time.perf_counter() - began) * 1e6)
            print(f"| {what} | {name} | {statistics.median(times):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=60)
    runs = parser.parse_args().runs
    print(f"Landlock ABI {landlock_abi()}, Python {sys.version.split()[0]}, {runs} runs each")
    print(f"{isolation()}, load average {os.getloadavg()[0]:.1f}\n")
    print("| what | median ms | mean ms | child CPU ms |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        workspace = Path(directory)
        spawns(runs, workspace)
        asyncio.run(calls(runs, workspace))
        checks(runs, workspace)


if __name__ == "__main__":
    main()
