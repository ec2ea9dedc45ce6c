"""Fuzz the wire of a real ``tether serve`` or ``tether acp``: 100,000 mutated frames while runs
are in flight.

    .venv/bin/python bench/fuzz_wire.py                    # stdio, 100,000 frames, a random seed
    .venv/bin/python bench/fuzz_wire.py --tcp --seed 7     # over TCP, a given seed
    .venv/bin/python bench/fuzz_wire.py --acp              # tether acp (NDJSON lines)
    make fuzz                                              # all three, 100,000 frames each

Frames are made by ``tests/wire_fuzz.py`` (bit flips, truncated bodies, wrong, huge, negative or
missing ``Content-Length``, lower-case headers, garbage, invalid JSON, valid JSON of the wrong
shape; for ``tether acp`` the same faults as NDJSON lines), with a valid sentinel request every
10. Reported: sentinels unanswered or answered twice, anything on the output that is not a
well-formed frame, whether the process survived, its resident memory before and after
(``/proc/PID/status``), and the exit code after ``shutdown``/``exit`` (``tether acp``: after its
stdin is closed). The exit status is 1 when anything went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.wire_fuzz import TETHER, acp_face, busy_script, fuzz, serve, serve_acp

SERVER = [sys.executable, "-m", "tether", "serve"]
ACP = [sys.executable, "-m", "tether", "acp"]


async def main(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    transport = "acp" if args.acp else "tcp" if args.tcp else "stdio"
    print(f"fuzz_wire: {args.frames} frames over {transport}, seed {seed}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        workspace = root / "workspace"
        workspace.mkdir()
        options = busy_script(root / "script.json", turns=50_000, delay=0.1)
        if args.acp:
            served = await serve_acp(ACP, workspace, root / "script.json", log=root / "stderr.log")
            face = acp_face(workspace)
        else:
            served = await serve(SERVER, workspace, options, tcp=args.tcp, log=root / "stderr.log")
            face = TETHER
        pid = served.process.pid
        report = await fuzz(
            served.client, pid, seed=seed, frames=args.frames, runs=args.runs, face=face
        )
        alive = served.process.returncode is None
        code = await served.close() if alive else served.process.returncode
        log_lines = len((root / "stderr.log").read_bytes().splitlines())
    before, after = report.memory_before, report.memory_after
    print(f"  frames sent           {report.frames} in {report.seconds:.1f} s")
    print(f"  sentinels             {report.sentinels}")
    print(f"  unanswered            {len(report.unanswered)} {report.unanswered[:5]}")
    print(f"  answered twice        {len(report.answered_twice)} {report.answered_twice[:5]}")
    print(f"  bad output            {len(report.bad_output)} {report.bad_output[:5]}")
    print(f"  runs started/answered {report.runs_started}/{report.runs_answered}")
    print(f"  alive at the end      {alive}; exit code after shutdown {code}")
    print(f"  RSS before / after    {before['VmRSS'] / 1024:.1f} / {after['VmRSS'] / 1024:.1f} MiB")
    growth = (after["VmRSS"] - before["VmRSS"]) * 1024 / max(report.frames, 1)
    print(f"  RSS growth per frame  {growth:.1f} bytes; peak {after['VmHWM'] / 1024:.1f} MiB")
    print(f"  server log lines      {log_lines}")
    return 0 if report.clean and alive and code == 0 else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--runs", type=int, default=2, help="kernel/run requests kept in flight")
    parser.add_argument("--tcp", action="store_true", help="serve over TCP instead of stdio")
    parser.add_argument("--acp", action="store_true", help="fuzz tether acp (NDJSON)")
    return parser


if __name__ == "__main__":
    sys.exit(asyncio.run(main(_parser().parse_args())))
