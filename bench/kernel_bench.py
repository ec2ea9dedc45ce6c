"""tether's kernel: what an iteration costs the server, and how concurrent runs share the loop.

Two measurements, reported side by side in one run:

1. **Overhead per iteration**, in process: a ``MemoryStore``, the ``Kernel``, the scripted provider
   (no model time: it answers at once) and a tool executor whose one tool returns a fixed result
   at once. Progress events are encoded into ``kernel/progress`` frames the way the server does it
   (``Wire.send_notification`` into a byte sink), and the real memory loader runs on an empty
   workspace. Each run is ``--iterations`` iterations (a tool call each, the last a text answer)
   on a fresh session whose history is prefilled, untimed, with 10, 1,000 or 10,000 realistic
   messages. The clock is read at the kernel's own events: run setup (``kernel.run`` to the first
   ``iteration_started``), the first iteration, the later ones. The size of what must be sent to
   the model at each history length is the JSON body the OpenAI provider would POST; building
   and encoding that body is timed too, as a reference (the scripted provider does not do it).
2. **100 concurrent runs** on 100 sessions against the loopback model endpoint
   (``model_endpoint.py``, the test suite's ``ModelServer``) with 50 ms latency per answer, over
   the OpenAI provider and one shared ``httpx.AsyncClient``; each run is two iterations (a tool
   call, then an answer), compared with one such run alone. The endpoint runs in a process of its
   own (as a model server would), in a thread of the bench, and on the bench's own event loop.
   Beside them, the floor: the same two streamed requests per run sent with the httpx client and
   nothing else. The CPU time of the bench process (and of the endpoint's, when it has its own)
   during the concurrent rounds says where the time goes.

Medians over repetitions; sizes and columns alternate so outside load falls on all of them alike.
It prints a report and asserts nothing about timing.

    .venv/bin/python bench/kernel_bench.py                       # what ``make bench`` runs
    .venv/bin/python bench/kernel_bench.py --profile concurrent  # or setup, iterations: cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import itertools
import math
import os
import platform
import pstats
import random
import site
import statistics
import sys
import sysconfig
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import orjson

from model_endpoint import BenchEndpoint
from tether.config import TetherConfig
from tether.kernel.kernel import Kernel
from tether.memory import load_memory
from tether.protocol import CreateSessionParams, MessageInput, Role, ToolCall
from tether.protocol.kernel import (
    IterationStarted,
    ProgressParams,
    RunFinished,
    RunParams,
    RunResult,
    StopReason,
)
from tether.protocol.tools import ToolSpec
from tether.providers import ModelRequest, Provider, ScriptedProvider, ScriptTurn, make_provider
from tether.providers.client import make_client
from tether.providers.openai import OpenAIProvider, openai_tools
from tether.rpc.app import App
from tether.rpc.progress import progress_emitter
from tether.rpc.wire import Wire
from tether.sessions import MemoryStore
from tether.tools.base import SourceFailure, ToolContext, ToolResult

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIZES = (10, 1_000, 10_000)
PREFILL_BATCH = 100
CONCURRENT = 100
LATENCY = 0.05
PLACEMENTS = ("process", "thread", "same loop")
HTTP_ONLY = "httpx only"
PROMPT = "What is this project?"
TARGET_ITERATION_US = 1000.0  # at 1,000 messages
TARGET_CONCURRENT_RATIO = 1.5
SYSTEM_PROMPT = "You are a careful coding assistant. Read before you answer; keep answers short."


# -- the in-process kernel -----------------------------------------------------------------------


FILE_TEXT = (
    "# tether\n\n"
    "tether is an agent backend that code editors talk to the way they talk to a language\n"
    'server: a long-lived process on stdio speaking JSON-RPC 2.0 with "LSP framing". It keeps\n'
    "conversation sessions per editor workspace and runs the observe, think, act loop.\n\n"
    "```sh\nmake run    # the main job\nmake test   # lint, type-check, the whole suite\n```\n"
)


class Tools:
    """One tool, ``read_file``, that answers at once with the same few hundred bytes."""

    def __init__(self) -> None:
        self.specs = [
            ToolSpec(
                name="read_file",
                description="Read a text file of the workspace, optionally a range of lines.",
                parameters={
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "startLine": {"type": "integer"},
                        "endLine": {"type": "integer"},
                    },
                    "required": ["path"],
                },
            )
        ]

    def list(self) -> list[ToolSpec]:
        return self.specs

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        return ToolResult(FILE_TEXT)

    def protected(self, name: str, arguments: str, workspace: Path) -> str | None:
        return None  # read_file writes nothing

    def failures(self) -> Sequence[SourceFailure]:
        return ()  # no source of tools that could fail

    async def refreshed(self) -> None:
        return None  # the list never changes

    def prompts(self) -> tuple[()]:
        return ()

    async def read_resource(self, uri: str) -> None:
        return None


WORDS = (
    "the session store kernel provider model tool call result message history workspace file "
    "editor request response stream event token iteration cancel config memory append read "
    "write search list path line range error retry timeout json schema wire frame notification "
    "progress run loop think act observe answer prompt system user assistant"
).split()


def prose(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words).capitalize() + "."


def code(rng: random.Random, size: int) -> str:
    """Numbered source lines, as ``read_file`` returns them: quotes, tabs and newlines."""
    lines: list[str] = []
    length, number = 0, rng.randrange(1, 400)
    while length < size:
        name = rng.choice(WORDS)
        line = f'{number:>5}\t    {name} = await self._{name}("{rng.choice(WORDS)}", {number})'
        lines.append(line)
        length += len(line) + 1
        number += 1
    return "\n".join(lines)


def history_of(count: int, seed: int = 7) -> list[MessageInput]:
    """``count`` messages of a plausible session: exchanges of a question, a tool call, its result
    and an answer (a few hundred bytes each); a question and a plain answer fill the rest."""
    rng = random.Random(seed)
    messages: list[MessageInput] = []
    exchange = 0
    while len(messages) < count:
        exchange += 1
        question = MessageInput(role=Role.USER, content=prose(rng, rng.randrange(120, 320)))
        if count - len(messages) < 4:
            answer = MessageInput(role=Role.ASSISTANT, content=prose(rng, rng.randrange(200, 500)))
            messages += [question, answer][: count - len(messages)]
            continue
        call = ToolCall(
            id=f"call_h{exchange}",
            name="read_file",
            arguments=orjson.dumps(
                {"path": f"server/tether/{rng.choice(WORDS)}.py", "startLine": 1, "endLine": 40}
            ).decode(),
        )
        messages += [
            question,
            MessageInput(role=Role.ASSISTANT, content=prose(rng, 60), tool_calls=[call]),
            MessageInput(
                role=Role.TOOL, tool_call_id=call.id, content=code(rng, rng.randrange(300, 700))
            ),
            MessageInput(role=Role.ASSISTANT, content=prose(rng, rng.randrange(200, 500))),
        ]
    return messages


def script(iterations: int) -> list[ScriptTurn]:
    """``iterations - 1`` turns that each call ``read_file``, then an answer of ~60 words."""
    rng = random.Random(11)
    turns = [
        ScriptTurn.model_validate(
            {
                "text": "Let me look at the next file.",
                "toolCalls": [
                    {"name": "read_file", "arguments": {"path": f"server/tether/{word}.py"}}
                ],
            }
        )
        for word in (rng.choice(WORDS) for _ in range(iterations - 1))
    ]
    return [*turns, ScriptTurn(text=prose(rng, 400))]


CONTEXT_MAX_TOKENS: int | None = None  # --context-max-tokens: a history window in every run


def config(provider: dict[str, Any]) -> TetherConfig:
    return TetherConfig.model_validate(
        {
            "provider": provider,
            "kernel": {"systemPrompt": SYSTEM_PROMPT},
            "context": {"maxTokens": CONTEXT_MAX_TOKENS},
        }
    )


class Sink:
    """Where the encoded ``kernel/progress`` frames go: counted, then dropped."""

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0

    def write(self, data: bytes) -> None:
        # The wire writes the frames of one turn of the event loop together.
        self.frames += data.count(b"Content-Length: ")
        self.bytes += len(data)


def progress(sink: Sink) -> Callable[[ProgressParams], None]:
    """The server's emitter: each event becomes a framed ``kernel/progress`` notification."""
    wire = Wire(App(store=MemoryStore(), environ={}))
    wire.connect(sink.write)
    return progress_emitter(wire.send_notification, None)


@dataclass
class Marks:
    """perf_counter_ns at the kernel's events during one run."""

    iterations: list[int] = field(default_factory=list)
    finished: int = 0


def marking(
    marks: Marks, emit: Callable[[ProgressParams], None]
) -> Callable[[ProgressParams], Any]:
    def on_event(params: ProgressParams) -> None:
        if isinstance(params.event, IterationStarted):
            marks.iterations.append(time.perf_counter_ns())
        elif isinstance(params.event, RunFinished):
            marks.finished = time.perf_counter_ns()
        emit(params)

    return on_event


def unexpected(result: RunResult) -> RuntimeError:
    return RuntimeError(f"unexpected run: {result.iterations} iterations, {result.stop_reason}")


@dataclass
class RunTimes:
    """One run, in ns."""

    setup: int  # kernel.run called -> first iteration_started
    first: int  # the first iteration
    later: float  # mean of the others
    loop: float  # mean over all iterations
    whole: float  # kernel.run called -> returned, per iteration


@dataclass
class Overhead:
    history: dict[int, list[MessageInput]]
    body_bytes: dict[int, int] = field(default_factory=dict)
    encode_ns: dict[int, float] = field(default_factory=dict)
    encode_ns_no_gc: dict[int, float] = field(default_factory=dict)
    runs: dict[int, list[RunTimes]] = field(default_factory=dict)
    progress_frames: int = 0
    progress_bytes: int = 0


def fixed_tools(tools: Tools) -> Callable[[TetherConfig, str, Path], Awaitable[Tools]]:
    """A kernel tools factory that always gives ``tools``."""

    async def factory(config: TetherConfig, session_id: str, workspace: Path) -> Tools:
        return tools

    return factory


def scripted_kernel(store: MemoryStore, tools: Tools, iterations: int) -> Kernel:
    """The kernel as the server builds it, with a fresh scripted provider for each run."""
    turns = script(iterations)
    return Kernel(
        store,
        config=lambda workspace: config({"type": "scripted", "model": "bench"}),
        providers=lambda _: ScriptedProvider(turns),
        tools=fixed_tools(tools),
        memory=load_memory,
    )


async def prefill(store: MemoryStore, workspace: Path, history: Sequence[MessageInput]) -> str:
    session = await store.create(CreateSessionParams(), workspace.as_uri())
    for start in range(0, len(history), PREFILL_BATCH):
        await store.append(session.session_id, history[start : start + PREFILL_BATCH])
    return session.session_id


async def one_scripted_run(
    kernel: Kernel, session_id: str, iterations: int, emit: Callable[[ProgressParams], None]
) -> RunTimes:
    marks = Marks()
    params = RunParams(
        session_id=session_id, prompt="Where is the run loop?", max_iterations=iterations
    )
    began = time.perf_counter_ns()
    result = await kernel.run(params, marking(marks, emit))
    ended = time.perf_counter_ns()
    if result.iterations != iterations or result.stop_reason is not StopReason.END_TURN:
        raise unexpected(result)
    first, *rest = marks.iterations
    second = rest[0] if rest else marks.finished
    return RunTimes(
        setup=first - began,
        first=second - first,
        later=(marks.finished - second) / max(1, iterations - 1),
        loop=(marks.finished - first) / iterations,
        whole=(ended - began) / iterations,
    )


def time_body(history: list[Any], tools: Sequence[ToolSpec], provider: OpenAIProvider) -> float:
    """ns to build and encode the OpenAI request body for ``history`` (median of a few)."""
    request = ModelRequest(model="bench", system=SYSTEM_PROMPT, messages=history, tools=tools)
    repeats = max(2, min(200, 100_000 // max(1, len(history))))
    samples = []
    for _ in range(5):
        began = time.perf_counter_ns()
        for _ in range(repeats):
            orjson.dumps(provider.payload(request))
        samples.append((time.perf_counter_ns() - began) / repeats)
    return statistics.median(samples)


async def measure_overhead(
    workspace: Path, iterations: int, repetitions: int, warmup: int, sizes: Sequence[int]
) -> Overhead:
    store = MemoryStore()
    tools = Tools()
    kernel = scripted_kernel(store, tools, iterations)
    sink = Sink()
    emit = progress(sink)
    got = Overhead(history={size: history_of(size) for size in sizes})
    for size in sizes:
        got.runs[size] = []
    for index in range(warmup + repetitions):
        print(f"  overhead: repetition {index + 1}/{warmup + repetitions}", file=sys.stderr)
        for size in sizes:
            session_id = await prefill(store, workspace, got.history[size])
            gc.collect()
            times = await one_scripted_run(kernel, session_id, iterations, emit)
            if index >= warmup:
                got.runs[size].append(times)
            await store.delete(session_id)
    got.progress_frames, got.progress_bytes = sink.frames, sink.bytes
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="bench", model="bench")
    try:
        for size in sizes:  # what the first iteration would send: the history and the prompt
            session_id = await prefill(store, workspace, got.history[size])
            await store.append(session_id, [MessageInput(role=Role.USER, content="Where is it?")])
            history = await store.history(session_id)
            request = ModelRequest(
                model="bench", system=SYSTEM_PROMPT, messages=history, tools=tools.specs
            )
            got.body_bytes[size] = len(orjson.dumps(provider.payload(request)))
            got.encode_ns[size] = time_body(history, tools.specs, provider)
            gc.disable()
            try:
                got.encode_ns_no_gc[size] = time_body(history, tools.specs, provider)
            finally:
                gc.enable()
            await store.delete(session_id)
    finally:
        await provider.aclose()
    return got


# -- concurrent runs against the loopback endpoint -----------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    openai_url: str
    connections: Callable[[], Awaitable[int]]  # how many it has accepted so far
    pid: int | None = None  # when it runs in a process of its own

    def cpu(self) -> float:
        """CPU seconds the endpoint's own process has used so far (NaN when it has none)."""
        if self.pid is None:
            return math.nan
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return math.nan
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def counter(server: BenchEndpoint) -> Callable[[], Awaitable[int]]:
    async def connections() -> int:
        return server.connections

    return connections


@contextlib.asynccontextmanager
async def endpoint(placement: str) -> AsyncIterator[Endpoint]:
    """A running ``BenchEndpoint`` placed as asked."""
    if placement == "same loop":
        async with BenchEndpoint(latency=LATENCY) as server:
            yield Endpoint(server.openai_url, counter(server))
        return
    if placement == "thread":
        with BenchEndpoint.in_thread(latency=LATENCY) as server:
            yield Endpoint(server.openai_url, counter(server))
        return
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "model_endpoint.py"),
        "--latency",
        str(LATENCY),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None

    async def connections() -> int:
        stdin.write(b"connections\n")
        await stdin.drain()
        return int(await stdout.readline())

    try:
        port = int(await stdout.readline())
        yield Endpoint(f"http://127.0.0.1:{port}/v1", connections, child.pid)
    finally:
        stdin.close()  # the endpoint stops when its stdin closes
        try:
            await asyncio.wait_for(child.wait(), 10)
        except TimeoutError:
            child.kill()
            await child.wait()


@dataclass
class Concurrency:
    single: dict[str, list[int]] = field(default_factory=dict)  # ns per run alone
    together: dict[str, list[int]] = field(default_factory=dict)  # ns for all of them
    cpu: dict[str, list[float]] = field(default_factory=dict)  # process CPU s, concurrent round
    endpoint_cpu: dict[str, list[float]] = field(default_factory=dict)  # its own process's
    connections: dict[str, list[int]] = field(default_factory=dict)  # opened, concurrent round


class Runner(ABC):
    """Runs of two model calls (a tool call, then an answer), alone or many at once."""

    @abstractmethod
    async def prepare(self, count: int) -> list[str]:
        """What each of ``count`` runs needs (untimed)."""

    @abstractmethod
    async def run(self, key: str) -> None: ...

    async def alone(self) -> int:
        [key] = await self.prepare(1)
        began = time.perf_counter_ns()
        await self.run(key)
        return time.perf_counter_ns() - began

    async def together(self, count: int) -> tuple[int, float]:
        keys = await self.prepare(count)
        gc.collect()
        cpu, began = time.process_time(), time.perf_counter_ns()
        await asyncio.gather(*(self.run(key) for key in keys))
        return time.perf_counter_ns() - began, time.process_time() - cpu


class HttpKernel(Runner):
    """A kernel whose provider is the OpenAI one, against ``base_url``, over a shared client."""

    def __init__(self, workspace: Path, base_url: str, client: httpx.AsyncClient) -> None:
        self.store = MemoryStore()
        self.workspace = workspace
        self.tools = Tools()
        provider_config = config({"type": "openai", "model": "bench-model", "baseUrl": base_url})

        def provider(settings: Any) -> Provider:
            return make_provider(settings, client, environ={"OPENAI_API_KEY": "bench-key"})

        self.kernel = Kernel(
            self.store,
            config=lambda workspace: provider_config,
            providers=provider,
            tools=fixed_tools(self.tools),
            memory=load_memory,
        )
        self.emit = progress(Sink())

    async def prepare(self, count: int) -> list[str]:
        params = CreateSessionParams()
        uri = self.workspace.as_uri()
        return [(await self.store.create(params, uri)).session_id for _ in range(count)]

    async def run(self, key: str) -> None:
        params = RunParams(session_id=key, prompt=PROMPT, max_iterations=2)
        result = await self.kernel.run(params, self.emit)
        if result.iterations != 2 or result.stop_reason is not StopReason.END_TURN:
            raise unexpected(result)


class HttpOnly(Runner):
    """The floor: the same two streamed requests per run over the shared client, each answer's
    lines read and their JSON decoded, and nothing else."""

    def __init__(self, base_url: str, client: httpx.AsyncClient) -> None:
        self.url = base_url + "/chat/completions"
        self.client = client
        self.headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "authorization": "Bearer bench-key",
        }
        tools = openai_tools(Tools().specs)
        first = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": PROMPT}]
        function = {"name": "read_file", "arguments": '{"path": "README.md"}'}
        call = {"id": "call_1", "type": "function", "function": function}
        second = [
            *first,
            {"role": "assistant", "content": "Let me read the file first.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": FILE_TEXT},
        ]
        self.bodies = [
            orjson.dumps(
                {
                    "model": "bench-model",
                    "messages": messages,
                    "tools": tools,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            for messages in (first, second)
        ]

    async def prepare(self, count: int) -> list[str]:
        return [str(index) for index in range(count)]

    async def run(self, key: str) -> None:
        for body in self.bodies:
            async with self.client.stream(
                "POST", self.url, content=body, headers=self.headers
            ) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        orjson.loads(line[6:])


def http_client() -> httpx.AsyncClient:
    """The shared client, as the server makes it (``make_client``): room for every run at once;
    idle connections are kept for a minute, so that they outlive the other columns' rounds (the
    server keeps them 15 s)."""
    return make_client(200, keepalive=60.0)


async def measure_concurrency(
    workspace: Path, rounds: int, singles: int, placements: Sequence[str]
) -> Concurrency:
    """Each placement of the endpoint for tether's runs, then the floor (endpoint in a process)."""
    got = Concurrency()
    async with contextlib.AsyncExitStack() as stack:
        runners: dict[str, Runner] = {}
        endpoints: dict[str, Endpoint] = {}
        for placement in (*placements, HTTP_ONLY):
            where = "process" if placement == HTTP_ONLY else placement
            endpoints[placement] = await stack.enter_async_context(endpoint(where))
            base_url = endpoints[placement].openai_url
            client = await stack.enter_async_context(http_client())
            if placement == HTTP_ONLY:
                runners[placement] = HttpOnly(base_url, client)
            else:
                runners[placement] = HttpKernel(workspace, base_url, client)
            got.single[placement], got.together[placement], got.cpu[placement] = [], [], []
            got.endpoint_cpu[placement], got.connections[placement] = [], []
        for runner in runners.values():  # connections opened, code paths warm
            await runner.alone()
            await runner.together(CONCURRENT)
        for index in range(rounds):
            print(f"  concurrency: round {index + 1}/{rounds}", file=sys.stderr)
            for placement, runner in runners.items():
                for _ in range(singles):
                    got.single[placement].append(await runner.alone())
                model = endpoints[placement]
                endpoint_cpu, connections = model.cpu(), await model.connections()
                wall, cpu = await runner.together(CONCURRENT)
                got.together[placement].append(wall)
                got.cpu[placement].append(cpu)
                got.endpoint_cpu[placement].append(model.cpu() - endpoint_cpu)
                got.connections[placement].append(await model.connections() - connections)
    return got


# -- profiles ------------------------------------------------------------------------------------


PROFILES = ("setup", "iterations", "concurrent")


async def profile(kind: str, workspace: Path, iterations: int, top: int) -> None:
    """cProfile of 20 scripted runs at 1,000 messages, whole (``setup``) or from their first
    iteration on (``iterations``), or of one round of concurrent runs against the endpoint in its
    own process (``concurrent``). Slows everything down several times: read the shares."""
    profiler = cProfile.Profile()
    if kind == "concurrent":
        async with endpoint("process") as model, http_client() as client:
            runner = HttpKernel(workspace, model.openai_url, client)
            await runner.together(CONCURRENT)
            profiler.enable()
            await runner.together(CONCURRENT)
            profiler.disable()
    else:
        store = MemoryStore()
        kernel = scripted_kernel(store, Tools(), iterations)
        emit = progress(Sink())
        measuring = False

        def profiled(params: ProgressParams) -> None:
            if measuring and isinstance(params.event, IterationStarted):
                if params.event.iteration == 1:
                    profiler.enable()
            emit(params)
            if isinstance(params.event, RunFinished):
                profiler.disable()

        history = history_of(1_000)
        for index in range(23):
            session_id = await prefill(store, workspace, history)
            measuring = index >= 3 and kind == "iterations"
            if index >= 3 and kind == "setup":
                profiler.enable()
            await one_scripted_run(kernel, session_id, iterations, profiled)
            profiler.disable()
            await store.delete(session_id)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(short_paths(out.getvalue()))


def short_paths(text: str) -> str:
    """Paths as ``package/module.py``: site-packages, tether's sources and the stdlib cut off."""
    prefixes = {*site.getsitepackages(), str(ROOT / "server"), sysconfig.get_paths()["stdlib"]}
    for prefix in sorted(prefixes, key=len, reverse=True):
        text = text.replace(prefix + os.sep, "")
    return text


# -- report --------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def per_size(
    got: Overhead, sizes: Sequence[int], pick: Callable[[RunTimes], float]
) -> dict[int, float]:
    """µs: the median over the runs at each size."""
    return {size: median([pick(r) for r in got.runs[size]]) / 1e3 for size in sizes}


def overhead_report(got: Overhead, sizes: Sequence[int], iterations: int) -> list[str]:
    kb = {size: got.body_bytes[size] / 1024 for size in sizes}
    loop = per_size(got, sizes, lambda r: r.loop)
    whole = per_size(got, sizes, lambda r: r.whole)
    rows: list[tuple[str, dict[int, float]]] = [
        ("request body sent to the model (KB)", kb),
        ("run setup: kernel.run to iteration 1 (µs)", per_size(got, sizes, lambda r: r.setup)),
        ("iteration 1 (µs)", per_size(got, sizes, lambda r: r.first)),
        (f"iterations 2-{iterations}: mean (µs)", per_size(got, sizes, lambda r: r.later)),
        (f"per iteration, all {iterations} (µs)", loop),
        ("  / KB sent (µs/KB)", {s: loop[s] / kb[s] for s in sizes}),
        ("whole run incl. setup / iterations (µs)", whole),
        ("  / KB sent (µs/KB)", {s: whole[s] / kb[s] for s in sizes}),
        ("reference: OpenAI body build+encode (µs)", {s: got.encode_ns[s] / 1e3 for s in sizes}),
        ("  the same, collector off (µs)", {s: got.encode_ns_no_gc[s] / 1e3 for s in sizes}),
    ]
    header = f"{'':44}" + "".join(f"{f'{size:,} msgs':>14}" for size in sizes)
    lines = [header, "-" * len(header)]
    lines += [
        f"{label:44}" + "".join(f"{values[size]:>14.1f}" for size in sizes)
        for label, values in rows
    ]
    return lines


def concurrency_report(got: Concurrency) -> list[str]:
    columns = list(got.single)
    single = {p: median(got.single[p]) / 1e6 for p in columns}
    together = {p: median(got.together[p]) / 1e6 for p in columns}
    cpu = {p: median(got.cpu[p]) * 1e3 / CONCURRENT for p in columns}
    endpoint_cpu = {p: median(got.endpoint_cpu[p]) * 1e3 / CONCURRENT for p in columns}
    connections = {p: median(got.connections[p]) / CONCURRENT for p in columns}
    rows = [
        ("one run alone: median (ms)", single, "{:>12.1f}"),
        (f"{CONCURRENT} concurrent runs: median wall (ms)", together, "{:>12.1f}"),
        (
            f"{CONCURRENT} concurrent / one alone",
            {p: together[p] / single[p] for p in columns},
            "{:>11.2f}x",
        ),
        ("bench process CPU per concurrent run (ms)", cpu, "{:>12.2f}"),
        ("endpoint process CPU per concurrent run (ms)", endpoint_cpu, "{:>12.2f}"),
        ("connections opened per concurrent run", connections, "{:>12.2f}"),
    ]
    header = f"{'endpoint in (tether) / floor':44}" + "".join(f"{p:>12}" for p in columns)
    lines = [header, "-" * len(header)]
    lines += [
        f"{label:44}"
        + "".join(
            f"{'-':>12}" if math.isnan(values[p]) else form.format(values[p]) for p in columns
        )
        for label, values, form in rows
    ]
    return lines


def growth(values: dict[int, float], kb: dict[int, float], sizes: Sequence[int]) -> str:
    """How ``values`` grow from size to size against the bytes sent, and whether they outgrow
    them (µs per KB rising)."""
    steps = [
        f"x{values[b] / values[a]:.2f} vs x{kb[b] / kb[a]:.1f}"
        for a, b in itertools.pairwise(sizes)
    ]
    ok = all(values[b] / kb[b] <= values[a] / kb[a] for a, b in itertools.pairwise(sizes))
    return ", ".join(steps) + f"  {verdict(ok)}"


def targets_report(
    overhead: Overhead | None, sizes: Sequence[int], concurrency: Concurrency | None
) -> list[str]:
    lines = ["targets (report only, nothing is asserted):"]
    if overhead is not None:
        loop = per_size(overhead, sizes, lambda r: r.loop)
        whole = per_size(overhead, sizes, lambda r: r.whole)
        if 1_000 in sizes:
            for label, values in (("iterations only", loop), ("run setup included", whole)):
                at = values[1_000]
                lines.append(
                    f"  per iteration at 1,000 messages <= {TARGET_ITERATION_US:.0f} µs, {label}: "
                    f"{at:.0f} µs  {verdict(at <= TARGET_ITERATION_US)}"
                )
        if len(sizes) > 1:
            kb = {size: overhead.body_bytes[size] / 1024 for size in sizes}
            encode = {size: overhead.encode_ns[size] / 1e3 for size in sizes}
            for label, values in (
                ("iterations only", loop),
                ("run setup included", whole),
                ("(reference) OpenAI body build+encode", encode),
            ):
                lines.append(
                    f"  growing no faster than the bytes sent, {label}: {growth(values, kb, sizes)}"
                )
    if concurrency is not None:
        for placement in concurrency.single:
            r = median(concurrency.together[placement]) / median(concurrency.single[placement])
            if placement == HTTP_ONLY:
                lines.append(f"  (floor, not a target) {placement}, endpoint in process: {r:.2f}x")
                continue
            lines.append(
                f"  {CONCURRENT} concurrent runs <= {TARGET_CONCURRENT_RATIO}x one run, "
                f"endpoint in {placement}: {r:.2f}x  {verdict(r <= TARGET_CONCURRENT_RATIO)}"
            )
    return lines


async def bench(args: argparse.Namespace, workspace: Path) -> int:
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    sizes = tuple(args.sizes)
    overhead = concurrency = None
    if not args.skip_overhead:
        overhead = await measure_overhead(
            workspace, args.iterations, args.repetitions, args.warmup, sizes
        )
    if not args.skip_concurrency:
        concurrency = await measure_concurrency(
            workspace, args.rounds, args.singles, tuple(args.placements)
        )
    print(
        f"tether kernel bench: python {platform.python_version()}, pydantic "
        f"{version('pydantic')}, httpx {version('httpx')}, orjson {version('orjson')}, "
        f"{os.cpu_count()} cpus, {platform.machine()}; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; took {time.perf_counter() - started:.0f} s"
    )
    if overhead is not None:
        print(
            f"\noverhead per iteration, in process (scripted provider, no model time): "
            f"{args.repetitions} runs of {args.iterations} iterations per history size after "
            f"{args.warmup} warm-up, medians; {overhead.progress_frames} progress frames "
            f"({overhead.progress_bytes / 1024:.0f} KB) encoded; context.max_tokens "
            f"{CONTEXT_MAX_TOKENS or 'unset'}\n"
        )
        print("\n".join(overhead_report(overhead, sizes, args.iterations)))
    if concurrency is not None:
        print(
            f"\n{CONCURRENT} concurrent runs of 2 iterations (tool call, answer) on {CONCURRENT} "
            f"sessions, OpenAI provider over one httpx client, endpoint latency "
            f"{LATENCY * 1e3:.0f} ms per answer: {args.rounds} rounds of {args.singles} single "
            "runs and one concurrent round per column, after one of each; columns: where the "
            f"endpoint runs for tether's runs, and {HTTP_ONLY!r}, the same two streamed requests "
            "per run with nothing but the httpx client (endpoint in a process)\n"
        )
        print("\n".join(concurrency_report(concurrency)))
    print()
    print("\n".join(targets_report(overhead, sizes, concurrency)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=10, help="iterations per scripted run")
    parser.add_argument("--repetitions", type=int, default=20, help="timed runs per size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per size first")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="histories")
    parser.add_argument("--rounds", type=int, default=5, help="concurrent rounds per placement")
    parser.add_argument("--singles", type=int, default=3, help="single runs per round")
    parser.add_argument(
        "--placements", nargs="+", default=list(PLACEMENTS), choices=PLACEMENTS, metavar="WHERE"
    )
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--skip-concurrency", action="store_true")
    parser.add_argument(
        "--context-max-tokens", type=int, help="context.max_tokens of the runs (a history window)"
    )
    parser.add_argument("--profile", choices=PROFILES, help="print a profile instead")
    parser.add_argument("--top", type=int, default=25, help="functions a profile lists")
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error("--iterations must be at least 2 (tool calls, then an answer)")
    global CONTEXT_MAX_TOKENS
    CONTEXT_MAX_TOKENS = args.context_max_tokens
    with tempfile.TemporaryDirectory(prefix="tether-kernel-bench-") as tmp:
        workspace = Path(tmp)
        if args.profile:
            asyncio.run(profile(args.profile, workspace, args.iterations, args.top))
            return 0
        return asyncio.run(bench(args, workspace))


if __name__ == "__main__":
    sys.exit(main())
