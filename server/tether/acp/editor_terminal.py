"""The editor's terminal as a tool backend: with ``acp.editor_terminal = true`` and a client that
declares ``terminal: true``, ``run_command`` runs through ``terminal/create``, and the tool call
embeds the terminal so the user watches the command run in the editor.

The call has been approved by then (the kernel asks before any tool runs). The command is **not
confined by tether's sandbox**: the editor runs it, with its own rights and environment; that is
why it takes a user-level setting. tether still resolves ``cwd`` inside the workspace, caps the
output it asks the editor to keep, kills the command at its timeout (``terminal/kill``) and
releases the terminal once the result is read (``terminal/release``), or at once when the call
is cancelled (a release kills what still runs). Every request but ``terminal/wait_for_exit``
(bounded by the command's timeout) has ``acp.request_timeout`` seconds to be answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether.acp.editor_files import DEFAULT_REQUEST_TIMEOUT, SETTING
from tether.acp.models import AcpModel, TerminalContent, ToolCallProgress
from tether.acp.wire import AcpWire, ClientError
from tether.tools.base import (
    ToolContext,
    ToolError,
    ToolExecutor,
    ToolLayer,
    ToolResult,
)
from tether.tools.editor_requests import Bound, bounded_request
from tether.tools.run_command import DEFAULT_MAX_OUTPUT_BYTES, RunCommandArguments, command_argv
from tether.tools.sandbox import Sandbox

logger = logging.getLogger(__name__)

RUN_COMMAND = "run_command"
NOT_CONFINED = "run in the editor's terminal, not confined by tether's sandbox"
Show = Callable[[str, ToolCallProgress], None]  # session id, update


class _Created(AcpModel):
    terminal_id: str


class _Exit(AcpModel):
    exit_code: int | None = None
    signal: str | None = None


class _Output(AcpModel):
    output: str
    truncated: bool = False
    exit_status: _Exit | None = None


class EditorTerminal(ToolLayer):
    """A :class:`ToolExecutor` that runs ``run_command`` in the editor's terminal and the rest
    with ``inner``. ``terminals`` maps a session's tool call ids to their terminals, so the
    call's later updates keep showing it."""

    def __init__(
        self,
        inner: ToolExecutor,
        connection: AcpWire,
        show: Show,
        terminals: Callable[[str], dict[str, str]],
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        super().__init__(inner)
        self._connection = connection
        self._show = show
        self._terminals = terminals
        self._max_output = max_output_bytes
        self._timeout = timeout
        self._releasing: set[asyncio.Future[None]] = set()  # releases sent, not answered yet

    async def execute(self, name: str, arguments: str, context: ToolContext) -> ToolResult:
        if name != RUN_COMMAND or all(spec.name != RUN_COMMAND for spec in self._inner.list()):
            return await self._inner.execute(name, arguments, context)
        try:
            args = RunCommandArguments.model_validate_json(arguments)
        except ValidationError:  # the tool's own message says what is wrong
            return await self._inner.execute(name, arguments, context)
        try:
            argv = command_argv(args.command)
            cwd = await asyncio.to_thread(Sandbox(context.workspace).directory, args.cwd)
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        return await self._run(argv, cwd, args.timeout, context)

    async def _run(
        self, argv: Sequence[str], cwd: Path, limit: float, context: ToolContext
    ) -> ToolResult:
        session_id = context.session_id
        params: dict[str, Any] = {
            "sessionId": session_id,
            "command": argv[0],
            "args": [*argv[1:]],
            "cwd": str(cwd),
            "outputByteLimit": self._max_output,
        }
        try:
            created = _Created.model_validate(await self._request("terminal/create", params))
        except (ClientError, ConnectionError, ValidationError, TimeoutError) as exc:
            return ToolResult(f"the editor could not start the command: {self._reason(exc)}", True)
        terminal = {"sessionId": session_id, "terminalId": created.terminal_id}
        if context.tool_call_id is not None:
            self._terminals(session_id)[context.tool_call_id] = created.terminal_id
            self._show(
                session_id,
                ToolCallProgress(
                    tool_call_id=context.tool_call_id,
                    status="in_progress",
                    content=[TerminalContent(terminal_id=created.terminal_id)],
                ),
            )
        released = False
        try:
            result = await self._finish(terminal, limit)
            released = True
            await self._release(terminal)
            return result
        finally:
            if not released:  # cancelled, or the editor went away: leave nothing running
                self._release_later(terminal)

    def _release_later(self, terminal: dict[str, str]) -> None:
        """Send ``terminal/release`` now, without waiting for its answer (a cancelled call
        ends at once)."""
        task = asyncio.ensure_future(self._release(terminal))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _finish(self, terminal: dict[str, str], limit: float) -> ToolResult:
        """Wait for the command (killing it after ``limit`` seconds), then read its output."""
        timed_out = False
        try:
            async with asyncio.timeout(limit):
                status = _Exit.model_validate(
                    await self._connection.request("terminal/wait_for_exit", terminal)
                )
        except TimeoutError:
            timed_out = True
            status = _Exit()
            with contextlib.suppress(ClientError, ConnectionError, TimeoutError):
                await self._request("terminal/kill", terminal)
        except (ClientError, ConnectionError, ValidationError) as exc:
            return ToolResult(f"the editor could not run the command: {self._reason(exc)}", True)
        try:
            output = _Output.model_validate(await self._request("terminal/output", terminal))
        except (ClientError, ConnectionError, ValidationError, TimeoutError) as exc:
            return ToolResult(f"the editor did not give the output: {self._reason(exc)}", True)
        if output.exit_status is not None and not timed_out:
            status = output.exit_status
        return _result(status, output, timed_out, limit)

    async def _release(self, terminal: dict[str, str]) -> None:
        try:
            await self._request("terminal/release", terminal)
        except (ClientError, ConnectionError, TimeoutError) as exc:
            logger.info("terminal/release failed: %s", self._reason(exc))

    async def _request(self, method: str, params: Any) -> Any:
        """A request the editor answers without a person: ``TimeoutError`` when it does not
        within ``acp.request_timeout`` (it is then forgotten; a late answer is ignored)."""
        bound = Bound(self._timeout, SETTING)
        return await bounded_request(self._connection.request, method, params, bound)

    def _reason(self, exc: Exception) -> str:
        if isinstance(exc, TimeoutError):
            return str(exc)
        return _reason(exc)


def _result(status: _Exit, output: _Output, timed_out: bool, timeout: float) -> ToolResult:
    if timed_out:
        line = f"timed out after {timeout:g} s: the command was killed"
    elif status.signal is not None:
        line = f"killed by signal {status.signal}"
    else:
        line = f"exit code {status.exit_code}"
    is_error = timed_out or status.signal is not None or status.exit_code != 0
    lines = [f"{line} ({NOT_CONFINED})"]
    if output.output:
        cut = ", its beginning cut by the editor" if output.truncated else ""
        lines += [f"output{cut}:", output.output]
    else:
        lines.append("(no output)")
    return ToolResult("\n".join(lines), is_error=is_error)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return exc.message if exc.code is None else f"error {exc.code}: {exc.message}"
    if isinstance(exc, ConnectionError):
        return "the client went away"
    return "a malformed answer"
