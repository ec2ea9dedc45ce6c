"""``tether serve`` under a sampling profiler of its CPU time, and the report of what it saw.

cProfile costs each Python call about the same, so it inflates code made of many small calls
(aiohttp's per-chunk bookkeeping, asyncio's callbacks) several times over against code that
spends its time in C: its shares mislead. This samples instead: a ``SIGPROF`` timer fires per
millisecond of CPU the process uses (the kernel rounds it to its tick, ~4 ms here) and the
handler counts the main thread's stack; idle time is never sampled. At exit the stacks are
written, one per line with its count (the "collapsed" format flame graph tools read)::

    python -P bench/sample_serve.py OUT      # as `python -m tether serve`, stacks into OUT
    python bench/sample_serve.py --report OUT [--top 30]

``http_bench.py --profile OUT`` runs its first server this way and prints the report.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import runpy
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import CodeType, FrameType

INTERVAL = 0.001  # s of CPU between samples (rounded up to the kernel's tick)
KEY_FRAMES = ("httpx/_client.py:send", "aiohttp/client.py:_request")


def frame_name(code: CodeType) -> str:
    """``package/module.py:function``, the path cut at the package's root."""
    path = code.co_filename
    for root in ("site-packages/", "/server/", "python3.11/", "python3.12/", "python3.13/"):
        if root in path:
            path = path.split(root, 1)[1]
            break
    return f"{path}:{code.co_name}"


def serve(out: Path) -> None:
    counts: collections.Counter[str] = collections.Counter()

    def sample(signum: int, frame: FrameType | None) -> None:
        stack = []
        while frame is not None:
            stack.append(frame_name(frame.f_code))
            frame = frame.f_back
        counts[";".join(reversed(stack))] += 1

    def write() -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        out.write_text("".join(f"{stack} {count}\n" for stack, count in counts.items()))

    atexit.register(write)
    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)
    sys.argv = ["tether", "serve"]
    runpy.run_module("tether", run_name="__main__", alter_sys=True)


def _package(frame: str) -> str:
    path = frame.split(":", 1)[0]
    parts = path.split("/")
    if parts[0] == "tether" and len(parts) > 2:
        return "/".join(parts[:3])  # tether/kernel/run.py
    return parts[0] if len(parts) > 1 else path


def report(path: Path, top: int = 30) -> list[str]:
    """Shares of the samples taken after start-up (a stack inside an import is start-up): by
    the package whose code ran (own time), and by tether's functions on the stack (inclusive)."""
    stacks: list[tuple[list[str], int]] = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not any("importlib" in frame for frame in frames):
            stacks.append((frames, int(count)))
    total = sum(count for _, count in stacks)
    if not total:
        return [f"no samples in {path}"]
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        own[_package(frames[-1])] += count
        for frame in set(frames):
            if frame.startswith("tether/") or frame.startswith(KEY_FRAMES):
                inclusive[frame] += count
    lines = [f"{total} samples of the server's CPU after start-up; own time by package:"]
    lines += [f"  {count / total:6.1%}  {name}" for name, count in own.most_common(top)]
    lines.append("on the stack (inclusive), tether's functions and the HTTP client's entries:")
    lines += [
        f"  {count / total:6.1%}  {name}"
        for name, count in inclusive.most_common(top * 2)
        if not name.startswith(("tether/cli.py", "tether/__main__.py"))
    ][:top]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("out", type=Path, help="the file of collapsed stacks")
    parser.add_argument("--report", action="store_true", help="report on OUT, do not serve")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    if args.report:
        print("\n".join(report(args.out, args.top)))
    else:
        serve(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
