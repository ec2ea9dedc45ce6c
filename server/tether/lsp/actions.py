"""Code actions ("Ask tether…", "Explain", "Fix", the custom slash commands) and the prompts
of the turns they start.

A code action carries a ``tether.ask`` command whose one argument says what was selected (and,
for "Fix", which diagnostics); the prompt is made when the command runs, from the buffer's text
then. A custom command's action (kind :data:`COMMAND_KIND`, a group of its own in the editors
that group source actions) prompts ``/name`` followed by where the selection is and its lines,
which the command's body gets as ``$ARGUMENTS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from tether.protocol.base import WireModel
from tether.protocol.commands import CommandInfo

Action = Literal["ask", "explain", "fix"]

MAX_SELECTION_CHARS = 20_000
COMMAND_KIND = "source.tether.command"
MAX_COMMAND_ACTIONS = 20


class Position(WireModel):
    line: int = Field(ge=0)
    character: int = Field(ge=0)


class Range(WireModel):
    start: Position
    end: Position


class Diagnostic(WireModel):
    range: Range
    message: str
    source: str | None = None
    code: int | str | None = None


class AskArguments(WireModel):
    """The argument of ``tether.ask``: a prompt, and/or a selection of a document."""

    prompt: str | None = None
    action: Action = "ask"
    uri: str | None = None
    range: Range | None = None
    diagnostics: list[Diagnostic] = Field(default_factory=list)


def code_actions(
    uri: str,
    selection: Range,
    diagnostics: list[Diagnostic],
    commands: list[CommandInfo] | None = None,
) -> list[dict[str, Any]]:
    """The actions offered for a selection (and the diagnostics the client sent with it), then
    one per custom command (``commands``, at most :data:`MAX_COMMAND_ACTIONS`)."""
    actions = []
    for diagnostic in diagnostics[:3]:
        fix = AskArguments(action="fix", uri=uri, range=diagnostic.range, diagnostics=[diagnostic])
        title = f"Fix: {_one_line(diagnostic.message, 60)}"
        actions.append(
            action(title, "quickfix", fix, diagnostics=[diagnostic.to_wire()], isPreferred=False)
        )
    actions.append(action("Ask tether…", "source", AskArguments(uri=uri, range=selection)))
    actions.append(
        action("Explain", "source", AskArguments(action="explain", uri=uri, range=selection))
    )
    fix = AskArguments(action="fix", uri=uri, range=selection, diagnostics=diagnostics)
    actions.append(action("Fix", "refactor.rewrite", fix))
    for info in (commands or [])[:MAX_COMMAND_ACTIONS]:
        described = f": {info.description}" if info.description else ""
        title = _one_line(f"/{info.name}{described}", 60)
        asked = AskArguments(prompt=f"/{info.name}", uri=uri, range=selection)
        actions.append(action(title, COMMAND_KIND, asked))
    return actions


def action(title: str, kind: str, arguments: AskArguments, **extra: Any) -> dict[str, Any]:
    """A code action running ``tether.ask`` with ``arguments``."""
    command = {"title": title, "command": "tether.ask", "arguments": [arguments.to_wire()]}
    return {"title": title, "kind": kind, "command": command, **extra}


def prompt_of(arguments: AskArguments, text: str | None, path: Path | None, root: Path) -> str:
    """The prompt of a turn: what the action asks, about the selected lines of ``text``."""
    where = _where(path, root, arguments.range)
    selected = _selected(text, arguments.range)
    parts: list[str] = []
    if arguments.prompt:
        parts.append(arguments.prompt.strip())
    elif arguments.action == "explain":
        parts.append(f"Explain the code selected in {where}.")
    elif arguments.action == "fix":
        parts.append(f"Fix the code selected in {where}: edit the file.")
    else:
        parts.append(
            f"Do what the selected text in {where} asks (a comment or a TODO, say), "
            "editing the file if that is what it takes."
        )
    if arguments.prompt and where:
        parts.append(f"It is about {where}.")
    for diagnostic in arguments.diagnostics:
        source = f" ({diagnostic.source})" if diagnostic.source else ""
        line = diagnostic.range.start.line + 1
        parts.append(f"Diagnostic at line {line}{source}: {diagnostic.message}")
    if selected:
        parts.append(f"```\n{selected}\n```")
    return "\n\n".join(parts)


def title_of(arguments: AskArguments) -> str:
    if arguments.prompt:
        return _one_line(arguments.prompt, 60)
    return {"ask": "Ask tether", "explain": "Explain", "fix": "Fix"}[arguments.action]


def _where(path: Path | None, root: Path, selection: Range | None) -> str:
    if path is None:
        return ""
    try:
        shown = path.relative_to(root).as_posix()
    except ValueError:
        shown = str(path)
    if selection is None:
        return shown
    first, last = selection.start.line + 1, selection.end.line + 1
    if selection.end.character == 0 and last > first:
        last -= 1
    return f"{shown} (line {first})" if first == last else f"{shown} (lines {first}-{last})"


def _selected(text: str | None, selection: Range | None) -> str:
    """The whole lines the selection touches (an empty selection: its line)."""
    if text is None or selection is None:
        return ""
    lines = text.split("\n")
    first, last = selection.start.line, selection.end.line
    if selection.end.character == 0 and last > first:
        last -= 1
    chosen = "\n".join(lines[first : last + 1])
    if len(chosen) > MAX_SELECTION_CHARS:
        chosen = chosen[:MAX_SELECTION_CHARS] + "\n[selection cut]"
    return chosen


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
