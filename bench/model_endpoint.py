"""The loopback model endpoint of the kernel bench: the test suite's ``ModelServer`` answering by
the conversation, so that concurrent runs each get a tool call and then an answer.

A request whose last message is a tool result gets a text answer; any other request gets one
``read_file`` tool call (with an id unique to the server). The answer is chosen as the request
arrives, so the order in which concurrent runs reach the server does not matter.

``connections`` counts the connections it has accepted. Used in process (on the bench's event
loop, or ``BenchEndpoint.in_thread``), or as a process of its own, which prints its port, answers
each line ``connections`` on its stdin with that count, and serves until its stdin closes::

    .venv/bin/python bench/model_endpoint.py --latency 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.fakes lives in the repository, not in the package

from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply  # noqa: E402

TOOL_TEXT = "Let me read the file first."
ANSWER_TEXT = (
    "The project is an agent backend that editors spawn over stdio. It keeps conversation "
    "sessions per workspace and runs the observe, think and act loop against a model with "
    "tools, streaming its progress back to the editor as notifications. The kernel reads the "
    "history once per run and appends each message as it is produced."
)


def answers_with_text(body: Any) -> bool:
    """True when the request's last message is a tool result (OpenAI or Anthropic format)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    if last.get("role") == "tool":
        return True
    content = last.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


class BenchEndpoint(ModelServer):
    """A tool call for a fresh question, an answer once the tool result is in."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._call_ids = itertools.count(1)

    def reply_to(self, request: RecordedRequest) -> Reply:
        if answers_with_text(request.body):
            return Reply(text=ANSWER_TEXT)
        call = Call("read_file", {"path": "README.md"}, id=f"call_{next(self._call_ids)}")
        return Reply(text=TOOL_TEXT, tool_calls=[call])

    async def _answer(self, request: RecordedRequest, writer: asyncio.StreamWriter) -> bool:
        # ModelServer takes the next queued answer before its first await, so the answer queued
        # here is the one this request gets, however many requests are in flight.
        if request.format is not None:
            self.push(self.reply_to(request))
        return await super()._answer(request, writer)


async def serve(latency: float) -> None:
    async with BenchEndpoint(latency=latency) as server:
        print(server.port, flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):  # until stdin closes
            if line.strip() == "connections":
                print(server.connections, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before each answer")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.latency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
