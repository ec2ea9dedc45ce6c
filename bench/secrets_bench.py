"""What redacting the configured secrets costs a tool result (``Run._redacted``, on the event
loop, for every result), and a command's environment (``child_environment``). A report: nothing
in it asserts a timing.

    .venv/bin/python bench/secrets_bench.py [--rounds 50]

Results are text of the size the tools give at most (``run_command``'s 64 KiB, an MCP server's
64 KiB, ``read_file``'s 256 KiB) and 8 MiB (a file ``write_file`` writes, whose diff is redacted
too), with no secret in them (the usual case: every secret is scanned for, none found) and with
one secret every 4 KiB; the secrets are those of a typical configuration (an API key, a store
password) and twenty (keys of every provider, MCP servers' tokens).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from tether.secrets import Secrets
from tether.tools.run_command import child_environment

SIZES = {"64 KiB": 64 * 1024, "256 KiB": 256 * 1024, "8 MiB": 8 * 1024 * 1024}


def secrets_of(count: int) -> Secrets:
    return Secrets.of(f"sk-{index:02d}-{'q' * 40}" for index in range(count))


def text_of(size: int, secrets: Secrets, every: int | None) -> str:
    line = "src/app.py:12: def main(): return compute(42)  # an ordinary line of output\n"
    text = line * (size // len(line) + 1)
    if every is None:
        return text[:size]
    parts = [text[start : start + every] for start in range(0, size, every)]
    return secrets.values[0].join(parts)[:size]


def timed(work: Callable[[], object], rounds: int) -> float:
    work()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds
    print("| result | secrets | found | redact (median) |")
    print("|---|---|---|---|")
    for count in (2, 20):
        secrets = secrets_of(count)
        for label, size in SIZES.items():
            for every in (None, 4096):
                text = text_of(size, secrets, every)
                seconds = timed(lambda text=text, s=secrets: s.redact(text), rounds)
                found = "none" if every is None else "one per 4 KiB"
                print(f"| {label} | {count} | {found} | {seconds * 1e6:,.0f} µs |")
    environ = dict(os.environ)
    for count in (0, 2, 20):
        secrets = secrets_of(count)
        seconds = timed(lambda s=secrets: child_environment(environ, frozenset(), s), rounds)
        print(
            f"\nchild_environment of {len(environ)} variables, {count} secrets: "
            f"{seconds * 1e6:,.0f} µs"
        )


if __name__ == "__main__":
    main()
