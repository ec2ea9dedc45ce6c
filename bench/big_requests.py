"""Big valid requests to a real ``tether serve``: its peak memory, and how long a small request
waits meanwhile.

    .venv/bin/python bench/big_requests.py            # both cases, a fresh server for each

Cases (memory store, the default):

- ``create``: ``session/create`` whose ``systemPrompt`` is 200,000,000 ASCII characters (the frame
  is ~200 MB; the server runs with ``TETHER_MAX_FRAME_BYTES`` at 256 MiB to accept it);
- ``append``: ``session/append`` of 100,000 user messages of ~400 characters (a ~44 MB frame,
  under the default limit).

For each: the server's resident memory before (``VmRSS``) and its peak (``VmHWM``, from
``/proc/PID/status``), the peak over the baseline as a multiple of the frame, the time to the big
request's answer, and the latency of ``session/get`` requests sent one after the other from the
moment the big frame has been written until its answer arrives. A report: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.wire_fuzz import WireClient, memory_kib

from tether.protocol.framing import encode_frame

SERVER = [sys.executable, "-m", "tether", "serve"]
MiB = 1024 * 1024


def create_params(size: int) -> dict[str, Any]:
    return {"title": "big", "systemPrompt": ("All work and no play. " * (size // 22 + 1))[:size]}


def append_params(session_id: str, count: int) -> dict[str, Any]:
    text = "a line of a conversation, long enough to be typical of one. " * 6
    return {
        "sessionId": session_id,
        "messages": [
            {"role": "user" if n % 2 else "assistant", "content": f"{n}: {text}"}
            for n in range(count)
        ],
    }


async def measure(case: str, size: int, workspace: Path) -> dict[str, Any]:
    env = {"TETHER_MAX_FRAME_BYTES": str(256 * MiB)}
    import os

    process = await asyncio.create_subprocess_exec(
        *SERVER,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    assert process.stdin is not None and process.stdout is not None
    client = WireClient(process.stdout, process.stdin)
    await client.call("initialize", {"workspaceFolders": [{"uri": workspace.as_uri()}]})
    small = (await client.call("session/create", {}))["sessionId"]
    for _ in range(200):
        await client.call("session/get", {"sessionId": small})
    target = (await client.call("session/create", {}))["sessionId"]
    params = create_params(size) if case == "create" else append_params(target, size)
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": "big", "method": f"session/{case}", "params": params}
    )
    del params
    before = memory_kib(process.pid)
    answer = client.expect("big")
    started = time.perf_counter()
    client.writer.write(encode_frame(body))
    await client.writer.drain()
    written = time.perf_counter()
    latencies: list[float] = []
    while not answer.done():
        sent = time.perf_counter()
        await client.call("session/get", {"sessionId": small})
        latencies.append((time.perf_counter() - sent) * 1000)
    reply = await answer
    finished = time.perf_counter()
    peak = memory_kib(process.pid)
    assert "result" in reply, reply.get("error")
    client.writer.write(encode_frame(b'{"jsonrpc":"2.0","id":"s","method":"shutdown"}'))
    client.writer.write(encode_frame(b'{"jsonrpc":"2.0","method":"exit"}'))
    await process.wait()
    grown = (peak["VmHWM"] - before["VmRSS"]) * 1024
    return {
        "case": case,
        "frame_mb": len(body) / MiB,
        "rss_before_mb": before["VmRSS"] / 1024,
        "peak_mb": peak["VmHWM"] / 1024,
        "peak_over_frame": grown / len(body),
        "write_s": written - started,
        "answer_s": finished - started,
        "gets": len(latencies),
        "get_p50_ms": statistics.median(latencies) if latencies else 0.0,
        "get_max_ms": max(latencies) if latencies else 0.0,
    }


async def main(args: argparse.Namespace) -> None:
    cases = [("create", args.create_bytes), ("append", args.append_messages)]
    with tempfile.TemporaryDirectory() as scratch:
        for case, size in cases:
            if args.only and case != args.only:
                continue
            r = await measure(case, size, Path(scratch))
            print(
                f"{r['case']:7} frame {r['frame_mb']:7.1f} MiB"
                f" | RSS before {r['rss_before_mb']:6.1f} MiB, peak {r['peak_mb']:7.1f} MiB,"
                f" peak - before = {r['peak_over_frame']:.2f}x the frame"
                f" | written in {r['write_s']:.2f} s, answered after {r['answer_s']:.2f} s"
                f" | {r['gets']} session/get meanwhile: median {r['get_p50_ms']:.1f} ms,"
                f" max {r['get_max_ms']:.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--create-bytes", type=int, default=200_000_000)
    parser.add_argument("--append-messages", type=int, default=100_000)
    parser.add_argument("--only", choices=["create", "append"])
    asyncio.run(main(parser.parse_args()))
