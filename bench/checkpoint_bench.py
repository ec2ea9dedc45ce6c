"""What checkpoints cost a run, beside one model call.

On a generated workspace of ``--files`` files (10,000 by default: 100 directories of 100 files
of 200 B to 8 KiB, a ``.gitignore`` and an ignored build directory), with the checkpoint store a
run uses (:class:`tether.checkpoints.CheckpointStore`, a git directory of its own):

- **first snapshot**: what a workspace tether never saw costs once (every file read and hashed
  into the store; the permission bits noted): the pre-warm a new session starts in the
  background, or, without it, the wait of the run's first edit;
- **command step** (``run_command``): the snapshot before the step and the one after with the
  diff, each a scan of the whole tree (git's stat cache: only the changed files are read), the
  step making 10 files edited, 5 created, 5 deleted; this is also what every step cost before
  file tools recorded only their own paths;
- **write_file step**: the same around a step of one ``write_file``, whose snapshots look only at
  the file it names;
- **rewind**: putting the command step's 20 files back (conflict check included).

Beside them, one model call: a streamed Chat Completions answer (~300 characters) from the loopback
endpoint of the test suite (``tests/fakes/model_server.py``) over httpx, no latency added: the
floor of any model call, which a real one exceeds by 0.5-30 s.

Medians of ``--rounds`` rounds, each on a fresh store. It prints a report and asserts nothing.

    .venv/bin/python bench/checkpoint_bench.py [--files 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.fakes lives in the repository, not in the package

from tests.fakes.model_server import ModelServer, Reply  # noqa: E402

from tether.checkpoints import Checkpoint, CheckpointStore  # noqa: E402

T = TypeVar("T")
ANSWER = "The project is an agent backend that editors spawn over stdio. " * 5


def generate(root: Path, files: int, rng: random.Random) -> list[str]:
    """A workspace of ``files`` files; their relative paths."""
    paths = []
    per_dir = 100
    for index in range(files):
        rel = f"pkg{index // per_dir:03d}/mod{index % per_dir:03d}.py"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(
            rng.randbytes(rng.randint(100, 4096)).hex().encode()[: rng.randint(200, 8192)]
        )
        paths.append(rel)
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    for index in range(200):
        (root / "build" / f"out{index}.o").write_bytes(b"\0" * 1024)
    return paths


def cpu() -> float:
    """CPU seconds of this process and of the git commands it waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def timed(call: Callable[[], T]) -> tuple[tuple[float, float], T]:
    """((wall seconds, CPU seconds), what ``call`` returned)."""
    start, start_cpu = time.perf_counter(), cpu()
    value = call()
    return (time.perf_counter() - start, cpu() - start_cpu), value


def one_step(root: Path, paths: list[str], rng: random.Random, round_: int) -> None:
    """What a run's step does: 10 files edited, 5 created, 5 deleted."""
    chosen = rng.sample(paths, 15)
    for rel in chosen[:10]:
        with open(root / rel, "ab") as handle:
            handle.write(f"# edited in round {round_}\n".encode())
    for rel in chosen[10:]:
        (root / rel).unlink()
        paths.remove(rel)
    for index in range(5):
        rel = f"new/r{round_}_{index}.py"
        (root / rel).parent.mkdir(exist_ok=True)
        (root / rel).write_text(f"created {index}\n")
        paths.append(rel)


def step(
    store: CheckpointStore,
    root: Path,
    change: Callable[[], None],
    paths: set[str] | None,
    round_: int,
) -> tuple[tuple[float, float], tuple[float, float], Checkpoint]:
    """(before-snapshot times, after-snapshot + diff times, the checkpoint) of one step that
    makes ``change`` (``paths``: the only files it writes, None: unknown)."""
    before_s, before = timed(lambda: store.snapshot(root, modes=True, paths=paths))
    change()

    def after_and_diff() -> tuple[str, list[str]]:
        after = store.snapshot(root, paths=paths)
        return after.tree, store.changed(root, before.tree, after.tree)

    after_s, (after_tree, files) = timed(after_and_diff)
    made = Checkpoint(
        checkpoint_id=f"c{round_}",
        session_id="s",
        run_id=f"r{round_}",
        message_id=f"m{round_}",
        workspace=str(root),
        before=before.tree,
        after=after_tree,
        files=files,
        modes=before.modes,
        created_at="2026-01-01T00:00:00+00:00",
    )
    return before_s, after_s, made


def append(file: Path, text: str) -> None:
    """What a write_file step does: one file written."""
    file.write_text(file.read_text() + text)


async def model_call(server: ModelServer, client: httpx.AsyncClient) -> float:
    server.push(Reply(text=ANSWER))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    start = time.perf_counter()
    async with client.stream("POST", f"{server.openai_url}/chat/completions", json=body) as r:
        async for _ in r.aiter_bytes():
            pass
    return time.perf_counter() - start


async def model_calls(rounds: int) -> list[float]:
    async with ModelServer() as server, httpx.AsyncClient() as client:
        await model_call(server, client)  # the connection is made once
        return [await model_call(server, client) for _ in range(rounds * 5)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(24)
    results: dict[str, list[tuple[float, float]]] = {}
    changed = 0
    with tempfile.TemporaryDirectory(prefix="checkpoint-bench-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        paths = generate(root, args.files, rng)
        for round_ in range(args.rounds):
            store = CheckpointStore(Path(tmp) / f"store{round_}")
            first_s, _ = timed(partial(store.snapshot, root, modes=True))
            command = step(store, root, partial(one_step, root, paths, rng, round_), None, 0)
            target = rng.choice([p for p in paths if p not in command[2].files])
            written = partial(append, root / target, f"# written in round {round_}\n")
            file_step = step(store, root, written, {target}, 1)  # the next step of the run
            rewind_s, rewound = timed(partial(store.rewind, root, [command[2]]))
            changed = len(rewound.restored) + len(rewound.removed)
            paths = sorted(
                p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file()
            )
            for name, value in (
                ("first snapshot", first_s),
                ("command step: before", command[0]),
                ("command step: after + diff", command[1]),
                ("write_file step: before", file_step[0]),
                ("write_file step: after + diff", file_step[1]),
                ("rewind", rewind_s),
            ):
                results.setdefault(name, []).append(value)
        calls = asyncio.run(model_calls(args.rounds))
    print(
        f"checkpoints on {args.files:,} files (+200 ignored), {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; medians in ms"
    )
    print(f"  {'':<30} {'wall':>9} {'CPU':>9}")
    for name, values in results.items():
        wall = statistics.median(v[0] for v in values) * 1000
        used = statistics.median(v[1] for v in values) * 1000
        print(f"  {name:<30} {wall:9.1f} {used:9.1f}")
    print(f"  (rewind of {changed} files)")
    print(f"  one model call (loopback, streamed) {statistics.median(calls) * 1000:7.1f}")


if __name__ == "__main__":
    main()
