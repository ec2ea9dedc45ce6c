"""search_text and list_files through the real ``tether serve``, each engine, beside plain ``rg``.

Trees: a generated one (``--files`` files in directories of 50, a third with a TODO line) and the
running environment's site-packages. For each tree and each engine (``tools.search``), one server
runs a scripted provider whose every other turn is one tool call; a run's time minus the median
time of a run without a tool call is the call's time through the server. ``rg`` runs on the same
tree in the same process, the way a person would type it. Beside the wall time, the CPU time:
the server's with its children's (the ``rg`` it ran and reaped), against plain ``rg``'s, which
a loaded machine moves much less. Before timing, both engines' answers are compared in-process:
they must be the same text.

    .venv/bin/python bench/search_bench.py [--rounds 5] [--files 10000] [--no-python]
        [--before /tmp/before/server]   # an older tree's ripgrep engine, in the same run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from raw_client import RawClient, frame, result_of  # type: ignore[import-not-found]
from tether.tools import ToolContext, builtin_registry
from tether.tools.ripgrep import ripgrep

TETHER = [sys.executable, "-m", "tether", "serve"]
CASES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("no match", "search_text", {"pattern": "zq_nowhere_qz"}, ["zq_nowhere_qz"]),
    ("rare match", "search_text", {"pattern": "def main_entry"}, ["def main_entry"]),
    ("TODO, first 100", "search_text", {"pattern": "TODO"}, ["TODO"]),
    ("list_files", "list_files", {"limit": 5000}, ["--files"]),
]
# a call refused before any work (limit 0): what any tool call costs through the server (the
# extra model turn, the result's message and events), the floor under every case above
FLOOR = ("floor: any tool call", "search_text", {"pattern": "x", "limit": 0}, [])


def make_tree(root: Path, files: int) -> None:
    for index in range(files):
        directory = root / f"pkg{index // 50:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        lines = [f"value_{index}_{line} = {line}\n" for line in range(40)]
        if index % 3 == 0:
            lines[7] = "# TODO: tidy this\n"
        if index == files - 7:
            lines[20] = "def main_entry():\n"
        (directory / f"mod{index % 50:02d}.py").write_text("".join(lines))


def cpu_of(pid: int) -> float:
    """CPU seconds of process ``pid`` and of the children it reaped (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def rg_seconds(root: Path, args: list[str], rounds: int, cpu: list[float] | None = None) -> float:
    found = ripgrep()
    assert found is not None, "no rg runs here"
    times = []
    for _ in range(rounds):
        spent = children_cpu()
        began = time.perf_counter()
        subprocess.run(
            [found.path, *args],
            cwd=root,
            capture_output=True,
            stdin=subprocess.DEVNULL,  # else a readable stdin is what rg searches
            check=False,
        )
        times.append(time.perf_counter() - began)
        if cpu is not None:
            cpu.append(children_cpu() - spent)
    return statistics.median(times)


def same_answers(root: Path) -> None:
    async def both(name: str, arguments: dict[str, Any]) -> None:
        answers = []
        for engine in ("python", "ripgrep"):
            context = ToolContext(workspace=root, session_id="s", run_id="r", search=engine)
            result = await builtin_registry().execute(name, json.dumps(arguments), context)
            answers.append(result.content)
        if answers[0] != answers[1]:
            print(f"  answers differ for {name} {arguments}:")
            for engine, answer in zip(("python", "ripgrep"), answers, strict=True):
                print(f"    {engine}: " + " | ".join(answer.splitlines()[:1] + notes(answer)))

    for _, name, arguments, _ in CASES:
        asyncio.run(both(name, arguments))


def notes(answer: str) -> list[str]:
    return [line for line in answer.splitlines() if line.startswith("[")]


class Served:
    """One ``tether serve`` on ``root`` whose scripted provider answers every other turn with
    the next tool call of ``plan`` (``--before``: a tree's ``server/`` put on ``PYTHONPATH``)."""

    def __init__(
        self, root: Path, engine: str, plan: list[str], tmp: Path, before: str | None
    ) -> None:
        turns: list[dict[str, Any]] = []
        calls = {label: (name, arguments) for label, name, arguments, _ in [*CASES, FLOOR]}
        for label in plan:
            if label != "baseline":
                name, arguments = calls[label]
                turns.append({"toolCalls": [{"name": name, "arguments": arguments}]})
            turns.append({"text": "done"})
        script = tmp / f"script-{engine}-{bool(before)}.json"
        script.write_text(json.dumps(turns))
        saved = dict(os.environ)
        if before:
            os.environ["PYTHONPATH"] = before
        try:
            self.client = RawClient(TETHER, stderr=subprocess.DEVNULL, timeout=120)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.client.call(
            "initialize",
            {
                "processId": os.getpid(),
                "capabilities": {},
                "workspaceFolders": [{"uri": root.as_uri(), "name": "bench"}],
                "initializationOptions": {
                    "provider": {"type": "scripted", "script": str(script)},
                    "tools": {"search": engine},
                },
            },
        )
        self.client.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        self.session = self.client.call("session/create", {})["sessionId"]
        self.times: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def run(self, label: str) -> None:
        spent = cpu_of(self.client.process.pid)
        began = time.perf_counter()
        run_once(self.client, self.session)
        self.times.setdefault(label, []).append(time.perf_counter() - began)
        self.cpu.setdefault(label, []).append(cpu_of(self.client.process.pid) - spent)

    def calls(self) -> dict[str, list[float]]:
        """Seconds of each case's tool call, round by round (minus the median run without
        one)."""
        return _minus_baseline(self.times)

    def cpu_calls(self) -> dict[str, list[float]]:
        """CPU seconds of each case's tool call (the server's and its ``rg``'s), likewise."""
        return _minus_baseline(self.cpu)


def _minus_baseline(times: dict[str, list[float]]) -> dict[str, list[float]]:
    base = statistics.median(times["baseline"])
    return {
        label: [max(0.0, spent - base) for spent in each]
        for label, each in times.items()
        if label != "baseline"
    }


def run_once(client: RawClient, session: str) -> None:
    params = {"sessionId": session, "prompt": "search"}
    client.write(frame({"jsonrpc": "2.0", "id": "run", "method": "kernel/run", "params": params}))
    while True:
        body = client.read_body()
        if b'"method"' not in body[:40]:
            result_of(body)
            return


Times = dict[str, dict[str, list[float]]]


def served_seconds(
    root: Path, columns: dict[str, tuple[str, str | None]], rounds: int
) -> tuple[Times, Times]:
    """Each column's (engine, ``--before`` tree) seconds per case, round by round, and plain
    ``rg``'s ("rg"), wall and CPU: the servers run at once and take turns call by call with
    ``rg``, so load from outside falls on all of them alike."""
    rg_args = {label: arguments for label, _, _, arguments in CASES}
    plain: dict[str, list[float]] = {}
    plain_cpu: dict[str, list[float]] = {}
    labels = ["baseline", FLOOR[0], *(case[0] for case in CASES)]
    plan = [label for _ in range(rounds) for label in labels]
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            column: Served(root, engine, plan, Path(tmp), before)
            for column, (engine, before) in columns.items()
        }
        try:
            for label in plan:
                for server in servers.values():
                    server.run(label)
                if label in rg_args:
                    cpu = plain_cpu.setdefault(label, [])
                    plain.setdefault(label, []).append(rg_seconds(root, rg_args[label], 1, cpu))
        finally:
            for server in servers.values():
                server.client.kill()
    calls = {column: server.calls() for column, server in servers.items()}
    calls["rg"] = plain
    cpu_calls = {column: server.cpu_calls() for column, server in servers.items()}
    cpu_calls["rg"] = plain_cpu
    return calls, cpu_calls


def trimmed_mean(values: list[float]) -> float:
    """The mean without the highest and lowest value (one round's import or stray job): CPU
    read in clock ticks needs a mean, and one outlier moves a mean of a few rounds."""
    kept = sorted(values)[1:-1] if len(values) >= 5 else values
    return statistics.mean(kept)


def report(columns: dict[str, tuple[str, str | None]], served: Times, cpu: Times) -> None:
    header = f"{'case':18} {'rg':>8} {'cpu':>6}"
    for column in columns:
        header += f" {column:>10} {'ratio':>6} {'cpu':>6} {'x rg':>5}"
    print(header)
    floor = f"{FLOOR[0]:18} {'':8} {'':6}"
    for column in columns:
        floor += f" {statistics.median(served[column][FLOOR[0]]) * 1e3:10.1f} {'':6}"
        floor += f" {trimmed_mean(cpu[column][FLOOR[0]]) * 1e3:6.1f} {'':5}"
    print(floor)
    for label, _, _, _ in CASES:
        plain, plain_cpu = served["rg"][label], trimmed_mean(cpu["rg"][label])
        row = f"{label:18} {statistics.median(plain) * 1e3:8.1f} {plain_cpu * 1e3:6.1f}"
        for column in columns:
            spent = served[column][label]
            # the median of each round's ratio: rg ran right after, on the same load
            ratio = statistics.median(
                mine / max(theirs, 1e-9) for mine, theirs in zip(spent, plain, strict=True)
            )
            used = trimmed_mean(cpu[column][label])
            row += f" {statistics.median(spent) * 1e3:10.1f} {ratio:6.2f}"
            row += f" {used * 1e3:6.1f} {used / max(plain_cpu, 1e-9):5.2f}"
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument(
        "--before", help="a tree's server/ (on PYTHONPATH): its ripgrep engine beside this one"
    )
    parser.add_argument("--no-python", action="store_true", help="leave the Python engine out")
    args = parser.parse_args()
    found = ripgrep()
    print(f"rg: {found.path if found else None} {found.version if found else ''}")
    print(f"load average at the start: {os.getloadavg()}")
    columns: dict[str, tuple[str, str | None]] = {"tether rg": ("ripgrep", None)}
    if args.before:
        columns["before rg"] = ("ripgrep", os.path.abspath(args.before))
    if not args.no_python:
        columns["python"] = ("python", None)
    with tempfile.TemporaryDirectory() as tmp:
        generated = Path(tmp) / "tree"
        make_tree(generated, args.files)
        trees = [
            (f"generated, {args.files} files", generated),
            ("site-packages", Path(sysconfig.get_path("purelib"))),
        ]
        for title, root in trees:
            print(f"\n{title}")
            same_answers(root)
            served, cpu = served_seconds(root, columns, args.rounds)
            print(f"{title} ({root}); medians of {args.rounds} rounds, ms; ratio: the median")
            print("of each round's ratio to the rg run beside it; cpu: CPU ms per call, a mean")
            print("without the extremes (the server's in clock ticks, from /proc); x rg: over rg's")
            report(columns, served, cpu)
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
