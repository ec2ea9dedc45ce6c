"""search_text and list_files through the real ``tether serve``, each engine, beside plain ``rg``.

Trees: a generated one (``--files`` files in directories of 50, a third with a TODO line) and the
running environment's site-packages. For each tree and each engine (``tools.search``), one server
runs a scripted provider whose every other turn is one tool call; a run's time minus the median
time of a run without a tool call is the call's time through the server. ``rg`` runs on the same
tree in the same process, the way a person would type it. Before timing, both engines' answers
are compared in-process: they must be the same text.

    .venv/bin/python bench/search_bench.py [--rounds 5] [--files 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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


def rg_seconds(root: Path, args: list[str], rounds: int) -> float:
    found = ripgrep()
    assert found is not None, "no rg runs here"
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        subprocess.run([found.path, *args], cwd=root, capture_output=True, check=False)
        times.append(time.perf_counter() - began)
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


def served_seconds(root: Path, engine: str, rounds: int) -> dict[str, float]:
    """Median seconds of each case's tool call through ``tether serve`` on ``engine``."""
    turns: list[dict[str, Any]] = []
    plan: list[str] = []
    for _ in range(rounds):
        for label, name, arguments, _ in [("baseline", "", {}, []), *CASES]:
            if name:
                call = {"name": name, "arguments": arguments}
                turns.append({"toolCalls": [call]})
            turns.append({"text": "done"})
            plan.append(label)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.json"
        script.write_text(json.dumps(turns))
        client = RawClient(TETHER, stderr=subprocess.DEVNULL, timeout=120)
        try:
            client.call(
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
            client.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            session = client.call("session/create", {})["sessionId"]
            times: dict[str, list[float]] = {}
            for label in plan:
                began = time.perf_counter()
                run_once(client, session)
                times.setdefault(label, []).append(time.perf_counter() - began)
        finally:
            client.kill()
    base = statistics.median(times.pop("baseline"))
    return {label: max(0.0, statistics.median(spent) - base) for label, spent in times.items()}


def run_once(client: RawClient, session: str) -> None:
    params = {"sessionId": session, "prompt": "search"}
    client.write(frame({"jsonrpc": "2.0", "id": "run", "method": "kernel/run", "params": params}))
    while True:
        body = client.read_body()
        if b'"method"' not in body[:40]:
            result_of(body)
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    found = ripgrep()
    print(f"rg: {found.path if found else None} {found.version if found else ''}")
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
            engines = {
                engine: served_seconds(root, engine, args.rounds)
                for engine in ("ripgrep", "python")
            }
            print(f"{title} ({root}); median of {args.rounds}, ms")
            print(f"{'case':18} {'rg':>8} {'tether rg':>10} {'ratio':>6} {'python':>8}")
            for label, _, _, rg_args in CASES:
                plain = rg_seconds(root, [*rg_args], args.rounds)
                mine, python = engines["ripgrep"][label], engines["python"][label]
                print(
                    f"{label:18} {plain * 1e3:8.1f} {mine * 1e3:10.1f} "
                    f"{mine / plain:6.2f} {python * 1e3:8.1f}"
                )


if __name__ == "__main__":
    main()
