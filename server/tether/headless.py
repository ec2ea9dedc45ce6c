"""``tether run``: one turn of the kernel without an editor, through a real ``tether serve``.

Streamed text goes to stdout as it arrives, with a line per tool call; on a terminal a status
line on stderr shows the iteration and the tool at work. ``--json`` prints the raw events as JSON
lines instead (and the result last). The exit code is 0 when the run ends, 1 on an error, and 130
when it was interrupted (Ctrl-C cancels the run, which then shows how it ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether.client import Connection, RpcError


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    prompt: str
    workspace: Path
    session: str | None = None
    script: Path | None = None
    max_iterations: int | None = None
    model: str | None = None
    json: bool = False


async def run_headless(
    options: RunOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    connection = await Connection.spawn()
    view: _View = _JsonLines(out) if options.json else _Terminal(out, err)
    try:
        await connection.request("initialize", _initialize_params(options))
        connection.notify("initialized", {})
        session_id = (
            options.session or (await connection.request("session/create", {}))["sessionId"]
        )
        params: dict[str, Any] = {"sessionId": session_id, "prompt": options.prompt}
        if options.max_iterations:
            params["maxIterations"] = options.max_iterations
        if options.model:
            params["model"] = options.model
        result = await _follow(connection, view, session_id, params)
    except RpcError as exc:
        view.error(exc)
        return 1
    except ConnectionError as exc:
        view.error(RpcError(-32603, f"the server stopped: {exc}"))
        return 1
    finally:
        await connection.close()
    view.result(result)
    return 130 if result["stopReason"] == "cancelled" else 0


def _initialize_params(options: RunOptions) -> dict[str, Any]:
    params: dict[str, Any] = {
        "clientInfo": {"name": "tether-run"},
        "workspaceFolders": [{"uri": options.workspace.resolve().as_uri()}],
    }
    if options.script is not None:
        script = str(options.script.resolve())
        params["initializationOptions"] = {"provider": {"type": "scripted", "script": script}}
    return params


async def _follow(
    connection: Connection, view: _View, session_id: str, params: dict[str, Any]
) -> Any:
    """Run, showing the progress notifications until the response arrives. Interrupted (Ctrl-C),
    it cancels the run and shows how it ended."""
    response = asyncio.ensure_future(connection.request("kernel/run", params))
    try:
        return await _show_progress(connection, view, response)
    except asyncio.CancelledError:
        with contextlib.suppress(RpcError, ConnectionError, TimeoutError):
            await asyncio.wait_for(
                connection.request("kernel/cancel", {"sessionId": session_id}), 5
            )
        return await asyncio.wait_for(_show_progress(connection, view, response), 10)


async def _show_progress(connection: Connection, view: _View, response: asyncio.Future[Any]) -> Any:
    while True:
        notification = asyncio.ensure_future(connection.notifications.get())
        try:
            done, _ = await asyncio.wait(
                {response, notification}, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if not notification.done():
                notification.cancel()
        if notification in done:
            method, params = notification.result()
            if method == "kernel/progress":
                view.event(params)
            continue
        while not connection.notifications.empty():  # written before the response: show them
            method, params = connection.notifications.get_nowait()
            if method == "kernel/progress":
                view.event(params)
        return response.result()


_MARKS = {"completed": "✓", "failed": "✗", "cancelled": "⊘"}


class _View:
    def event(self, params: dict[str, Any]) -> None: ...

    def result(self, result: Any) -> None: ...

    def error(self, exc: RpcError) -> None: ...


class _JsonLines(_View):
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def event(self, params: dict[str, Any]) -> None:
        print(json.dumps(params), file=self._out, flush=True)

    def result(self, result: Any) -> None:
        print(json.dumps({"result": result}), file=self._out, flush=True)

    def error(self, exc: RpcError) -> None:
        error = {"code": exc.code, "message": exc.message, "data": exc.data}
        print(json.dumps({"error": error}), file=self._out, flush=True)


class _Terminal(_View):
    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err
        self._live = err.isatty()
        self._mid_line = False
        self._names: dict[str, str] = {}  # tool call id -> tool name

    def event(self, params: dict[str, Any]) -> None:
        event = params["event"]
        kind = event["kind"]
        if kind == "message_delta":
            self._write(event["text"])
            self._mid_line = not event["text"].endswith("\n")
        elif kind == "tool_call":
            self._names[event["toolCallId"]] = event["name"]
            self._line(f"→ {event['name']} {event['arguments']}")
        elif kind == "tool_call_update" and event["status"] in _MARKS:
            name = self._names.get(event["toolCallId"], event["toolCallId"])
            error = event.get("error")
            self._line(f"{_MARKS[event['status']]} {name}" + (f": {error}" if error else ""))
        elif kind == "iteration_started":
            self._status(f"iteration {event['iteration']}")

    def result(self, result: Any) -> None:
        self._status("")
        if self._mid_line:
            self._write("\n")
        if result["stopReason"] != "end_turn":
            print(f"[stopped: {result['stopReason']}]", file=self._err, flush=True)

    def error(self, exc: RpcError) -> None:
        self._status("")
        print(f"tether: error {exc.code}: {exc.message}", file=self._err, flush=True)

    def _line(self, text: str) -> None:
        if self._mid_line:
            self._write("\n")
            self._mid_line = False
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def _status(self, text: str) -> None:
        if self._live:
            with contextlib.suppress(OSError):
                self._err.write(f"\r\x1b[2K{text}")
                self._err.flush()
