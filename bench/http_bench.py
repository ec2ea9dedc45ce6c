"""What model calls cost tether's process: the HTTP transport alone, and many runs at once through
the real server.

1. **Transport**: ``--concurrent`` (100) streamed requests at once against the loopback endpoint
   (``model_endpoint.py`` in a process of its own, ``--latency`` 50 ms before each answer), each
   answer's SSE lines read and their JSON decoded, over: tether's client as a provider sends on
   it (``Client.post_direct``: straight to aiohttp's pool), the same client through its httpx API
   ("tether httpx": what a client with cookies, auth or hooks takes), httpx with its default
   transport as tether used it before (``max_connections=200``, httpx's default 20 kept-alive
   connections for 5 s), httpx with every connection kept alive, and aiohttp alone (the floor).
   The clients other than "httpx before" keep idle connections for 5 minutes, so that they
   outlive the other clients' rounds.
   CPU time of the bench process per request, wall time of the batch, connections the endpoint
   accepted per request.
2. **Runs through the real server**: one ``tether serve`` per ``--server LABEL=PYTHON`` (the
   interpreter whose ``tether`` runs; default this one), its provider the endpoint; a run is two
   iterations (a ``read_file`` call, then a ~55-word answer). One run alone (median of
   ``--singles`` per round) against ``--concurrent`` runs at once on as many sessions; CPU of the
   server process per run, connections opened per run.

Clients and servers alternate within each round so outside load falls on all alike; medians over
``--rounds`` after one warm-up of each. It prints a report and asserts nothing::

    .venv/bin/python bench/http_bench.py
    .venv/bin/python bench/http_bench.py --server after=.venv/bin/python \\
        --server before=/path/to/main/.venv/bin/python    # tether before/after, same run
    .venv/bin/python bench/http_bench.py --skip-transport --profile /tmp/stacks.txt

``--profile`` runs the first server under ``sample_serve.py`` (CPU samples, not cProfile) and
reports where its CPU went; the sampling costs it a few percent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import aiohttp
import httpx
import orjson
from multidict import CIMultiDict

from sample_serve import report
from served import SYSTEM_PROMPT, Endpoint, Served, endpoint
from tether.providers.client import Client as TetherClient
from tether.providers.client import make_client

PROMPT = "What is this project?"
KEEPALIVE = 300.0  # s: idle connections outlive the other clients' rounds
FILE_TEXT = "# tether\n\nAn agent backend that editors spawn over stdio.\n" * 6
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
BODY = orjson.dumps(
    {
        "model": "bench-model",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": PROMPT},
        ],
        "tools": TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
)
HEADERS = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "authorization": "Bearer bench-key",
}


# -- 1. the transport ------------------------------------------------------------------------


class Client(ABC):
    """One streamed request: POST the body, read every SSE line, decode each event's JSON."""

    @abstractmethod
    async def request(self, url: str) -> int:
        """The events read."""

    @abstractmethod
    async def aclose(self) -> None: ...


class Httpx(Client):
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def request(self, url: str) -> int:
        events = 0
        async with self.client.stream("POST", url, content=BODY, headers=HEADERS) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    orjson.loads(line[6:])
                    events += 1
        return events

    async def aclose(self) -> None:
        await self.client.aclose()


class Direct(Client):
    """tether's client as a provider sends on it: ``Client.post_direct``, straight to aiohttp."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        assert isinstance(client, TetherClient)
        self.client = client
        self.headers = CIMultiDict(httpx.Headers(client.headers).multi_items())
        self.headers.update(HEADERS)
        self.limits = aiohttp.ClientTimeout(sock_connect=60.0, sock_read=60.0, connect=60.0)

    async def request(self, url: str) -> int:
        events = 0
        response = await self.client.post_direct(httpx.URL(url), BODY, self.headers, self.limits)
        assert response is not None, "the direct POST was not taken"
        try:
            if not response.is_success:
                raise RuntimeError(f"HTTP {response.status_code}")
            rest = b""
            async for chunk in response.aiter_bytes():
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()  # the start of a line the next chunk ends
                for line in lines:
                    if line.startswith(b"data: {"):
                        orjson.loads(line[6:])
                        events += 1
        finally:
            await response.aclose()
        return events

    async def aclose(self) -> None:
        await self.client.aclose()


class Aiohttp(Client):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.session: aiohttp.ClientSession | None = None

    async def request(self, url: str) -> int:
        if self.session is None:
            connector = aiohttp.TCPConnector(limit=self.limit, keepalive_timeout=KEEPALIVE)
            self.session = aiohttp.ClientSession(connector=connector)
        events = 0
        async with self.session.post(url, data=BODY, headers=HEADERS) as response:
            response.raise_for_status()
            async for line in response.content:
                if line.startswith(b"data: {"):
                    orjson.loads(line[6:])
                    events += 1
        return events

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


def clients(limit: int) -> dict[str, Callable[[], Client]]:
    return {
        "tether": lambda: Direct(make_client(limit, keepalive=KEEPALIVE)),
        "tether httpx": lambda: Httpx(make_client(limit, keepalive=KEEPALIVE)),
        "httpx before": lambda: Httpx(
            httpx.AsyncClient(limits=httpx.Limits(max_connections=limit))  # keeps 20, for 5 s
        ),
        "httpx kept": lambda: Httpx(
            httpx.AsyncClient(
                limits=httpx.Limits(
                    max_connections=limit,
                    max_keepalive_connections=limit,
                    keepalive_expiry=KEEPALIVE,
                )
            )
        ),
        "aiohttp": lambda: Aiohttp(limit),
    }


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)  # s, the whole batch (or one alone)
    cpu: list[float] = field(default_factory=list)  # s of CPU per request or run
    endpoint_cpu: list[float] = field(default_factory=list)
    connections: list[float] = field(default_factory=list)  # opened per request or run
    single: list[float] = field(default_factory=list)  # s, one run alone


async def batch(client: Client, url: str, count: int, model: Endpoint, got: Samples) -> None:
    gc.collect()
    opened, model_cpu = await model.connections(), model.cpu()
    cpu, began = time.process_time(), time.perf_counter()
    events = await asyncio.gather(*(client.request(url) for _ in range(count)))
    got.wall.append(time.perf_counter() - began)
    got.cpu.append((time.process_time() - cpu) / count)
    got.endpoint_cpu.append((model.cpu() - model_cpu) / count)
    got.connections.append((await model.connections() - opened) / count)
    if min(events) < 2:
        raise RuntimeError(f"a stream read only {min(events)} events")


async def measure_transport(args: argparse.Namespace) -> dict[str, Samples]:
    got: dict[str, Samples] = {}
    async with endpoint(args.latency) as model, contextlib.AsyncExitStack() as stack:
        url = model.openai_url + "/chat/completions"
        made: dict[str, Client] = {}
        for name, make in clients(args.limit).items():
            made[name] = make()
            stack.push_async_callback(made[name].aclose)
            got[name] = Samples()
            await batch(made[name], url, args.concurrent, model, Samples())  # warm-up
        for index in range(args.rounds):
            print(f"  transport: round {index + 1}/{args.rounds}", file=sys.stderr)
            for name, client in made.items():
                await batch(client, url, args.concurrent, model, got[name])
    return got


# -- 2. runs through the real server ----------------------------------------------------------


async def runs_at_once(server: Served, model: Endpoint, count: int, got: Samples) -> None:
    sids = [await server.session() for _ in range(count)]
    gc.collect()
    opened, model_cpu, cpu = await model.connections(), model.cpu(), server.cpu()
    began = time.perf_counter()
    await asyncio.gather(*(server.run(sid, PROMPT, 2) for sid in sids))
    got.wall.append(time.perf_counter() - began)
    got.cpu.append((server.cpu() - cpu) / count)
    got.endpoint_cpu.append((model.cpu() - model_cpu) / count)
    got.connections.append((await model.connections() - opened) / count)


async def one_run(server: Served) -> float:
    sid = await server.session()
    began = time.perf_counter()
    await server.run(sid, PROMPT, 2)
    return time.perf_counter() - began


async def measure_runs(args: argparse.Namespace, workspace: Path) -> dict[str, Samples]:
    got: dict[str, Samples] = {}
    async with endpoint(args.latency) as model, contextlib.AsyncExitStack() as stack:
        servers: dict[str, Served] = {}
        for index, (label, python) in enumerate(args.server):
            servers[label] = await stack.enter_async_context(
                Served.start(
                    python,
                    workspace,
                    model.openai_url,
                    max_iterations=4,
                    sample_into=args.profile if index == 0 else None,
                )
            )
            got[label] = Samples()
            await one_run(servers[label])  # warm-up: imports, first connection
            await runs_at_once(servers[label], model, args.concurrent, Samples())
        for index in range(args.rounds):
            print(f"  runs: round {index + 1}/{args.rounds}", file=sys.stderr)
            for label, server in servers.items():
                for _ in range(args.singles):
                    got[label].single.append(await one_run(server))
                await runs_at_once(server, model, args.concurrent, got[label])
    return got


# -- report ------------------------------------------------------------------------------------


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(columns: dict[str, Samples], rows: Sequence[tuple[str, Callable[[Samples], float], str]]):
    header = f"{'':46}" + "".join(f"{name:>14}" for name in columns)
    lines = [header, "-" * len(header)]
    for label, pick, form in rows:
        lines.append(f"{label:46}" + "".join(form.format(pick(s)) for s in columns.values()))
    return lines


def transport_report(got: dict[str, Samples], concurrent: int) -> list[str]:
    floor = med(got["aiohttp"].cpu)
    return table(
        got,
        [
            (
                f"{concurrent} streams at once: median wall (ms)",
                lambda s: med(s.wall) * 1e3,
                "{:>14.1f}",
            ),
            ("CPU per request (ms)", lambda s: med(s.cpu) * 1e3, "{:>14.3f}"),
            ("  / aiohttp alone", lambda s: med(s.cpu) / floor, "{:>13.2f}x"),
            ("endpoint CPU per request (ms)", lambda s: med(s.endpoint_cpu) * 1e3, "{:>14.3f}"),
            ("connections opened per request", lambda s: med(s.connections), "{:>14.2f}"),
        ],
    )


def runs_report(got: dict[str, Samples], concurrent: int) -> list[str]:
    return table(
        got,
        [
            ("one run alone: median (ms)", lambda s: med(s.single) * 1e3, "{:>14.1f}"),
            (
                f"{concurrent} runs at once: median wall (ms)",
                lambda s: med(s.wall) * 1e3,
                "{:>14.1f}",
            ),
            (
                f"{concurrent} at once / one alone",
                lambda s: med(s.wall) / med(s.single),
                "{:>13.2f}x",
            ),
            ("server CPU per concurrent run (ms)", lambda s: med(s.cpu) * 1e3, "{:>14.2f}"),
            (
                "endpoint CPU per concurrent run (ms)",
                lambda s: med(s.endpoint_cpu) * 1e3,
                "{:>14.2f}",
            ),
            ("connections opened per concurrent run", lambda s: med(s.connections), "{:>14.2f}"),
        ],
    )


def ranges(got: dict[str, Samples]) -> str:
    return "; ".join(
        f"{name} {min(s.cpu) * 1e3:.3f}-{max(s.cpu) * 1e3:.3f}" for name, s in got.items()
    )


async def bench(args: argparse.Namespace, workspace: Path) -> None:
    started, load = time.perf_counter(), os.getloadavg()[0]
    transport = None if args.skip_transport else await measure_transport(args)
    runs = None if args.skip_runs else await measure_runs(args, workspace)
    print(
        f"tether http bench: python {platform.python_version()}, httpx {version('httpx')}, "
        f"httpx-aiohttp {version('httpx-aiohttp')}, aiohttp {version('aiohttp')}, "
        f"{os.cpu_count()} cpus; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
        f"took {time.perf_counter() - started:.0f} s; endpoint in its own process, "
        f"{args.latency * 1e3:.0f} ms before each answer; {args.rounds} rounds after a warm-up"
    )
    if transport is not None:
        print(
            f"\n1. transport: {args.concurrent} streamed requests at once (a tool-call answer, "
            f"~{len(BODY)} bytes sent), every SSE event's JSON decoded; max connections "
            f"{args.limit}\n"
        )
        print("\n".join(transport_report(transport, args.concurrent)))
        print(f"CPU per request over the rounds, min-max (ms): {ranges(transport)}")
    if runs is not None:
        print(
            f"\n2. runs through the real `tether serve`: a run is 2 iterations (read_file, then "
            f"an answer); {args.singles} single runs and one round of {args.concurrent} "
            "concurrent runs per server per round\n"
        )
        print("\n".join(runs_report(runs, args.concurrent)))
        print(f"server CPU per concurrent run over the rounds, min-max (ms): {ranges(runs)}")
        for label, samples in runs.items():
            ratios = sorted(w / med(samples.single) for w in samples.wall)
            print(f"{label}: at once / alone over the rounds: {ratios[0]:.2f}x-{ratios[-1]:.2f}x")


def server_arg(text: str) -> tuple[str, str]:
    label, _, python = text.partition("=")
    if not python:
        raise argparse.ArgumentTypeError("expected LABEL=PYTHON")
    return label, os.path.abspath(python)  # the server runs in the workspace


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.05, help="endpoint delay, seconds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--singles", type=int, default=3, help="single runs per round")
    parser.add_argument("--limit", type=int, default=200, help="max connections of each client")
    parser.add_argument(
        "--server", type=server_arg, action="append", help="LABEL=PYTHON (repeatable)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="OUT",
        help="sample the first server's CPU (sample_serve.py): stacks into OUT, then a report",
    )
    parser.add_argument("--skip-transport", action="store_true")
    parser.add_argument("--skip-runs", action="store_true")
    args = parser.parse_args(argv)
    args.server = args.server or [("tether", sys.executable)]
    with tempfile.TemporaryDirectory(prefix="tether-http-bench-") as tmp:
        workspace = Path(tmp)
        (workspace / "README.md").write_text(FILE_TEXT)
        asyncio.run(bench(args, workspace))
    if args.profile is not None and not args.skip_runs:
        print(f"\nwhere the first server's CPU went ({args.profile}):")
        print("\n".join(report(args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
