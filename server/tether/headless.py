"""``tether run``: one turn of the kernel without an editor, through a real ``tether serve``.

Streamed text goes to stdout as it arrives, with a line per tool call; on a terminal a status
line on stderr shows the iteration and the tool at work. ``--json`` prints the raw events as JSON
lines instead (and the result last). The exit code is 0 when the run ends, 1 on an error, and 130
when it was interrupted (Ctrl-C cancels the run, which then shows how it ended). On a terminal,
``tool/requestPermission`` is answered by asking the person at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether.client import Run, TetherClient, TetherClientError
from tether.client.tether_client import PermissionOutcome
from tether.protocol.kernel import (
    IterationStarted,
    MessageDelta,
    PermissionParams,
    ProgressParams,
    RunResult,
    RunWarning,
    StopReason,
    ToolCallStarted,
    ToolCallUpdate,
)


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


async def run_headless(
    options: RunOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    view: _View = _JsonLines(out) if options.json else _Terminal(out, err)
    try:
        async with TetherClient.spawn(
            workspace=options.workspace,
            options=_initialization_options(options),
            client_name="tether-run",
            on_permission=view.ask if sys.stdin.isatty() else _refuse_without_terminal,
        ) as client:
            if options.session:  # continued, or created under that id when there is none
                session_id = (await client.open_session(options.session)).session_id
            else:
                session_id = (await client.create_session()).session_id
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


def _initialization_options(options: RunOptions) -> dict[str, Any] | None:
    layer: dict[str, Any] = {}
    if options.script is not None:
        layer["provider"] = {"type": "scripted", "script": str(options.script.resolve())}
    if options.approval is not None:
        layer["tools"] = {"approval": options.approval}
    return layer or None


_ANSWERS: dict[str, PermissionOutcome] = {"y": "allow", "a": "allow_always"}


def _refuse_without_terminal(params: PermissionParams) -> PermissionOutcome:
    """Without a terminal nobody can be asked: refuse, and tell the person how to allow."""
    print(
        f"tether run: {_printable(params.tool_call.name)} needs approval and there is no "
        "terminal to ask on; refused (pass --approval auto to allow writes and commands)",
        file=sys.stderr,
        flush=True,
    )
    return "reject"


async def _ask_on_terminal(params: PermissionParams) -> PermissionOutcome:
    """``tool/requestPermission`` answered by the person at the terminal (anything else than
    yes or always is a rejection)."""
    call = params.tool_call
    why = f" ({_printable(params.reason)})" if params.reason else ""
    question = (
        f"\nallow {_printable(call.name)} {_printable(call.arguments)}{why}? "
        "[y]es / [a]lways / [N]o: "
    )
    print(question, end="", file=sys.stderr, flush=True)
    answer = await _read_line()
    return _ANSWERS.get(answer.strip().lower()[:1], "reject")


def _printable(text: str) -> str:
    """``text`` with every control character escaped, so what the model wrote cannot redraw the
    question (a carriage return is valid JSON whitespace)."""
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode() for char in text
    )


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


_MARKS = {"completed": "✓", "failed": "✗", "cancelled": "⊘"}


class _View:
    def event(self, progress: ProgressParams) -> None: ...

    async def ask(self, params: PermissionParams) -> PermissionOutcome:
        return await _ask_on_terminal(params)

    def result(self, result: RunResult) -> None: ...

    def error(self, exc: TetherClientError) -> None: ...


class _JsonLines(_View):
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def event(self, progress: ProgressParams) -> None:
        print(json.dumps(progress.to_wire()), file=self._out, flush=True)

    def result(self, result: RunResult) -> None:
        print(json.dumps({"result": result.to_wire()}), file=self._out, flush=True)

    def error(self, exc: TetherClientError) -> None:
        error = {"code": exc.code, "message": exc.message, "data": exc.data}
        print(json.dumps({"error": error}), file=self._out, flush=True)


class _Terminal(_View):
    """The answer on ``out`` as it streams, a line per tool call, and, when ``err`` is a
    terminal, a status line on it.

    The status line is drawn only at the start of a line and erased before anything else is
    written, so it never erases or glues itself to the answer when both streams share a screen.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err
        self._live = err.isatty()
        self._mid_line = False
        self._status_shown = False
        self._names: dict[str, str] = {}  # tool call id -> tool name

    def event(self, progress: ProgressParams) -> None:
        event = progress.event
        if isinstance(event, MessageDelta):
            self._write(event.text)
            self._mid_line = not event.text.endswith("\n")
        elif isinstance(event, ToolCallStarted):
            self._names[event.tool_call_id] = event.name
            self._line(f"→ {event.name} {event.arguments}")
            self._status(f"running {event.name}")
        elif isinstance(event, ToolCallUpdate) and event.status in _MARKS:
            name = self._names.get(event.tool_call_id, event.tool_call_id)
            error = event.error
            self._line(f"{_MARKS[event.status]} {name}" + (f": {error}" if error else ""))
        elif isinstance(event, IterationStarted):
            self._status(f"iteration {event.iteration}")
        elif isinstance(event, RunWarning):
            self._end_line()
            print(f"tether: warning: {event.message}", file=self._err, flush=True)

    def result(self, result: RunResult) -> None:
        self._end_line()
        if result.stop_reason is not StopReason.END_TURN:
            print(f"[stopped: {result.stop_reason}]", file=self._err, flush=True)

    def error(self, exc: TetherClientError) -> None:
        self._end_line()
        warnings = exc.data.get("warnings") if isinstance(exc.data, dict) else None
        for warning in warnings if isinstance(warnings, list) else []:
            if isinstance(warning, dict) and isinstance(warning.get("message"), str):
                print(f"tether: warning: {warning['message']}", file=self._err, flush=True)
        print(f"tether: error {exc.code}: {exc.message}", file=self._err, flush=True)

    async def ask(self, params: PermissionParams) -> PermissionOutcome:
        """The permission question, on a line of its own."""
        self._end_line()
        return await _ask_on_terminal(params)

    def _end_line(self) -> None:
        """Erase the status and finish a partial line of the answer."""
        self._clear_status()
        if self._mid_line:
            self._write("\n")
            self._mid_line = False

    def _line(self, text: str) -> None:
        self._end_line()
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._clear_status()
        self._out.write(text)
        self._out.flush()

    def _status(self, text: str) -> None:
        if not self._live or self._mid_line:
            return
        self._clear_status()
        self._err_write(text)
        self._status_shown = True

    def _clear_status(self) -> None:
        if self._status_shown:
            self._status_shown = False
            self._err_write("\r\x1b[2K")  # the cursor is on the status line: back and erase

    def _err_write(self, text: str) -> None:
        with contextlib.suppress(OSError):
            self._err.write(text)
            self._err.flush()
