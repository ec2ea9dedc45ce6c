"""tether's agent loop beside two Python peers, on the same loopback endpoint, in one run.

Each framework does the same work: a run of ``--tool-turns`` (10) tool turns — the model calls
``read_file``, the tool answers with the same few hundred bytes — then a ~55-word answer, every
model call streamed, on a conversation that already holds 10 or 1,000 prior messages (the kernel
bench's exchanges of a question, a tool call, its result and an answer). The endpoint is
``model_endpoint.py`` in a process of its own, answering at once.

- **tether**: the real ``tether serve`` over stdio (``kernel/run``); the history is appended to
  the session beforehand (untimed). CPU is the server process's (``/proc``, every thread).
- **pydantic-ai**: ``Agent`` over ``OpenAIChatModel`` (its OpenAI provider), ``message_history``
  the same messages, an ``event_stream_handler`` so that its model calls stream too.
- **openai-agents**: ``Runner.run_streamed`` over ``OpenAIChatCompletionsModel``, the same
  messages as input items, tracing off, events read to the end.

The peers run in the bench's process: their CPU is the process's during the run. CPU and wall time
are reported per iteration (model call), medians over ``--repetitions`` after ``--warmup``; the
frameworks alternate within every repetition. It prints a report and asserts nothing::

    .venv/bin/python bench/peers_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson

from kernel_bench import FILE_TEXT, history_of
from served import API_KEY, MODEL, SYSTEM_PROMPT, Endpoint, Served, endpoint
from tether.protocol import MessageInput, Role

PROMPT = "Where is the run loop?"
SIZES = (10, 1_000)
TARGETS = {10: 0.3, 1_000: 0.1}  # tether's CPU per iteration / a peer's, at most


async def read_file(path: str) -> str:
    """Read a text file of the workspace."""
    return FILE_TEXT


class Framework(ABC):
    name: str

    @abstractmethod
    async def prepare(self, history: Sequence[MessageInput]) -> Any:
        """What a run on ``history`` needs (untimed)."""

    @abstractmethod
    async def run(self, prepared: Any, iterations: int) -> None: ...

    def cpu(self) -> float:
        return time.process_time()


class Tether(Framework):
    name = "tether"

    def __init__(self, server: Served) -> None:
        self.server = server

    async def prepare(self, history: Sequence[MessageInput]) -> Any:
        wire = [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in history]
        return await self.server.session(wire)

    async def run(self, prepared: Any, iterations: int) -> None:
        await self.server.run(prepared, PROMPT, iterations)

    def cpu(self) -> float:
        return self.server.cpu()


class PydanticAI(Framework):
    name = "pydantic-ai"

    def __init__(self, base_url: str) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key=API_KEY))
        self.agent = Agent(model, system_prompt=SYSTEM_PROMPT, tools=[read_file])

    async def prepare(self, history: Sequence[MessageInput]) -> Any:
        from pydantic_ai import messages as m

        out: list[m.ModelMessage] = []
        names: dict[str, str] = {}
        for message in history:
            if message.role is Role.USER:
                out.append(m.ModelRequest(parts=[m.UserPromptPart(str(message.content))]))
            elif message.role is Role.TOOL:
                call_id = message.tool_call_id or ""
                part = m.ToolReturnPart(names.get(call_id, "read_file"), message.content, call_id)
                out.append(m.ModelRequest(parts=[part]))
            else:
                parts: list[Any] = [m.TextPart(str(message.content))] if message.content else []
                for call in message.tool_calls or []:
                    names[call.id] = call.name
                    parts.append(m.ToolCallPart(call.name, call.arguments, call.id))
                out.append(m.ModelResponse(parts=parts))
        return out

    async def run(self, prepared: Any, iterations: int) -> None:
        async def drain(context: Any, events: Any) -> None:
            async for _ in events:
                pass

        result = await self.agent.run(PROMPT, message_history=prepared, event_stream_handler=drain)
        responses = sum(1 for message in result.new_messages() if message.kind == "response")
        if responses != iterations:
            raise RuntimeError(f"pydantic-ai made {responses} model calls, not {iterations}")


class OpenAIAgents(Framework):
    name = "openai-agents"

    def __init__(self, base_url: str) -> None:
        from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
        from openai import AsyncOpenAI

        set_tracing_disabled(True)
        client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        self.agent = Agent(
            name="bench", instructions=SYSTEM_PROMPT, model=model, tools=[function_tool(read_file)]
        )

    async def prepare(self, history: Sequence[MessageInput]) -> Any:
        items: list[dict[str, Any]] = []
        for message in history:
            if message.role is Role.TOOL:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": message.tool_call_id,
                        "output": message.content,
                    }
                )
                continue
            if message.content:
                items.append({"role": message.role.value, "content": message.content})
            for call in message.tool_calls or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }
                )
        return items

    async def run(self, prepared: Any, iterations: int) -> None:
        from agents import Runner

        result = Runner.run_streamed(
            self.agent, [*prepared, {"role": "user", "content": PROMPT}], max_turns=iterations + 5
        )
        async for _ in result.stream_events():
            pass
        calls = len(result.raw_responses)
        if calls != iterations:
            raise RuntimeError(f"openai-agents made {calls} model calls, not {iterations}")


@dataclass
class Samples:
    cpu: dict[int, list[float]] = field(default_factory=dict)  # s per iteration
    wall: dict[int, list[float]] = field(default_factory=dict)


async def once(framework: Framework, history: Sequence[MessageInput], iterations: int):
    prepared = await framework.prepare(history)
    gc.collect()
    cpu, began = framework.cpu(), time.perf_counter()
    await framework.run(prepared, iterations)
    return (time.perf_counter() - began) / iterations, (framework.cpu() - cpu) / iterations


async def measure(args: argparse.Namespace, model: Endpoint, workspace: Path) -> dict[str, Samples]:
    iterations = args.tool_turns + 1
    histories = {size: history_of(size) for size in args.sizes}
    async with Served.start(
        sys.executable, workspace, model.openai_url, max_iterations=iterations + 5
    ) as server:
        frameworks: list[Framework] = [
            Tether(server),
            PydanticAI(model.openai_url),
            OpenAIAgents(model.openai_url),
        ]
        got = {f.name: Samples() for f in frameworks}
        for index in range(args.warmup + args.repetitions):
            print(f"  repetition {index + 1}/{args.warmup + args.repetitions}", file=sys.stderr)
            for size in args.sizes:
                for framework in frameworks:
                    wall, cpu = await once(framework, histories[size], iterations)
                    if index >= args.warmup:
                        got[framework.name].cpu.setdefault(size, []).append(cpu)
                        got[framework.name].wall.setdefault(size, []).append(wall)
    return got


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def report(got: dict[str, Samples], sizes: Sequence[int]) -> list[str]:
    names = list(got)
    header = f"{'per iteration (model call), median':38}" + "".join(
        f"{f'{name} {size:,}':>22}" for size in sizes for name in names
    )
    lines = [header, "-" * len(header)]
    for label, pick in (("CPU (ms)", "cpu"), ("wall (ms)", "wall")):
        cells = [med(getattr(got[name], pick)[size]) * 1e3 for size in sizes for name in names]
        lines.append(f"{label:38}" + "".join(f"{cell:>22.2f}" for cell in cells))
    lines.append("")
    lines.append("tether / peer, CPU per iteration (goal, report only):")
    for size in sizes:
        mine = med(got["tether"].cpu[size])
        for name in names[1:]:
            ratio = mine / med(got[name].cpu[size])
            goal = TARGETS.get(size)
            verdict = (
                "" if goal is None else f"  (<= {goal}x: {'met' if ratio <= goal else 'MISSED'})"
            )
            lines.append(f"  {size:>6,} messages, vs {name:14} {ratio:.3f}x{verdict}")
    lines.append("CPU per iteration over the repetitions, min-max (ms):")
    for size in sizes:
        spans = [
            f"{name} {min(got[name].cpu[size]) * 1e3:.2f}-{max(got[name].cpu[size]) * 1e3:.2f}"
            for name in names
        ]
        lines.append(f"  {size:>6,} messages: " + "; ".join(spans))
    return lines


async def bench(args: argparse.Namespace, workspace: Path) -> None:
    started, load = time.perf_counter(), os.getloadavg()[0]
    async with endpoint(0.0, tool_turns=args.tool_turns) as model:
        got = await measure(args, model, workspace)
    body = len(orjson.dumps([m.model_dump(mode="json") for m in history_of(max(args.sizes))]))
    print(
        f"tether peers bench: python {platform.python_version()}, pydantic-ai "
        f"{version('pydantic-ai-slim')}, openai-agents {version('openai-agents')}, openai "
        f"{version('openai')}, {os.cpu_count()} cpus; load average {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; took {time.perf_counter() - started:.0f} s\n"
        f"a run: {args.tool_turns} tool turns (read_file) and an answer = "
        f"{args.tool_turns + 1} streamed model calls; {args.repetitions} repetitions after "
        f"{args.warmup}; history of {max(args.sizes):,} messages ~{body / 1024:.0f} KB; endpoint "
        "in its own process, answering at once; tether's CPU is its server process's\n"
    )
    print("\n".join(report(got, args.sizes)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--tool-turns", type=int, default=10)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args(argv)
    logging.getLogger("openai.agents").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="tether-peers-bench-") as tmp:
        workspace = Path(tmp)
        (workspace / "README.md").write_text(FILE_TEXT)
        asyncio.run(bench(args, workspace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
