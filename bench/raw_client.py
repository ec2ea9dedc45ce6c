"""The one client every server in the bench is driven by: synchronous, raw pipes, no event loop.

A timed request is one ``write`` of a pre-encoded frame, then ``poll`` + ``read`` until the response
frame is complete; its body is split off but decoded only after the clock stops. A pipelined batch
is written by a helper thread while the calling thread reads, so neither pipe can fill up and block
both processes.
"""

from __future__ import annotations

import itertools
import math
import os
import select
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

import orjson

READ_SIZE = 1 << 16


class RpcError(Exception):
    """An error response, or a server that stopped answering."""


def frame(message: dict[str, Any]) -> bytes:
    body = orjson.dumps(message)
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class RawClient:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        stderr: IO[Any] | int | None,
        timeout: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, bufsize=0, env=env
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        os.set_blocking(self._out, False)
        self._poll = select.poll()
        self._poll.register(self._out, select.POLLIN)
        self._buffer = bytearray()
        self._ids = itertools.count(1)
        self._timeout_ms = int(timeout * 1000)

    # -- messages --------------------------------------------------------------------------------

    def request_frames(self, method: str, params: dict[str, Any], count: int) -> list[bytes]:
        """``count`` encoded requests with fresh ids, ready to be written."""
        return [
            frame({"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params})
            for _ in range(count)
        ]

    def call(self, method: str, params: dict[str, Any]) -> Any:
        (request,) = self.request_frames(method, params, 1)
        self.write(request)
        return result_of(self.read_body())

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.write(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    # -- timing ----------------------------------------------------------------------------------

    def round_trips(self, requests: Sequence[bytes]) -> tuple[list[int], list[bytes]]:
        """One request in flight at a time: the round trip of each in ns, and the bodies."""
        clock, write, read_body = time.perf_counter_ns, self.write, self.read_body
        times: list[int] = []
        bodies: list[bytes] = []
        for request in requests:
            start = clock()
            write(request)
            body = read_body()
            times.append(clock() - start)
            bodies.append(body)
        return times, bodies

    def pipelined(self, requests: Sequence[bytes]) -> tuple[int, list[bytes]]:
        """All requests written at once: ns from the first write to the last response read."""
        blob = b"".join(requests)
        writer = threading.Thread(target=self.write, args=(blob,), daemon=True)
        start = time.perf_counter_ns()
        writer.start()
        bodies = [self.read_body() for _ in requests]
        elapsed = time.perf_counter_ns() - start
        writer.join()
        return elapsed, bodies

    # -- bytes -----------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def read_body(self) -> bytes:
        """The body of the next frame from the server."""
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                start = end + 4
                length = _content_length(buffer[:end])
                if len(buffer) >= start + length:
                    body = bytes(buffer[start : start + length])
                    del buffer[: start + length]
                    return body
            if not self._poll.poll(self._timeout_ms):
                raise RpcError(f"no answer in {self._timeout_ms} ms")
            chunk = os.read(self._out, READ_SIZE)
            if not chunk:
                raise RpcError("the server closed its output")
            buffer += chunk

    def cpu_seconds(self) -> float:
        """CPU time the server process has used so far, all its threads, in ns-precise
        scheduler figures (``/proc/<pid>/task/*/schedstat``); NaN where there are none. On a
        busy machine this moves much less than the wall clock."""
        total = 0
        try:
            for task in os.listdir(f"/proc/{self.process.pid}/task"):
                with open(f"/proc/{self.process.pid}/task/{task}/schedstat", "rb") as stat:
                    total += int(stat.read().split()[0])
        except (OSError, ValueError):
            return math.nan
        return total / 1e9

    def kill(self) -> None:
        """End the server at once (cold-start runs, where only the start is timed)."""
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def close(self) -> int:
        """``shutdown`` then ``exit``, and the exit code (a server that lingers is killed)."""
        try:
            self.call("shutdown", {})
            self.notify("exit", {})
            assert self.process.stdin is not None
            self.process.stdin.close()
            return self.process.wait(timeout=10)
        except (RpcError, OSError, subprocess.TimeoutExpired):
            self.process.kill()
            return self.process.wait()
        finally:
            assert self.process.stdout is not None
            self.process.stdout.close()


def _content_length(header: bytearray) -> int:
    for line in header.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise RpcError(f"header without Content-Length: {bytes(header)!r}")


def result_of(body: bytes) -> Any:
    """The result of a response body; an error response raises :class:`RpcError`."""
    message = orjson.loads(body)
    if "error" in message:
        raise RpcError(f"{message['error']}")
    if "result" not in message:
        raise RpcError(f"not a response: {body[:200]!r}")
    return message["result"]
