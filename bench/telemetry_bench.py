"""What tracing costs a run: CPU per kernel run with tracing off, against a build without the
tracing hook, and with tracing on.

Three code bases, each in a fresh process per round, rounds interleaved (``PYTHONPATH`` points at
this checkout's ``server/`` or at an export of ``--before``'s, by default the parent of the commit
that added ``server/tether/telemetry.py``):

- ``without hook``: the revision before tracing existed;
- ``off``: this checkout, no ``OTEL_*`` variable, ``telemetry.enabled`` unset;
- ``on``: this checkout, ``telemetry.enabled = true``, an SDK tracer provider with a
  ``BatchSpanProcessor`` whose exporter encodes each batch as OTLP protobuf (what an OTLP exporter
  sends) and drops it, so the encoding's CPU counts but no network does.

The workload is the test suite's in-process kernel (``tests/kernel/support.py``: memory store,
scripted provider, the built-in tools): each run is three iterations on a fresh session (two
``read_file`` calls, then an answer), 5 spans when traced. It reports the median CPU µs per run
of each (and the least, less sensitive to other load on the machine), and the difference to
``without hook``. Beside it, the hook's own path when tracing is off, timed alone in process: the
decision (``tether.kernel.tracing.run_telemetry``) and the three wrappers a run awaits through
(run, each model call, each tool call). A report: nothing asserts a timing. From the
repository's root:

    .venv/bin/python bench/telemetry_bench.py --runs 300 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKLOAD = r"""
import asyncio, json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.kernel.support import KernelHarness, tool_call

mode, runs, warmup = sys.argv[2], int(sys.argv[3]), 30

if mode == "on":
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Encoding(SpanExporter):
        spans = 0
        def export(self, spans):
            encode_spans(spans).SerializeToString()
            Encoding.spans += len(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Encoding()))
    trace.set_tracer_provider(provider)

def turns(n):
    one = [
        {"toolCalls": [tool_call("c1", "read_file", path="a.txt")],
         "usage": {"inputTokens": 1200, "outputTokens": 30}, "finishReason": "tool_calls"},
        {"toolCalls": [tool_call("c2", "read_file", path="a.txt")],
         "usage": {"inputTokens": 1300, "outputTokens": 30}, "finishReason": "tool_calls"},
        {"text": "It says hello.", "usage": {"inputTokens": 1400, "outputTokens": 9}},
    ]
    return one * n

async def main():
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "a.txt").write_text("hello\n")
        config = {"telemetry": {"enabled": True}} if mode == "on" else None
        harness = KernelHarness(root, turns(runs + warmup), config=config)
        for _ in range(warmup):
            await harness.run(await harness.session(), "read a.txt")
        sessions = [await harness.session() for _ in range(runs)]
        cpu = time.process_time()
        for session in sessions:
            await harness.run(session, "read a.txt")
        if mode == "on":
            trace.get_tracer_provider().force_flush()
        cpu = time.process_time() - cpu
        print(cpu / runs * 1e6)

asyncio.run(main())
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


def before_tracing() -> str:
    """The parent of the commit that added ``server/tether/telemetry.py``."""
    added = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "log",
            "--diff-filter=A",
            "--format=%H",
            "--",
            "server/tether/telemetry.py",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        sys.exit("no commit adds server/tether/telemetry.py: give --before")
    return f"{added[-1]}^"


def measure(server: Path, mode: str, runs: int) -> float:
    """One round in a fresh process: CPU µs per run."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(PYTHONPATH=str(server), PYTHONDONTWRITEBYTECODE="1")
    argv = [sys.executable, "-c", WORKLOAD, str(ROOT), mode, str(runs)]
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"{mode}: {done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the revision without the hook (default: found by git)")
    parser.add_argument("--runs", type=int, default=300, help="timed runs per round and build")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    revision = args.before or before_tracing()
    with tempfile.TemporaryDirectory() as directory:
        builds = {
            "without hook": (export(revision, Path(directory)), "off"),
            "off": (ROOT / "server", "off"),
            "on": (ROOT / "server", "on"),
        }
        figures: dict[str, list[float]] = {name: [] for name in builds}
        for round_ in range(args.rounds):
            order = list(builds) if round_ % 2 == 0 else list(reversed(builds))
            for name in order:
                server, mode = builds[name]
                figures[name].append(measure(server, mode, args.runs))
    base, least = statistics.median(figures["without hook"]), min(figures["without hook"])
    print(f"CPU per run over {args.rounds} rounds of {args.runs} runs (3 iterations each)")
    print(f"without hook = {revision}")
    print(f"  {'':13} {'median':>8}    {'least':>8}    {'highest':>8}")
    for name, values in figures.items():
        median, low = statistics.median(values), min(values)
        print(
            f"  {name:13} {median:6.0f} µs {100 * (median / base - 1):+5.1f}%"
            f" {low:6.0f} µs {100 * (low / least - 1):+5.1f}%  {max(values):6.0f} µs"
        )
    off_path()


def off_path() -> None:
    """The hook's cost in a run that is not traced, timed alone."""
    import asyncio
    import timeit

    sys.path.insert(0, str(ROOT / "server"))
    from tether.config import TelemetryConfig
    from tether.kernel.tracing import run_telemetry
    from tether.providers.scripted import ScriptedProvider

    config, provider, count = TelemetryConfig(), ScriptedProvider([]), 200_000

    def decide() -> object:
        return run_telemetry(
            config, session_id="s", run_id="r", model="m", provider=provider, redact=str
        )

    decision = min(timeit.repeat(decide, number=count, repeat=5)) / count

    async def step() -> int:
        return 1

    async def wrapped() -> int:
        return await step()

    async def awaits(through: bool) -> float:
        started = time.process_time()
        for _ in range(count):
            await (wrapped() if through else step())
        return time.process_time() - started

    wrapper = min(asyncio.run(awaits(True)) - asyncio.run(awaits(False)) for _ in range(5)) / count
    per_run = decision + 6 * wrapper  # a run, 3 model calls, 2 tool calls
    print(
        f"the off path alone: decision {decision * 1e6:.2f} µs, one wrapper {wrapper * 1e6:.3f} µs;"
        f" a 3-iteration run {per_run * 1e6:.2f} µs"
    )


if __name__ == "__main__":
    main()
