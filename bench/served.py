"""What the HTTP and peers benches share: the loopback endpoint in a process of its own, and the
real ``tether serve`` driven over stdio, with the CPU time of both read from ``/proc``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.client import Connection

HERE = Path(__file__).resolve().parent
MODEL = "bench-model"
API_KEY = "bench-key"
SYSTEM_PROMPT = "You are a careful coding assistant. Read before you answer; keep answers short."


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of process ``pid`` so far, in seconds (nanosecond resolution:
    ``/proc/PID/task/*/schedstat``; a thread that ended meanwhile is not counted)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@dataclass(frozen=True)
class Endpoint:
    openai_url: str
    pid: int
    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader

    async def connections(self) -> int:
        """The connections it has accepted so far."""
        self.stdin.write(b"connections\n")
        await self.stdin.drain()
        return int(await self.stdout.readline())

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


@contextlib.asynccontextmanager
async def endpoint(latency: float, tool_turns: int = 1) -> AsyncIterator[Endpoint]:
    """``model_endpoint.py`` in a process of its own: ``tool_turns`` tool calls, then an answer."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "model_endpoint.py"),
        "--latency",
        str(latency),
        "--tool-turns",
        str(tool_turns),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        port = int(await child.stdout.readline())
        yield Endpoint(f"http://127.0.0.1:{port}/v1", child.pid, child.stdin, child.stdout)
    finally:
        child.stdin.close()  # the endpoint stops when its stdin closes
        try:
            await asyncio.wait_for(child.wait(), 10)
        except TimeoutError:
            child.kill()
            await child.wait()


class Served:
    """A real ``tether serve`` (run by ``python``) on a workspace, its provider the endpoint's."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    @property
    def pid(self) -> int:
        return self.connection.process.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        python: str,
        workspace: Path,
        base_url: str,
        *,
        max_iterations: int = 10,
        provider: dict[str, Any] | None = None,
        sample_into: Path | None = None,
    ) -> AsyncIterator[Served]:
        """``sample_into``: run it under ``sample_serve.py``, its CPU's stacks into that file."""
        command = [python, "-P", "-m", "tether", "serve"]
        if sample_into is not None:
            command = [python, "-P", str(HERE / "sample_serve.py"), str(sample_into)]
        connection = await Connection.spawn(
            command,
            env={"OPENAI_API_KEY": API_KEY},
            cwd=str(workspace),
            on_notification=lambda method, params: True,  # progress is read, then dropped
        )
        options = {
            "provider": {"type": "openai", "baseUrl": base_url, "model": MODEL, **(provider or {})},
            "kernel": {"systemPrompt": SYSTEM_PROMPT, "maxIterations": max_iterations},
            "tools": {"enabled": ["read_file"], "approval": "auto"},
        }
        try:
            await connection.request(
                "initialize",
                {
                    "processId": os.getpid(),
                    "capabilities": {},
                    "workspaceFolders": [{"uri": workspace.as_uri(), "name": "bench"}],
                    "initializationOptions": options,
                },
            )
            connection.notify("initialized", {})
            yield cls(connection)
        finally:
            await connection.close()

    async def session(self, history: Sequence[dict[str, Any]] = (), batch: int = 100) -> str:
        """A new session holding ``history`` (wire-format messages), appended in batches."""
        sid: str = (await self.connection.request("session/create", {}))["sessionId"]
        for start in range(0, len(history), batch):
            await self.connection.request(
                "session/append",
                {"sessionId": sid, "messages": list(history[start : start + batch])},
            )
        return sid

    async def run(self, sid: str, prompt: str, iterations: int) -> dict[str, Any]:
        """One ``kernel/run``; raises unless it made ``iterations`` iterations and ended."""
        result: dict[str, Any] = await self.connection.request(
            "kernel/run", {"sessionId": sid, "prompt": prompt}
        )
        if result.get("iterations") != iterations or result.get("stopReason") != "end_turn":
            raise RuntimeError(f"unexpected run: {result.get('iterations')} iterations, {result}")
        return result
