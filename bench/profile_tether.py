"""Where tether's request time goes: ``tether serve`` under cProfile, driven by the bench client.

    .venv/bin/python bench/profile_tether.py get      # sequential session/get
    .venv/bin/python bench/profile_tether.py pipelined
    .venv/bin/python bench/profile_tether.py append   # sequential 10 KB session/append

Prints the functions of the server's request path by own time and by cumulative time (start-up is
in the profile too: it shows up as imports, ``compile`` and attrs class building, which are not
per request). cProfile slows the server down several times; read the shares, not the µs.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import tempfile
from pathlib import Path

from raw_client import RawClient
from rpc_bench import checked, initialize_params, text_of

REQUEST_PATH = r"tether/|pygls/protocol|pydantic/main|copy\.py|asyncio/(base_events|events)"


def drive(kind: str, count: int, workspace: Path, profile: Path) -> None:
    argv = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "tether", "serve"]
    client = RawClient(argv, stderr=sys.stderr)
    try:
        client.call("initialize", initialize_params(workspace))
        client.notify("initialized", {})
        session_id = client.call("session/create", {})["sessionId"]
        if kind == "append":
            message = {"role": "user", "content": text_of(10 * 1024)}
            params = {"sessionId": session_id, "messages": [message]}
            checked(client.round_trips(client.request_frames("session/append", params, count))[1])
        elif kind == "pipelined":
            frames = client.request_frames("session/get", {"sessionId": session_id}, count)
            checked(client.pipelined(frames)[1])
        else:
            frames = client.request_frames("session/get", {"sessionId": session_id}, count)
            checked(client.round_trips(frames)[1])
    finally:
        client.close()  # cProfile writes its file when the server exits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("kind", choices=["get", "pipelined", "append"])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-profile-") as tmp:
        profile = Path(tmp) / "tether.prof"
        drive(args.kind, args.requests, Path(tmp), profile)
        stats = pstats.Stats(str(profile))
        stats.sort_stats("tottime").print_stats(REQUEST_PATH, args.top)
        stats.sort_stats("cumulative").print_stats(REQUEST_PATH, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
