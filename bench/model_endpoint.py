"""The loopback model endpoint of the kernel bench: the test suite's ``ModelServer`` answering by
the conversation, so that concurrent runs each get a tool call and then an answer.

A request gets one ``read_file`` tool call (with an id unique to the server) until the
conversation holds ``tool_turns`` tool results after its last user message (one by default), and
a text answer then. The answer is chosen as the request
arrives, so the order in which concurrent runs reach the server does not matter.

``connections`` counts the connections it has accepted. Used in process (on the bench's event
loop, or ``BenchEndpoint.in_thread``), or as a process of its own, which prints its port, answers
each line ``connections`` on its stdin with that count, and serves until its stdin closes::

    .venv/bin/python bench/model_endpoint.py --latency 0.05 [--tool-turns 10]
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


def is_tool_result(message: Any) -> bool:
    """A tool result, in the OpenAI format or the Anthropic one (a user message of blocks)."""
    if not isinstance(message, dict):
        return False
    if message.get("role") == "tool":
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def tool_results_since_prompt(body: Any) -> int:
    """Tool results after the last message of the user that is not one (OpenAI or Anthropic)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    count = 0
    for message in reversed(messages if isinstance(messages, list) else []):
        if is_tool_result(message):
            count += 1
        elif not isinstance(message, dict) or message.get("role") != "assistant":
            break
    return count


class BenchEndpoint(ModelServer):
    """A tool call for a fresh question, an answer once the tool result is in."""

    def __init__(self, *, tool_turns: int = 1, **options: Any) -> None:
        super().__init__(**options)
        self.tool_turns = tool_turns
        self._call_ids = itertools.count(1)

    def reply_to(self, request: RecordedRequest) -> Reply:
        if tool_results_since_prompt(request.body) >= self.tool_turns:
            return Reply(text=ANSWER_TEXT)
        call = Call("read_file", {"path": "README.md"}, id=f"call_{next(self._call_ids)}")
        return Reply(text=TOOL_TEXT, tool_calls=[call])

    async def _answer(self, request: RecordedRequest, writer: asyncio.StreamWriter) -> bool:
        # ModelServer takes the next queued answer before its first await, so the answer queued
        # here is the one this request gets, however many requests are in flight.
        if request.format is not None:
            self.push(self.reply_to(request))
        return await super()._answer(request, writer)


async def serve(latency: float, tool_turns: int) -> None:
    async with BenchEndpoint(latency=latency, tool_turns=tool_turns) as server:
        print(server.port, flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):  # until stdin closes
            if line.strip() == "connections":
                print(server.connections, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before each answer")
    parser.add_argument(
        "--tool-turns", type=int, default=1, help="tool calls in a run before its answer"
    )
    args = parser.parse_args(argv)
    asyncio.run(serve(args.latency, args.tool_turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
