"""``tether run``: one turn of the kernel without an editor, through a real ``tether serve``.

Streamed text goes to stdout as it arrives, with a line per tool call; on a terminal a status
line on stderr shows the iteration and the tool at work. Sessions go to the user's SQLite store
unless another store is configured, so ``--session ID`` continues one. ``--json`` prints the raw
events as JSON lines instead (and the result last). The exit code is 0 when the run ends, 1 on
an error, and 130 when it was interrupted (Ctrl-C cancels the run, which then shows how it
ended). On a terminal,
``tool/requestPermission`` is answered by asking the person at it; without one a write or a
command is refused, and the call's line says it needs a terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether.client import Run, SessionNotFoundError, TetherClient, TetherClientError
from tether.client.tether_client import PermissionOutcome
from tether.config import user_config_path
from tether.escapes import printable
from tether.protocol.kernel import PermissionParams, ProgressParams, RunResult, StopReason
from tether.terminal import TerminalView


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    prompt: str
    workspace: Path
    session: str | None = None
    script: Path | None = None
    max_iterations: int | None = None
    model: str | None = None
    json: bool = False
    approval: str | None = None  # tools.approval for this run; None: as configured
    log_level: str | None = None  # the spawned server's; None: as this process's environment


async def run_headless(
    options: RunOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    view: _View = _JsonLines(out, err) if options.json else _Terminal(out, err, options.workspace)
    try:
        async with TetherClient.spawn(
            workspace=options.workspace,
            options=initialization_options(options.script, options.approval),
            env=server_env(options.log_level),
            client_name="tether-run",
            on_permission=view.ask if sys.stdin.isatty() else view.refuse_without_terminal,
        ) as client:
            session_id = await _session(client, options.session, err)
            run = client.run(
                session_id,
                options.prompt,
                max_iterations=options.max_iterations or None,
                model=options.model or None,
            )
            result = await _follow(client, view, run)
    except TetherClientError as exc:
        view.error(exc)
        return 1
    except ConnectionError as exc:
        view.error(TetherClientError(-32603, f"the server stopped: {exc}"))
        return 1
    view.result(result)
    return 130 if result.stop_reason is StopReason.CANCELLED else 0


def initialization_options(script: Path | None, approval: str | None) -> dict[str, Any]:
    """The configuration layer ``tether run`` and ``tether chat`` send: the scripted provider
    and the approval policy when asked for, and the user's SQLite store unless they chose one."""
    layer: dict[str, Any] = {}
    if script is not None:
        layer["provider"] = {"type": "scripted", "script": str(script.resolve())}
    if approval is not None:
        layer["tools"] = {"approval": approval}
    if not _store_chosen():
        layer["sessions"] = {"store": "sqlite"}
    return layer


def _store_chosen(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the user's environment or config file names a session store: the terminal's
    conversations then go there; else to the SQLite file in tether's data directory (the
    server's own default stays the memory store, as documented)."""
    if environ.get("TETHER_SESSIONS_STORE"):
        return True
    path = user_config_path(environ)
    try:
        settings = tomllib.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # the server reports the file's problem
    sessions = settings.get("sessions")
    return isinstance(sessions, dict) and sessions.get("store") is not None


def server_env(log_level: str | None) -> dict[str, str]:
    """The spawned server's environment on top of this one: its log level."""
    return {"TETHER_LOG_LEVEL": log_level} if log_level else {}


async def _session(client: TetherClient, requested: str | None, err: TextIO) -> str:
    """The session ``--session`` names, started under that id when the store has none (and
    said so: a mistyped id, or a store other than the one meant, is not a silent fresh start);
    without it a new one."""
    if not requested:
        return (await client.create_session()).session_id
    try:
        return (await client.get_session(requested)).session_id
    except SessionNotFoundError:
        pass
    session = await client.open_session(requested)
    print(
        f"tether: there was no session {printable(requested)} in the session store: it starts "
        "now, under that id",
        file=err,
        flush=True,
    )
    return session.session_id


def unknown_session(session_id: str) -> TetherClientError:
    return SessionNotFoundError(f"there is no session {printable(session_id)} in the session store")


NEEDS_A_TERMINAL = "refused: approval needs a terminal (use --approval auto)"
_ANSWERS: dict[str, PermissionOutcome] = {"y": "allow", "a": "allow_always"}


async def _ask_on_terminal(params: PermissionParams) -> PermissionOutcome:
    """``tool/requestPermission`` answered by the person at the terminal (anything else than
    yes or always is a rejection)."""
    call = params.tool_call
    why = f" ({printable(params.reason)})" if params.reason else ""
    title = printable(call.title or f"{call.name} {call.arguments}")
    question = f"\nAllow {title}{why}?  [y] Allow  [a] Always allow  [N] Reject: "
    print(question, end="", file=sys.stderr, flush=True)
    answer = await _read_line()
    return _ANSWERS.get(answer.strip().lower()[:1], "reject")


async def _read_line() -> str:
    """A line of stdin, read in a daemon thread: a run cancelled meanwhile (Ctrl-C) does not wait
    for the person to press Enter before the process can exit."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()

    def answer(text: str) -> None:
        if not line.done():
            line.set_result(text)

    def read() -> None:
        text = sys.stdin.readline()
        with contextlib.suppress(RuntimeError):  # the run ended and its loop is closed
            loop.call_soon_threadsafe(answer, text)

    threading.Thread(target=read, name="tether-run-prompt", daemon=True).start()
    return await line


async def _follow(client: TetherClient, view: _View, run: Run) -> RunResult:
    """Run, showing the progress events until the response arrives. Interrupted (Ctrl-C), it
    cancels the run and shows how it ended."""
    try:
        await _show_progress(view, run)
    except asyncio.CancelledError:
        with contextlib.suppress(TetherClientError, ConnectionError, TimeoutError):
            await asyncio.wait_for(client.cancel(run.session_id), 5)
        await asyncio.wait_for(_show_progress(view, run), 10)
    return await run


async def _show_progress(view: _View, run: Run) -> None:
    async for progress in run:  # goes on where an interrupted pass stopped
        view.event(progress)


class _View:
    def event(self, progress: ProgressParams) -> None: ...

    async def ask(self, params: PermissionParams) -> PermissionOutcome:
        return await _ask_on_terminal(params)

    def refuse_without_terminal(self, params: PermissionParams) -> PermissionOutcome:
        """Without a terminal nobody can be asked: refused, and the call's line says so."""
        return "reject"

    def result(self, result: RunResult) -> None: ...

    def error(self, exc: TetherClientError) -> None: ...


class _JsonLines(_View):
    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err

    def refuse_without_terminal(self, params: PermissionParams) -> PermissionOutcome:
        """The events say the call was rejected; stderr says why, and how to allow it."""
        title = printable(params.tool_call.title or params.tool_call.name)
        print(f"tether: {title}: {NEEDS_A_TERMINAL}", file=self._err, flush=True)
        return "reject"

    def event(self, progress: ProgressParams) -> None:
        print(json.dumps(progress.to_wire()), file=self._out, flush=True)

    def result(self, result: RunResult) -> None:
        print(json.dumps({"result": result.to_wire()}), file=self._out, flush=True)

    def error(self, exc: TetherClientError) -> None:
        error = {"code": exc.code, "message": exc.message, "data": exc.data}
        print(json.dumps({"error": error}), file=self._out, flush=True)


class _Terminal(_View):
    """The run drawn for a person (:class:`tether.terminal.TerminalView`)."""

    def __init__(self, out: TextIO, err: TextIO, workspace: Path) -> None:
        self._view = TerminalView(out, err, workspace)

    def refuse_without_terminal(self, params: PermissionParams) -> PermissionOutcome:
        self._view.explain_failure(params.tool_call.id, NEEDS_A_TERMINAL)
        return "reject"

    def event(self, progress: ProgressParams) -> None:
        self._view.event(progress)

    def result(self, result: RunResult) -> None:
        self._view.result(result)

    def error(self, exc: TetherClientError) -> None:
        warnings = exc.data.get("warnings") if isinstance(exc.data, dict) else None
        for warning in warnings if isinstance(warnings, list) else []:
            if isinstance(warning, dict) and isinstance(warning.get("message"), str):
                self._view.note(f"tether: warning: {warning['message']}", "yellow")
        self._view.note(f"tether: error {exc.code}: {exc.message}", "red")

    async def ask(self, params: PermissionParams) -> PermissionOutcome:
        """The permission question, with the edit's diff, on lines of its own."""
        self._view.question(params)
        return _ANSWERS.get((await _read_line()).strip().lower()[:1], "reject")
