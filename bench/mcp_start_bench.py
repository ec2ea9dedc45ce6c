"""The first streamed chunk of a session with one stdio MCP server, against one without, through
``tether acp``.

A started ``tether acp`` (scripted model answering at once, warmed by one prompt) makes sessions
in turn: one with no MCP server, one with ``tests/fakes/mcp_server.py`` (the official ``mcp``
SDK's server on stdio) as its own. ``--wait`` seconds after ``session/new`` is answered it is
sent a prompt, and the time from sending it to the first ``agent_message_chunk`` is taken; the
session is then closed (which stops its server). Medians of ``--sessions`` of each kind.

``--before PATH`` adds ``tether acp`` from another source tree (``PYTHONPATH``; ``git archive
REV server | tar -x -C /tmp/before``, then ``--before /tmp/before/server``), its sessions
alternating with this tree's. A report: nothing is asserted.

    .venv/bin/python bench/mcp_start_bench.py [--wait 1.0] [--sessions 10] [--before PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from acp_bench import Agent

HERE = Path(__file__).resolve().parent
FAKE = HERE.parent / "tests" / "fakes" / "mcp_server.py"
TETHER_ACP = [sys.executable, "-m", "tether", "acp"]
INITIALIZE = {"protocolVersion": 1, "clientCapabilities": {}}
GOAL_MS = 50.0
SERVER = {"name": "fake", "command": sys.executable, "args": [str(FAKE)], "env": []}


def first_chunk(agent: Agent, session_id: str) -> float:
    """ms from sending a prompt to the first ``agent_message_chunk``; reads on to its answer."""
    agent._next += 1
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
    request = {"jsonrpc": "2.0", "id": agent._next, "method": "session/prompt", "params": prompt}
    began = time.perf_counter_ns()
    os.write(agent._in, orjson.dumps(request) + b"\n")
    chunk: float | None = None
    while True:
        message = orjson.loads(agent._line())
        if message.get("id") == agent._next:
            if "result" not in message:
                raise RuntimeError(f"the prompt failed: {message}")
            assert chunk is not None, "no chunk before the answer"
            return chunk
        update = message.get("params", {}).get("update", {})
        if chunk is None and update.get("sessionUpdate") == "agent_message_chunk":
            chunk = (time.perf_counter_ns() - began) / 1e6


def one_session(agent: Agent, project: Path, servers: list[Any], wait: float) -> float:
    session = agent.call("session/new", {"cwd": str(project), "mcpServers": servers})
    session_id = session["result"]["sessionId"]  # type: ignore[index]
    time.sleep(wait)
    try:
        return first_chunk(agent, session_id)
    finally:
        agent.call("session/close", {"sessionId": session_id})


def start_agent(home: Path, project: Path, path: str | None) -> Agent:
    agent = Agent(TETHER_ACP, project, home, path)
    agent.call("initialize", INITIALIZE)
    one_session(agent, project, [], 0.0)  # the kernel's first run: imports, caches
    return agent


def configure(home: Path, turns: int) -> None:
    script = home / "script.json"
    script.write_text(json.dumps([{"text": "Hello."}] * turns))
    config = home / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[provider]\ntype = "scripted"\nscript = {json.dumps(str(script))}\n')


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=10, help="sessions of each kind")
    parser.add_argument("--wait", type=float, default=1.0, help="seconds before the prompt")
    parser.add_argument("--before", help="a source tree (its server/) to run tether acp from too")
    args = parser.parse_args(argv)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    trees = {
        "tether": None,
        **({"before": str(Path(args.before).resolve())} if args.before else {}),
    }
    samples: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="tether-mcp-start-") as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / "project"
        home.mkdir(), project.mkdir()
        configure(home, 2 * args.sessions + 4)  # every agent plays the same script from its start
        agents = {name: start_agent(home, project, path) for name, path in trees.items()}
        try:
            for index in range(args.sessions):
                print(f"  session {index + 1}/{args.sessions}", file=sys.stderr)
                for name, agent in agents.items():
                    for with_mcp in (False, True):
                        servers = [SERVER] if with_mcp else []
                        chunk = one_session(agent, project, servers, args.wait)
                        samples.setdefault((name, with_mcp), []).append(chunk)
        finally:
            for agent in agents.values():
                agent.kill()
    print(
        f"tether MCP start bench: python {platform.python_version()}, {os.cpu_count()} cpus; "
        f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; prompt "
        f"{args.wait:g} s after session/new; {args.sessions} sessions each, medians; took "
        f"{time.perf_counter() - started:.0f} s"
    )
    print()
    print(f"{'first agent_message_chunk (ms)':32}{'no MCP':>10}{'1 stdio MCP':>14}{'added':>10}")
    for name in trees:
        none, one = (statistics.median(samples[(name, mcp)]) for mcp in (False, True))
        verdict = "met" if one - none <= GOAL_MS else "MISSED"
        print(
            f"{name:32}{none:>10.1f}{one:>14.1f}{one - none:>10.1f}"
            f"  (goal + <= {GOAL_MS:g}: {verdict})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
