"""The title a person reads for a tool call: ``Read src/app.py``, ``Run pytest -q``,
``github: create_issue``. The kernel puts it in ``tool_call`` events and permission requests, so
every front end (the CLI, the editor clients, ACP) shows a call the same way."""

from __future__ import annotations

from typing import Any

import orjson

_MAX_TITLE = 120


def call_title(name: str, arguments: str) -> str:
    """The title of a call whose arguments are the JSON text the model wrote."""
    try:
        args = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        args = {}
    return title(name, args)


def title(name: str, arguments: Any) -> str:
    """``Read src/app.py``, ``Run pytest -q``, ``github: create_issue``…"""
    args = arguments if isinstance(arguments, dict) else {}
    path = args.get("path")
    shown = path if isinstance(path, str) and path else "."
    text = {
        "read_file": f"Read {shown}{_lines(args)}",
        "list_files": f"List {shown}" + (f" ({args['glob']})" if _is_str(args.get("glob")) else ""),
        "search_text": f"Search {args.get('pattern')!r} in {shown}",
        "write_file": f"Write {shown}",
        "edit_file": f"Edit {shown}",
        "run_command": f"Run {_command(args.get('command'))}",
        "task": _task(args),
    }.get(name)
    if text is None:
        server, sep, tool = name.partition("__")
        text = f"{server}: {tool}" if sep and tool else name
    return text if len(text) <= _MAX_TITLE else text[: _MAX_TITLE - 1] + "…"


def _task(args: dict[str, Any]) -> str:
    """A sub-agent's call: ``Task (reviewer): Check the notes``."""
    agent = f" ({args['agent']})" if _is_str(args.get("agent")) else ""
    about = args.get("description") if _is_str(args.get("description")) else args.get("prompt")
    first = str(about).strip().splitlines()[0] if _is_str(about) else ""
    return f"Task{agent}: {first}" if first else f"Task{agent}"


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _lines(args: dict[str, Any]) -> str:
    start, end = args.get("startLine"), args.get("endLine")
    if isinstance(start, int) and isinstance(end, int):
        return f" (lines {start}-{end})"
    if isinstance(start, int):
        return f" (from line {start})"
    if isinstance(end, int):
        return f" (lines 1-{end})"
    return ""


def _command(command: Any) -> str:
    if isinstance(command, list):
        return " ".join(str(part) for part in command)
    return " ".join(str(command).split()) if command else "a command"
