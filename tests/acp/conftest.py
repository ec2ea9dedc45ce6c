"""The real ``tether acp`` process, driven by the official Python SDK's client connection.

Every message tether sends is validated against the ACP v1 JSON Schema of the official npm SDK
(``tests/acp/node_modules``, installed by ``make acp-schema`` from ``package-lock.json``): the
whole message against the schema's root, and its params or result against the type of its
method. A message that does not validate fails the test that received it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, connect_to_agent
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from acp.transports import spawn_stdio_transport
from jsonschema import Draft202012Validator

SCHEMA_DIR = (
    Path(__file__).parent / "node_modules" / "@agentclientprotocol" / "sdk" / "schema" / "v1"
)
AGENT = [sys.executable, "-m", "tether", "acp"]

# The type of each method's result, and of the params of what tether sends.
RESULTS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/delete": "DeleteSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/close": "CloseSessionResponse",
    "session/prompt": "PromptResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/fork": "ForkSessionResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
}
PARAMS = {
    "session/update": "SessionNotification",
    "session/request_permission": "RequestPermissionRequest",
    "fs/read_text_file": "ReadTextFileRequest",
    "fs/write_text_file": "WriteTextFileRequest",
    "terminal/create": "CreateTerminalRequest",
    "terminal/wait_for_exit": "WaitForTerminalExitRequest",
    "terminal/output": "TerminalOutputRequest",
    "terminal/kill": "KillTerminalRequest",
    "terminal/release": "ReleaseTerminalRequest",
}
UNSTABLE = {"session/fork"}
COMMANDS_UPDATE = "available_commands_update"  # methods only the unstable schema has


@cache
def _schema(unstable: bool) -> dict[str, Any]:
    name = "schema.unstable.json" if unstable else "schema.json"
    path = SCHEMA_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make acp-schema` (npm ci in tests/acp)")
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@cache
def validator(type_name: str | None, unstable: bool = False) -> Draft202012Validator:
    """A validator for one ``$defs`` type of the schema (``None``: a whole message)."""
    schema = _schema(unstable)
    if type_name is None:
        return Draft202012Validator(schema)
    return Draft202012Validator({"$ref": f"#/$defs/{type_name}", "$defs": schema["$defs"]})


def schema_problems(message: dict[str, Any], sent: dict[Any, str]) -> list[str]:
    """What is wrong with a message tether sent (``sent``: the method of each request id the
    client sent)."""
    method = message.get("method")
    unstable = method in UNSTABLE or sent.get(message.get("id")) in UNSTABLE
    checks: list[tuple[str | None, Any]] = [(None, message)]
    if method in PARAMS:
        checks.append((PARAMS[method], message.get("params")))
    elif method is None and "error" in message:
        checks.append(("Error", message["error"]))
    elif method is None and sent.get(message.get("id")) in RESULTS:
        checks.append((RESULTS[sent[message["id"]]], message.get("result")))
    elif method is None and str(sent.get(message.get("id"), "")).startswith("_tether/"):
        pass  # the result of an extension method: tether's own
    elif method is None:
        return [f"a response to no request the client sent: {message}"]
    elif method.startswith("_tether/"):
        pass  # an extension notification: a JSON-RPC message, its params tether's own
    else:
        return [f"tether sent {method}, which these tests do not expect"]
    return [
        f"{type_name or 'message'}: {error.message} at {list(error.absolute_path)} in {message}"
        for type_name, value in checks
        for error in validator(type_name, unstable).iter_errors(value)
    ]


@dataclass
class Wire:
    """Every message of the connection, in order, checked as it passes."""

    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    sent: dict[Any, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            self.log.append(("out", message))
            if "method" in message and "id" in message:
                self.sent[message["id"]] = message["method"]
            return
        self.log.append(("in", message))
        self.problems += schema_problems(message, self.sent)

    def received(self, method: str | None = None) -> list[dict[str, Any]]:
        return [
            m for d, m in self.log if d == "in" and (method is None or m.get("method") == method)
        ]

    def updates(
        self, session_id: str | None = None, *, commands: bool = False
    ) -> list[dict[str, Any]]:
        """The ``update`` of every ``session/update`` received (for one session, if given);
        ``available_commands_update`` only with ``commands`` (it comes after a session's
        new/load/resume/fork and each prompt, whenever the command files are read)."""
        return [
            m["params"]["update"]
            for m in self.received("session/update")
            if (session_id is None or m["params"]["sessionId"] == session_id)
            and (commands or m["params"]["update"]["sessionUpdate"] != COMMANDS_UPDATE)
        ]


class Terminal:
    """A command the editor runs for the agent: a real process, its output kept in memory."""

    def __init__(self, process: asyncio.subprocess.Process, limit: int | None) -> None:
        self.process = process
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(65536):
            self.output += chunk
            if self.limit is not None and len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                self.truncated = True

    async def exit_status(self) -> TerminalExitStatus:
        code = await self.process.wait()
        await self.reading
        if code < 0:
            return TerminalExitStatus(signal=signal.Signals(-code).name)
        return TerminalExitStatus(exit_code=code)


Answer = Callable[[dict[str, Any]], "asyncio.Future[str | None] | str | None"]


class Client:
    """The editor: records updates, answers permission requests with ``answers`` (an option id,
    or None for ``cancelled``), in order; with none left, it waits until ``release`` is set."""

    def __init__(self) -> None:
        self.answers: list[str | None] = []
        self.permission_requests: list[Any] = []
        self.asked = asyncio.Event()
        self.release = asyncio.Event()
        self.chunk = asyncio.Event()  # set by the first agent_message_chunk
        self.commands = asyncio.Event()  # set by each available_commands_update
        self.buffers: dict[str, str] = {}  # the editor's unsaved text of a path
        self.reads: list[str] = []
        self.read_asked = asyncio.Event()
        self.read_waits = False  # answer fs/read_text_file only once ``release`` is set
        self.writes: list[tuple[str, str]] = []  # (path, content) the agent asked to write
        self.write_error: str | None = None  # answer fs/write_text_file with this error
        self.write_waits = False  # answer fs/write_text_file only once ``release`` is set
        self.write_asked = asyncio.Event()
        self.terminals: dict[str, Terminal] = {}
        self.terminal_calls: list[tuple[str, str]] = []  # (method, terminal id)
        self.terminal_created = asyncio.Event()
        self.terminal_released = asyncio.Event()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: Any = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = Terminal(process, output_byte_limit)
        self.terminal_calls.append(("create", terminal_id))
        self.terminal_created.set()
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self.terminal_calls.append(("wait_for_exit", terminal_id))
        status = await self.terminals[terminal_id].exit_status()
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        self.terminal_calls.append(("output", terminal_id))
        terminal = self.terminals[terminal_id]
        running = terminal.process.returncode is None
        return TerminalOutputResponse(
            output=terminal.output.decode(errors="replace"),
            truncated=terminal.truncated,
            exit_status=None if running else await terminal.exit_status(),
        )

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        self.terminal_calls.append(("kill", terminal_id))
        terminal = self.terminals[terminal_id]
        if terminal.process.returncode is None:
            terminal.process.kill()
        await terminal.exit_status()
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        self.terminal_calls.append(("release", terminal_id))
        terminal = self.terminals.pop(terminal_id)
        if terminal.process.returncode is None:
            terminal.process.kill()
        await terminal.exit_status()
        self.terminal_released.set()
        return ReleaseTerminalResponse()

    async def read_text_file(
        self,
        path: str,
        session_id: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        self.read_asked.set()
        if self.read_waits:
            await self.release.wait()
        if path not in self.buffers:
            raise RequestError(-32002, f"no buffer for {path}")
        return ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.write_asked.set()
        if self.write_waits:
            await self.release.wait()
        if self.write_error is not None:
            raise RequestError(-32603, self.write_error)
        self.buffers[path] = content
        return WriteTextFileResponse()

    async def request_permission(
        self, options: Any, session_id: str, tool_call: Any, **kwargs: Any
    ) -> RequestPermissionResponse:
        self.permission_requests.append(tool_call)
        self.asked.set()
        if self.answers:
            option = self.answers.pop(0)
        else:
            await self.release.wait()
            option = None
        outcome = (
            DeniedOutcome(outcome="cancelled")
            if option is None
            else AllowedOutcome(option_id=option, outcome="selected")
        )
        return RequestPermissionResponse(outcome=outcome)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunk.set()
        if getattr(update, "session_update", None) == COMMANDS_UPDATE:
            self.commands.set()


@dataclass
class Agent:
    """A running ``tether acp``: the SDK's connection, the editor behind it, the wire log."""

    conn: ClientSideConnection
    client: Client
    wire: Wire
    process: asyncio.subprocess.Process

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """A request the SDK has no method for."""
        return await self.conn._conn.send_request(method, params)


@dataclass
class Setup:
    """How to start agents: the configuration (a user config file) and the environment."""

    home: Path
    project: Path
    env: dict[str, str] = field(default_factory=dict)

    def script(
        self,
        turns: list[dict[str, Any]],
        approval: str = "ask",
        model: str | None = None,
        more: str = "",
    ) -> None:
        """The scripted model plays ``turns`` (across every agent started after this), as
        ``model`` when given; ``more`` is added to the config file."""
        script = self.home / "script.json"
        script.write_text(json.dumps(turns))
        config = self.home / "config" / "tether" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(
            f'[provider]\ntype = "scripted"\nscript = {json.dumps(str(script))}\n'
            + (f"model = {json.dumps(model)}\n" if model else "")
            + f'[tools]\napproval = "{approval}"\n'
            + more
        )

    @asynccontextmanager
    async def agent(
        self,
        *,
        initialize: bool = True,
        buffers: dict[str, str] | None = None,
        terminal: bool = False,
        writes: bool = False,
        argv: Sequence[str] = AGENT,
    ) -> AsyncIterator[Agent]:
        """A started agent, initialized unless told not to; with ``buffers``, the client
        declares ``fs.readTextFile`` and answers it with them; with ``terminal``, it declares
        ``terminal`` and runs the commands it is asked to; with ``writes``, it declares
        ``fs.writeTextFile`` and keeps what it is asked to write in its buffers; ``argv``: the
        command that starts it."""
        client = Client()
        client.buffers = buffers or {}
        wire = Wire()
        env = {
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / "config"),
            "XDG_DATA_HOME": str(self.home / "data"),
            **self.env,
        }
        async with spawn_stdio_transport(*argv, env=env, cwd=self.project, stderr=None) as (
            reader,
            writer,
            process,
        ):
            conn = connect_to_agent(client, writer, reader, observers=[wire.observe])
            try:
                if initialize:
                    fs = FileSystemCapabilities(
                        read_text_file=buffers is not None, write_text_file=writes
                    )
                    capabilities = ClientCapabilities(fs=fs, terminal=terminal)
                    await conn.initialize(protocol_version=1, client_capabilities=capabilities)
                yield Agent(conn=conn, client=client, wire=wire, process=process)
            finally:
                await conn.close()
                for left in client.terminals.values():  # released by no one: not to outlive us
                    if left.process.returncode is None:
                        left.process.kill()
                    await left.exit_status()
        assert not wire.problems, "\n".join(wire.problems)


@pytest.fixture
def setup(tmp_path: Path, project: Path) -> Setup:
    home = tmp_path / "home"
    home.mkdir()
    return Setup(home=home, project=project)


async def until(event: asyncio.Event) -> None:
    """Wait for ``event`` (a bounded wait: a hang fails the test instead of blocking it)."""
    await asyncio.wait_for(event.wait(), 20)


__all__ = ["Agent", "RequestError", "Setup", "until"]
