"""A hostile MCP server floods the real ``tether serve``: the server's resident memory meanwhile.

``tether serve`` runs as a client would spawn it, with the scripted provider and the hostile
fake server of the test suite (``tests/fakes/hostile_mcp_server.py``) configured. For each flood
a ``kernel/run`` makes one call whose server sends, before answering, ``--count`` messages of
about 1 KiB: log notifications (``flood``), progress notifications for the call
(``progress_flood``), or requests it never reads the answers of (``request_flood``). Then a
call whose answer is one line of ``--huge`` MiB. The bench samples ``VmRSS`` of the tether
process every 20 ms from ``/proc`` (Linux) and prints, per call, the time it took, the
resident size before it and the peak during it. It asserts nothing.

    .venv/bin/python bench/mcp_flood.py [--count 200000] [--huge 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tether.client import Connection
from tether.testing import scripted_options

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "fakes" / "hostile_mcp_server.py"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def sample(pid: int, peak: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mib(pid))
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
        except TimeoutError:
            pass


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": f"c-{name}", "name": f"h__{name}", "arguments": json.dumps(arguments)}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--huge", type=int, default=50, help="MiB of the huge answer")
    options = parser.parse_args()
    project = Path(tempfile.mkdtemp())
    calls = [
        call("flood", count=options.count),
        call("progress_flood", count=options.count),
        call("request_flood", count=options.count),
        call("huge", bytes=options.huge * 1024 * 1024),
    ]
    turns: list[dict[str, Any]] = [{"toolCalls": [c]} for c in calls] + [{"text": "done"}]
    server = {"name": "h", "command": sys.executable, "args": [str(HOSTILE)], "timeout": 300}
    script = Path(tempfile.mkdtemp()) / "script.json"
    script.write_text(json.dumps(turns))
    init = {**scripted_options(script), "tools": {"approval": "auto", "mcpServers": [server]}}
    connection = await Connection.spawn([sys.executable, "-m", "tether", "serve"])
    pid = connection.process.pid
    try:
        await connection.request(
            "initialize",
            {"workspaceFolders": [{"uri": project.as_uri()}], "initializationOptions": init},
        )
        connection.notify("initialized", {})
        session = (await connection.request("session/create", {}))["sessionId"]
        print(f"tether serve pid {pid}, idle: {rss_mib(pid):.0f} MiB resident")
        peak = [0.0]
        stop = asyncio.Event()
        sampler = asyncio.ensure_future(sample(pid, peak, stop))
        started = time.monotonic()
        result = await connection.request(
            "kernel/run", {"sessionId": session, "prompt": "flood", "maxIterations": 10}
        )
        elapsed = time.monotonic() - started
        stop.set()
        await sampler
        for record in result["toolCalls"]:
            text = record["result"][:90].replace("\n", " ")
            print(f"  {record['name']:<18} error={record['isError']!s:<5} {text}")
        print(
            f"run: {elapsed:.1f} s for {options.count} messages x 3 floods and a "
            f"{options.huge} MiB answer; tether's resident size: peak {peak[0]:.0f} MiB, "
            f"after {rss_mib(pid):.0f} MiB"
        )
    finally:
        await connection.close()


if __name__ == "__main__":
    asyncio.run(main())
