"""What compaction costs tether itself (not the model's summary): building the view a run's
requests come from, and choosing what to summarize, over long histories. A report: nothing in it
asserts a timing.

    .venv/bin/python bench/compaction_bench.py [--sizes 1000,10000,100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tether.kernel.compaction import compacted_view, plan
from tether.kernel.window import EstimatingCounter
from tether.protocol import CompactedRange, Message, Role, ToolCall
from tether.sessions.ids import utcnow, uuid7


def history(size: int, *, compacted: bool) -> list[Message]:
    """``size`` messages in turns of user, assistant calling a tool, its result, answer; with
    ``compacted``, a summary of the first half appended at the end."""
    now = utcnow()
    messages: list[Message] = []
    while len(messages) < size:
        n = len(messages)
        call = ToolCall(id=f"c{n}", name="read_file", arguments='{"path": "src/app.py"}')
        messages += [
            Message(id=uuid7(), role=Role.USER, content=f"question {n} " * 8, created_at=now),
            Message(id=uuid7(), role=Role.ASSISTANT, tool_calls=[call], created_at=now),
            Message(
                id=uuid7(), role=Role.TOOL, tool_call_id=call.id, content="x" * 400, created_at=now
            ),
            Message(id=uuid7(), role=Role.ASSISTANT, content=f"answer {n} " * 8, created_at=now),
        ]
    messages = messages[:size]
    if compacted:
        half = messages[size // 2 - 1]
        span = CompactedRange(first_id=messages[0].id, last_id=half.id, count=size // 2)
        messages.append(
            Message(
                id=uuid7(),
                role=Role.USER,
                content="summary " * 100,
                kind="compaction",
                replaces=span,
                created_at=now,
            )
        )
    return messages


def timed(call: Callable[[], object], repeat: int) -> float:
    """The median of ``repeat`` runs, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    counter = EstimatingCounter()
    print("| messages | view, no summary | view, with a summary | plan (keep 50k tokens) |")
    print("|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        plain = history(size, compacted=False)
        summarized = history(size, compacted=True)
        view = compacted_view(summarized)
        cells = [
            timed(lambda plain=plain: compacted_view(plain), args.repeat),
            timed(lambda s=summarized: compacted_view(s), args.repeat),
            timed(lambda v=view: plan(v, len(v), 50_000, counter), args.repeat),
        ]
        print(f"| {size:,} | " + " | ".join(f"{ms:.2f} ms" for ms in cells) + " |")


if __name__ == "__main__":
    main()
