"""The debug log of the real ``tether serve``: provider requests (a retried 500 included), the MCP
server's start and stop, the run's start and end; the same lines in ``log.file`` as on stderr;
stdout carries frames only; no secret anywhere in the log."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.fakes.model_server import Call, ModelServer, Reply, Status
from tether.protocol.framing import encode_frame

FAKE_MCP = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"
API_KEY = "sk-log-test-7c1e9a4b2d"
MCP_TOKEN = "mcp-token-5e8f2a9c71"  # under a name that looks secret
MCP_SETTING = "mcp-setting-3b6d0e4f"  # under a plain name: not a secret, never logged either
TIMESTAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"

_FRAME = re.compile(rb"Content-Length: (\d+)\r\n\r\n")


def frames(stdout: bytes) -> list[dict[str, Any]]:
    """Every message of ``stdout``, which must be frames and nothing else."""
    messages: list[dict[str, Any]] = []
    position = 0
    while position < len(stdout):
        header = _FRAME.match(stdout, position)
        assert header is not None, f"not a frame at byte {position}: {stdout[position:][:80]!r}"
        end = header.end() + int(header[1])
        messages.append(json.loads(stdout[header.end() : end]))
        position = end
    return messages


class Serve:
    """``tether serve`` with its stdout read whole (to check it) and its stderr in a file."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stdout = bytearray()
        self._ids = 0
        self._answers: dict[int, asyncio.Future[Any]] = {}
        self._reader = asyncio.ensure_future(self._read())

    async def request(self, method: str, params: Any) -> Any:
        self._ids += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers[self._ids] = future
        self.send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return await asyncio.wait_for(future, 30)

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(encode_frame(orjson.dumps(message)))

    async def close(self) -> None:
        await self.request("shutdown", None)
        self.send({"jsonrpc": "2.0", "method": "exit"})
        await asyncio.wait_for(self.process.wait(), 30)
        await self._reader

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(65536):
            self.stdout += chunk
            position = 0
            while header := _FRAME.search(self.stdout, position):
                end = header.end() + int(header[1])
                if end > len(self.stdout):
                    break
                message = json.loads(self.stdout[header.end() : end])
                future = self._answers.pop(message.get("id"), None)
                if future is not None and "method" not in message:
                    future.set_result(message.get("result", message.get("error")))
                position = end


def environment(tmp_path: Path, base_url: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    server = {
        "name": "fake",
        "command": sys.executable,
        "args": [str(FAKE_MCP)],
        "env": {"FAKE_TOKEN": MCP_TOKEN, "PLAIN_SETTING": MCP_SETTING},
    }
    return {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "OPENAI_API_KEY": API_KEY,
        "TETHER_LOG_LEVEL": "debug",
        "TETHER_LOG_FILE": str(tmp_path / "logs" / "tether.log"),
        "TETHER_PROVIDER_TYPE": "openai",
        "TETHER_PROVIDER_BASE_URL": base_url,
        "TETHER_PROVIDER_MODEL": "gpt-test",
        "TETHER_TOOLS_APPROVAL": "auto",
        "TETHER_TOOLS_MCP_SERVERS": json.dumps([server]),
    }


async def test_a_debug_log_tells_requests_servers_and_runs_without_a_secret(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    stderr_path = tmp_path / "stderr.txt"
    with ModelServer.in_thread() as model:
        model.push(
            Status(500),
            Reply(tool_calls=[Call("c1", "fake__echo", {"text": "hello"})]),
            Reply(text="It said hello."),
        )
        with stderr_path.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tether",
                "serve",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=environment(tmp_path, model.openai_url),
            )
        serve = Serve(process)
        try:
            await serve.request("initialize", {"workspaceFolders": [{"uri": project.as_uri()}]})
            serve.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            session = await serve.request("session/create", {})
            sid = session["sessionId"]
            result = await serve.request("kernel/run", {"sessionId": sid, "prompt": "echo"})
        finally:
            await serve.close()

    assert result["stopReason"] == "end_turn", result
    assert process.returncode == 0
    messages = frames(bytes(serve.stdout))
    assert all(message.get("jsonrpc") == "2.0" for message in messages)

    log = stderr_path.read_text("utf-8")
    assert (tmp_path / "logs" / "tether.log").read_text("utf-8") == log
    host = model.openai_url.removesuffix("/v1")
    run_id = result["runId"]
    for line in (
        rf"{TIMESTAMP} DEBUG tether.providers.http: openai: POST {host}/v1/chat/completions "
        r"\(\d+ bytes\) -> 500 in \d+ ms",
        rf"{TIMESTAMP} WARNING tether.providers: openai: HTTP 500; retry 1 of 3 in \d\.\d\d s",
        rf"{TIMESTAMP} DEBUG tether.providers.http: openai: POST {host}/v1/chat/completions "
        r"\(\d+ bytes\) -> 200 in \d+ ms",
        r"openai: POST \S+: the turn was read in \d+ ms",
        rf"DEBUG tether.tools.mcp.manager: starting MCP server fake \(stdio python\S*, 1 args, "
        rf"cwd {re.escape(str(project))}, sandbox off\)",
        r"INFO tether.tools.mcp.manager: MCP server fake started with \d+ tools in \d+ ms",
        r"DEBUG tether.tools.mcp.manager: stopping MCP server fake",
        r"DEBUG tether.tools.mcp.manager: MCP server fake stopped",
        rf"DEBUG tether.kernel.run: run {run_id} of session {sid} started "
        r"\(model gpt-test, at most 10 iterations\)",
        rf"DEBUG tether.kernel.run: run {run_id} of session {sid} ended: end_turn after 2 "
        r"iterations in \d+ ms",
    ):
        assert re.search(line, log), f"no line like {line!r} in:\n{log}"
    for secret in (API_KEY, MCP_TOKEN, MCP_SETTING, "Bearer", "authorization"):
        assert secret not in log
        assert secret.encode() not in serve.stdout or secret == "authorization"
