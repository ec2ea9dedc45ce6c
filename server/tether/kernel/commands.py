"""Slash commands: a prompt that starts with ``/name`` runs the command of that name.

Four sources, in this order of precedence:

- **built-in** (:data:`BUILTINS`): answered by the kernel itself, without a model call; their
  answer is shown (``message_delta`` events, the result's ``response``) but not stored, so the
  model never reads it;
- **user**: ``<config>/tether/commands/NAME.md`` (the user's own);
- **mcp**: the prompts of the session's MCP servers, ``/mcp__server__prompt`` (as Claude Code
  names them); the text after the name gives the prompt's arguments (:func:`prompt_arguments`),
  and the server's ``prompts/get`` gives the text the model reads;
- **workspace**: ``<workspace>/.tether/commands/NAME.md`` (the repository's: untrusted input).

A file in a nested folder is named ``dir:name`` (``git/commit.md`` is ``/git:commit``). Neither
kind of file may take a built-in's name, and a workspace file may not take the name of one of the
user's: a repository cannot change what a command the user knows does. A file that loses is
reported as a warning.

A custom command's file is Markdown with optional front matter (``description``,
``argument-hint``, ``model``, ``allowed-tools``), read by :mod:`tether.kernel.frontmatter` (the
parser agent profiles use: no YAML library, nothing evaluated). Its body, with ``$ARGUMENTS``
and ``$1``...``$9`` replaced, is the user message the model reads; the message keeps
``metadata.command``. ``allowed-tools`` narrows the tools of that run (never widens them: the
session's and the request's lists still apply).

Every command file is read through :func:`tether.repofiles.read_repo_file` (a regular file, at
most :data:`MAX_COMMAND_BYTES`; a workspace's must resolve inside the workspace); one that is
refused, not UTF-8 or whose front matter cannot be parsed is left out with a warning. An unknown
``/name`` is sent to the model as typed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.config import user_config_path
from tether.kernel.agents import AgentProfile
from tether.kernel.frontmatter import (
    FrontMatterError,
    RawValue,
    list_field,
    parse_document,
    text_field,
)
from tether.protocol import Content, ErrorCode, InvalidParams, TextBlock
from tether.protocol.checkpoints import (
    CheckpointInfo,
    CheckpointsParams,
    RewindParams,
    RewindResult,
)
from tether.protocol.commands import COMMAND_KEY, CommandInfo, CommandSource, CommandsResult
from tether.protocol.kernel import (
    CompactParams,
    CompactResult,
    MessageDelta,
    ProgressEvent,
    ProgressParams,
    RunFinished,
    RunParams,
    RunResult,
    RunStarted,
    RunWarning,
    StopReason,
)
from tether.protocol.sessions import MODES, Session, SessionFields
from tether.repofiles import RepoFileError, read_repo_file
from tether.sessions.ids import uuid7
from tether.sessions.store import SessionStore
from tether.sessions.workspaces import local_path
from tether.tools.base import SourcePrompt, ToolError
from tether.tools.plan import checklist

if TYPE_CHECKING:
    from tether.kernel.checkpoints import Checkpoints

logger = logging.getLogger(__name__)
Emit = Callable[[ProgressParams], None]

MAX_COMMAND_BYTES = 64 * 1024
"""The most a command file may weigh (a larger one is refused without being read whole)."""
MAX_COMMAND_ENTRIES = 1000
"""The most directory entries looked at in one commands folder (the rest are left out)."""
MAX_COMMAND_DEPTH = 4
"""The deepest folder under a commands folder whose files are commands."""

WORKSPACE_COMMANDS = Path(".tether") / "commands"
_NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_INVOCATION = re.compile(r"/([A-Za-z0-9_][A-Za-z0-9_.:-]*)(?:\s+|$)")
_PLACEHOLDER = re.compile(r"\$(ARGUMENTS|[1-9])")
_FRONT_MATTER_KEYS = {
    "description": "description",
    "argument-hint": "argument_hint",
    "argument_hint": "argument_hint",
    "argumentHint": "argument_hint",
    "model": "model",
    "allowed-tools": "allowed_tools",
    "allowed_tools": "allowed_tools",
    "allowedTools": "allowed_tools",
}


# -- built-ins ---------------------------------------------------------------------------------


def _no_events(params: ProgressParams) -> None:
    pass


@dataclass(kw_only=True)
class CommandHost:
    """What a built-in command may do to the session it was typed in (the kernel gives it)."""

    session: Session
    store: SessionStore
    compact: Callable[[Emit], Awaitable[CompactResult]]  # session/compact, its events to Emit
    commands: Callable[[], Awaitable[list[CommandInfo]]]  # every command of the session
    profiles: Callable[[], Awaitable[list[AgentProfile]]]  # those the session may run under
    set_agent: Callable[[str], Awaitable[object]]  # runs the session under one (-32602)
    # the session's turns that changed files, oldest first (None: checkpoints are off)
    turns: Callable[[], Awaitable[list[CheckpointInfo]]] | None = None
    # the files of the last N of them put back, under the command's lease
    rewind: Callable[[int], Awaitable[RewindResult]] | None = None
    relay: Emit = _no_events  # into the command's run's events (set by answer)


BuiltinAction = Callable[[CommandHost, str], Awaitable[str]]
"""Runs a built-in with the text typed after its name; answers what the user is shown."""


@dataclass(frozen=True)
class Builtin:
    name: str
    description: str
    action: BuiltinAction
    argument_hint: str | None = None

    def info(self) -> CommandInfo:
        return CommandInfo(
            name=self.name,
            description=self.description,
            argument_hint=self.argument_hint,
            source="builtin",
        )


async def _help(host: CommandHost, arguments: str) -> str:
    lines = ["Commands:"]
    for command in await host.commands():
        hint = f" {command.argument_hint}" if command.argument_hint else ""
        origin = "" if command.source == "builtin" else f" ({command.source})"
        described = command.description or "(no description)"
        lines.append(f"- /{command.name}{hint}: {described}{origin}")
    return "\n".join(lines)


async def _mode(host: CommandHost, arguments: str) -> str:
    mode = arguments.strip()
    if not mode:
        return f"The mode is {host.session.mode} (modes: {', '.join(MODES)})."
    if mode not in MODES:
        raise InvalidParams.field(
            "prompt", f"unknown mode {mode!r}; the modes are {', '.join(MODES)}"
        )
    await host.store.configure(host.session.session_id, SessionFields(mode=mode))
    return f"Mode set to {mode}."


async def _plan(host: CommandHost, arguments: str) -> str:
    entries = host.session.plan
    if not entries:
        return "There is no plan yet: the model makes one with update_plan."
    return "Plan:\n" + checklist(entries)


async def _agent(host: CommandHost, arguments: str) -> str:
    name = arguments.strip()
    if name:
        await host.set_agent(name)  # -32602 naming it when there is no such profile
        return f"The session now runs under the agent profile {name}."
    profiles = await host.profiles()
    current = host.session.agent
    now = f"The session runs under {current}." if current else "The session runs under none."
    if not profiles:
        return f"{now} There is no agent profile (.tether/agents/NAME.md)."
    lines = [f"{now} Agent profiles:"]
    for profile in profiles:
        mark = " (current)" if profile.name == current else ""
        described = f": {profile.description}" if profile.description else ""
        lines.append(f"- {profile.name}{described} ({profile.source}){mark}")
    return "\n".join(lines)


async def _compact(host: CommandHost, arguments: str) -> str:
    result = await host.compact(host.relay)
    if not result.compacted:
        return "Nothing to compact: no turn is old enough to summarize."
    return "The older turns are now a summary."


async def _undo(host: CommandHost, arguments: str) -> str:
    if arguments.strip():
        raise InvalidParams.field("prompt", "/undo takes no argument (/rewind N goes further)")
    return await _rewind(host, "1")


async def _rewind(host: CommandHost, arguments: str) -> str:
    """``/rewind``: the turns that changed files, numbered from the last; ``/rewind N``: the
    files of the last N of them put back (the conversation stays)."""
    if host.turns is None or host.rewind is None:
        return "Checkpoints are off (checkpoints.enabled): there is nothing to undo."
    turns = await host.turns()
    if not turns:
        return "Nothing to undo: no turn of this session changed files."
    count = arguments.strip()
    if not count:
        return _turn_listing(turns)
    if not count.isdigit() or not 1 <= int(count) <= len(turns):
        raise InvalidParams.field(
            "prompt", f"/rewind takes a number of turns, from 1 to {len(turns)}"
        )
    try:
        rewound = await host.rewind(int(count))
    except InvalidParams as exc:
        if not isinstance(exc.data, dict) or "paths" not in exc.data:
            raise
        paths = ", ".join(exc.data["paths"])
        return (
            f"Nothing was changed: these files changed outside tether since it recorded them: "
            f"{paths}. session/rewind with force: true overwrites them."
        )
    return _rewound(rewound, int(count))


def _turn_listing(turns: list[CheckpointInfo]) -> str:
    lines = ["Turns that changed files (/rewind N undoes the last N):"]
    for number, turn in enumerate(reversed(turns), 1):
        shown = ", ".join(turn.files[:5]) + (", …" if len(turn.files) > 5 else "")
        lines.append(f"{number}. {turn.created_at:%Y-%m-%d %H:%M}: {shown or '(no file)'}")
    return "\n".join(lines)


def _rewound(rewound: RewindResult, count: int) -> str:
    turns = "the last turn" if count == 1 else f"the last {count} turns"
    if not rewound.restored and not rewound.removed:
        return f"The files of {turns} were already as before."
    lines = [f"Undid the changes of {turns} to the files:"]
    lines += [f"- restored {path}" for path in rewound.restored]
    lines += [f"- removed {path}" for path in rewound.removed]
    return "\n".join(lines)


BUILTINS: tuple[Builtin, ...] = (
    Builtin("compact", "Summarize the older turns now, to free the context", _compact),
    Builtin("mode", "Show or set the session's mode", _mode, " | ".join(MODES)),
    Builtin("plan", "Show the session's plan", _plan),
    Builtin("agent", "List the agent profiles, or run the session under one", _agent, "[name]"),
    Builtin("undo", "Undo the file changes of the last turn that changed files", _undo),
    Builtin("rewind", "List the turns that changed files, or undo the last N", _rewind, "[N]"),
    Builtin("help", "List the commands", _help),
)
"""The built-in commands, one line each (a new one: its line, and what it needs on the host)."""
_BUILTIN_NAMES = {builtin.name: builtin for builtin in BUILTINS}
_BUILTIN_INFOS = tuple(builtin.info() for builtin in BUILTINS)


# -- custom commands ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CustomCommand:
    name: str
    source: CommandSource
    path: str
    body: str
    description: str = ""
    argument_hint: str | None = None
    model: str | None = None
    allowed_tools: tuple[str, ...] | None = None

    def info(self) -> CommandInfo:
        return CommandInfo(
            name=self.name,
            description=self.description,
            argument_hint=self.argument_hint,
            source=self.source,
        )


@dataclass
class Loaded:
    """The custom commands of a session (by name, the winner of each name) and the warnings."""

    commands: dict[str, CustomCommand] = field(default_factory=dict)
    warnings: list[RunWarning] = field(default_factory=list)

    def listing(self, prompts: Sequence[SourcePrompt] = ()) -> list[CommandInfo]:
        """Every command: the built-ins first, then the custom ones and the MCP prompts by name
        (an MCP prompt hides a workspace file of its name, not a user's)."""
        infos = {prompt.name: prompt_info(prompt) for prompt in prompts}
        for command in self.commands.values():
            if command.source == "user" or command.name not in infos:
                infos[command.name] = command.info()
        return [*_BUILTIN_INFOS, *(infos[name] for name in sorted(infos))]


def user_commands_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``<config>/tether/commands`` (beside the user's ``config.toml``)."""
    config = user_config_path(environ)
    return None if config is None else config.parent / "commands"


def load_commands(user_dir: Path | None, workspace: Path | None) -> Loaded:
    """The custom commands of a session in ``workspace`` (blocking: run it on a thread)."""
    loaded = Loaded()
    if user_dir is not None:
        _load_folder(loaded, user_dir, "user", inside=None)
    if workspace is not None:
        _load_folder(loaded, workspace / WORKSPACE_COMMANDS, "workspace", inside=workspace)
    return loaded


def _load_folder(loaded: Loaded, folder: Path, source: CommandSource, inside: Path | None) -> None:
    if not folder.is_dir():
        return
    if inside is not None and not Path(os.path.realpath(folder)).is_relative_to(
        os.path.realpath(inside)
    ):
        loaded.warnings.append(_warning(folder, "outside", "it resolves outside the workspace"))
        return
    for name, path in _command_files(folder, loaded.warnings):
        command = _read_command(path, name, source, inside, loaded.warnings)
        if command is not None:
            _add(loaded, command)


def _add(loaded: Loaded, command: CustomCommand) -> None:
    if command.name in _BUILTIN_NAMES:
        loaded.warnings.append(
            _warning(command.path, "shadowed", f"/{command.name} is a built-in command")
        )
        return
    known = loaded.commands.get(command.name)
    if known is not None:  # the user's were read first, and win
        loaded.warnings.append(
            _warning(command.path, "shadowed", f"/{command.name} is your own ({known.path})")
        )
        return
    loaded.commands[command.name] = command


def _command_files(folder: Path, warnings: list[RunWarning]) -> Iterator[tuple[str, Path]]:
    """``(name, path)`` of each ``.md`` entry under ``folder`` (a folder that is a link is not
    followed, nor one deeper than :data:`MAX_COMMAND_DEPTH`; past :data:`MAX_COMMAND_ENTRIES`
    entries the rest are left out)."""
    seen = 0
    pending: list[tuple[Path, tuple[str, ...]]] = [(folder, ())]
    while pending:
        directory, prefix = pending.pop()
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as exc:
            warnings.append(_warning(directory, "unreadable", f"cannot list it ({exc.strerror})"))
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_COMMAND_ENTRIES:
                detail = f"over {MAX_COMMAND_ENTRIES} entries; the rest are left out"
                warnings.append(_warning(folder, "truncated", detail))
                return
            if entry.is_dir(follow_symlinks=False):
                if _NAME_PART.fullmatch(entry.name) and len(prefix) < MAX_COMMAND_DEPTH:
                    pending.append((Path(entry.path), (*prefix, entry.name)))
                continue
            found = _command_file(entry, prefix, warnings)
            if found is not None:
                yield found


def _command_file(
    entry: os.DirEntry[str], prefix: tuple[str, ...], warnings: list[RunWarning]
) -> tuple[str, Path] | None:
    """A command file's ``(name, path)``, or None. Any entry named ``*.md`` that is no folder
    is one (a FIFO or a device is refused, with a warning, by the read)."""
    if not entry.name.endswith(".md") or entry.name.startswith("."):
        return None
    stem = entry.name[: -len(".md")]
    if not _NAME_PART.fullmatch(stem):
        warnings.append(_warning(entry.path, "bad_name", "its name is not a command name"))
        return None
    return ":".join((*prefix, stem)), Path(entry.path)


def _read_command(
    path: Path,
    name: str,
    source: CommandSource,
    inside: Path | None,
    warnings: list[RunWarning],
) -> CustomCommand | None:
    try:
        data = read_repo_file(path, max_bytes=MAX_COMMAND_BYTES, inside=inside)
    except RepoFileError as exc:
        warnings.append(_warning(path, exc.reason.value, exc.detail))
        return None
    if data is None:
        return None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        warnings.append(_warning(path, "not_utf8", "it is not UTF-8"))
        return None
    try:
        document = parse_document(text)
        fields = _known_fields(document.fields)
        body = document.body
        tools = list_field(fields, "allowed_tools")
        return CustomCommand(
            name=name,
            source=source,
            path=str(path),
            body=body,
            description=text_field(fields, "description") or _first_line(body),
            argument_hint=text_field(fields, "argument_hint") or None,
            model=text_field(fields, "model") or None,
            allowed_tools=None if tools is None else tuple(tools),
        )
    except FrontMatterError as exc:
        warnings.append(_warning(path, "front_matter", str(exc)))
        return None


def _known_fields(fields: dict[str, RawValue]) -> dict[str, RawValue]:
    """The fields commands know, under one name each (Claude Code's ``argument-hint`` or
    ``argumentHint``); the others are ignored. A field named twice is refused."""
    known: dict[str, RawValue] = {}
    for key, value in fields.items():
        name = _FRONT_MATTER_KEYS.get(key)
        if name is None:
            continue
        if name in known:
            raise FrontMatterError(f"`{key}` names a field given already")
        known[name] = value
    return known


def _first_line(body: str) -> str:
    line = next((line.strip() for line in body.splitlines() if line.strip()), "")
    return line if len(line) <= 80 else line[:79] + "…"


def _warning(path: Path | str, reason: str, detail: str) -> RunWarning:
    return RunWarning(
        code=ErrorCode.CONFIG_ERROR,
        message=f"command file {path} left out: {detail}",
        data={"path": str(path), "reason": reason},
    )


# -- invocation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    """``/name arguments`` at the start of a prompt's text."""

    name: str
    arguments: str


def invocation(prompt: Content) -> Invocation | None:
    """The command a prompt starts with: its text (a string), or its first text block's."""
    if isinstance(prompt, str):
        text = prompt
    else:
        text = next((block.text for block in prompt if isinstance(block, TextBlock)), "")
    text = text.lstrip()
    found = _INVOCATION.match(text)
    if found is None:
        return None
    return Invocation(found.group(1), text[found.end() :].strip())


def expand(body: str, arguments: str) -> str:
    """``body`` with ``$ARGUMENTS`` (the text after the name) and ``$1``...``$9`` (its words,
    quotes grouping as in a shell) replaced; a body with neither gets the arguments appended as
    a paragraph of their own."""
    try:
        words = shlex.split(arguments)
    except ValueError:  # an unbalanced quote: words as typed
        words = arguments.split()

    def replace(found: re.Match[str]) -> str:
        key = found.group(1)
        if key == "ARGUMENTS":
            return arguments
        index = int(key) - 1
        return words[index] if index < len(words) else ""

    text = _PLACEHOLDER.sub(replace, body).strip()
    if arguments and _PLACEHOLDER.search(body) is None:
        text = f"{text}\n\n{arguments}" if text else arguments
    return text


@dataclass(frozen=True)
class Expanded:
    """The run a prompt asks for: its params, and the metadata of its user message."""

    params: RunParams
    metadata: dict[str, Any] | None  # None: no command (the prompt as typed)


def expanded(
    params: RunParams,
    command: CustomCommand,
    called: Invocation,
    session_tools: list[str] | None = None,
) -> Expanded:
    """``params`` with the command's text as the prompt (in place of the first text block's),
    its model (unless the request named one) and its tools narrowed to ``allowed-tools``: of
    the request's tools, else of the session's, else those it names."""
    prompt = _with_text(params, expand(command.body, called.arguments))
    tools = params.tools
    if command.allowed_tools is not None:
        allowed = set(command.allowed_tools)
        narrowed = next(
            names for names in (tools, session_tools, command.allowed_tools) if names is not None
        )
        tools = [name for name in narrowed if name in allowed]
    update = {"prompt": prompt, "tools": tools, "model": params.model or command.model}
    source = {"name": command.name, "arguments": called.arguments, "source": command.source}
    return Expanded(params.model_copy(update=update), {COMMAND_KEY: source})


# -- MCP prompts -------------------------------------------------------------------------------

MCP_PREFIX = "mcp__"


def prompt_info(prompt: SourcePrompt) -> CommandInfo:
    hint = " ".join(
        f"<{argument.name}>" if argument.required else f"[{argument.name}]"
        for argument in prompt.arguments
    )
    return CommandInfo(
        name=prompt.name, description=prompt.description, argument_hint=hint or None, source="mcp"
    )


def prompt_arguments(prompt: SourcePrompt, text: str) -> dict[str, str]:
    """The arguments of ``/prompt text``: ``name=value`` words by name, the other words in the
    order the prompt declares its arguments (quotes group words as in a shell; the last
    argument takes the words left over). InvalidParams when a required one is missing, or
    words are given to a prompt that takes none."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: words as typed
        words = text.split()
    declared = [argument.name for argument in prompt.arguments]
    values: dict[str, str] = {}
    positional: list[str] = []
    for word in words:
        name, equals, value = word.partition("=")
        if equals and name in declared and name not in values:
            values[name] = value
        else:
            positional.append(word)
    free = [name for name in declared if name not in values]
    if positional and not free:
        raise InvalidParams.field(
            "prompt", f"/{prompt.name} takes no more arguments ({_usage(prompt)})"
        )
    for index, name in enumerate(free):
        if index >= len(positional):
            break
        last = index == len(free) - 1
        values[name] = " ".join(positional[index:]) if last else positional[index]
    missing = [a.name for a in prompt.arguments if a.required and a.name not in values]
    if missing:
        raise InvalidParams.field(
            "prompt", f"/{prompt.name} needs {', '.join(missing)} ({_usage(prompt)})"
        )
    return values


def _usage(prompt: SourcePrompt) -> str:
    hint = prompt_info(prompt).argument_hint
    return f"usage: /{prompt.name}{' ' + hint if hint else ''}"


def _with_text(params: RunParams, text: str) -> Content:
    """``params``'s prompt with ``text`` in place of the first text block's (or the string)."""
    if isinstance(params.prompt, str):
        return text
    blocks = list(params.prompt)
    first = next(i for i, block in enumerate(blocks) if isinstance(block, TextBlock))
    blocks[first] = TextBlock(text=text)
    return blocks


async def prompt_run(params: RunParams, prompt: SourcePrompt, called: Invocation) -> Expanded:
    """The run of an MCP prompt: its text from the server as the prompt."""
    arguments = prompt_arguments(prompt, called.arguments)
    try:
        text = await prompt.render(arguments)
    except ToolError as exc:
        raise InvalidParams.field("prompt", f"/{prompt.name}: {exc}") from None
    source = {"name": prompt.name, "arguments": called.arguments, "source": "mcp"}
    return Expanded(
        params.model_copy(update={"prompt": _with_text(params, text)}), {COMMAND_KEY: source}
    )


# -- a built-in's run --------------------------------------------------------------------------


async def answer(
    command: Builtin, called: Invocation, host: CommandHost, emit: Emit, run_id: str
) -> RunResult:
    """Run a built-in as a run of its own: ``run_started``, what its action emits (a compaction's
    events), its answer as one ``message_delta``, ``run_finished``. Nothing is stored but what
    the action itself stores."""
    session_id = host.session.session_id
    seq = itertools.count(1)

    def send(event: ProgressEvent) -> None:
        emit(ProgressParams(session_id=session_id, run_id=run_id, seq=next(seq), event=event))

    send(RunStarted(max_iterations=0, user_message_id=uuid7()))
    host.relay = lambda params: send(params.event)  # numbered in this run's sequence
    try:
        text = await command.action(host, called.arguments)
    except asyncio.CancelledError:
        send(RunFinished(stop_reason=StopReason.CANCELLED, iterations=0))
        raise
    except BaseException:
        send(RunFinished(stop_reason=StopReason.ERROR, iterations=0))
        raise
    send(MessageDelta(message_id=uuid7(), text=text))
    send(RunFinished(stop_reason=StopReason.END_TURN, iterations=0))
    return RunResult(
        run_id=run_id,
        session_id=session_id,
        stop_reason=StopReason.END_TURN,
        response=text,
        iterations=0,
    )


# -- the kernel's entry points -----------------------------------------------------------------


@dataclass(frozen=True)
class BuiltinCall:
    builtin: Builtin
    called: Invocation


Compactor = Callable[[CompactParams, Emit, str], Awaitable[CompactResult]]
"""The kernel's compaction of a session (params, emit, the run id), under a lease taken."""
PromptLister = Callable[[Session], Awaitable[Sequence[SourcePrompt]]]
"""The prompts of the session's sources of tools (its MCP servers, started as needed)."""


async def _no_prompts(session: Session) -> Sequence[SourcePrompt]:
    return ()


class AgentChoice(Protocol):
    """The kernel's agent profiles, as ``/agent`` uses them."""

    async def session_profiles(self, session: Session) -> list[AgentProfile]: ...

    async def set_agent(self, session_id: str, agent: str | None) -> Session: ...


class SlashCommands:
    """The commands of the kernel's sessions: listed, resolved from a prompt, answered."""

    def __init__(
        self,
        store: SessionStore,
        compact: Compactor,
        agents: AgentChoice,
        checkpoints: Checkpoints | None = None,
        prompts: PromptLister = _no_prompts,
    ) -> None:
        """``checkpoints``: what ``/undo`` and ``/rewind`` use (None: checkpoints are off);
        ``prompts``: the session's MCP servers' prompts, its ``/mcp__server__prompt`` commands."""
        self._store = store
        self._compact = compact
        self._agents = agents
        self._checkpoints = checkpoints
        self._prompts = prompts
        self._user_dir = user_commands_dir()  # the environment of the process, as it started

    async def listing(self, session: Session) -> CommandsResult:
        loaded = await self._load(session)
        commands = loaded.listing(await self._prompts(session))
        return CommandsResult(commands=commands, warnings=loaded.warnings or None)

    async def resolve(self, session: Session, params: RunParams) -> BuiltinCall | Expanded:
        """What a prompt asks for: a built-in, a custom command's run, else the prompt as
        typed (``Expanded`` without metadata). Files are read only for a prompt that starts
        with ``/name`` and names no built-in."""
        called = invocation(params.prompt)
        if called is None:
            return Expanded(params, None)
        found = _BUILTIN_NAMES.get(called.name)
        if found is not None:
            return BuiltinCall(found, called)
        command = (await self._load(session)).commands.get(called.name)
        if called.name.startswith(MCP_PREFIX) and (command is None or command.source != "user"):
            prompts = await self._prompts(session)
            prompt = next((p for p in prompts if p.name == called.name), None)
            if prompt is not None:
                return await prompt_run(params, prompt, called)
        if command is None:
            return Expanded(params, None)
        return expanded(params, command, called, session.tools)

    async def answer(
        self, call: BuiltinCall, session: Session, run_id: str, emit: Emit
    ) -> RunResult:
        """Run a built-in under the lease the run took."""

        async def listing() -> list[CommandInfo]:
            return (await self._load(session)).listing(await self._prompts(session))

        compact = CompactParams(session_id=session.session_id)
        host = CommandHost(
            session=session,
            store=self._store,
            compact=lambda relay: self._compact(compact, relay, run_id),
            commands=listing,
            profiles=lambda: self._agents.session_profiles(session),
            set_agent=lambda name: self._agents.set_agent(session.session_id, name),
        )
        checkpoints = self._checkpoints
        if checkpoints is not None:

            async def turns() -> list[CheckpointInfo]:
                listed = CheckpointsParams(session_id=session.session_id)
                return (await checkpoints.list_checkpoints(listed)).checkpoints

            async def rewind(count: int) -> RewindResult:
                prompt = await checkpoints.last_turn(session.session_id, count)
                params = RewindParams(session_id=session.session_id, message_id=prompt)
                return await checkpoints.rewind_held(session, params, run_id)

            host.turns, host.rewind = turns, rewind
        return await answer(call.builtin, call.called, host, emit, run_id)

    async def _load(self, session: Session) -> Loaded:
        """The session's custom commands, read on a thread (again at each use: a file added or
        edited since is seen)."""
        workspace = None
        if session.workspace.startswith("file://"):
            workspace = local_path(session.workspace)
        user_dir = self._user_dir
        if _surely_none(user_dir) and _surely_none(workspace and workspace / WORKSPACE_COMMANDS):
            return Loaded()  # the usual case: no hop to a thread and back
        loaded = await asyncio.to_thread(load_commands, user_dir, workspace)
        for warning in loaded.warnings:
            logger.warning("%s", warning.message)
        return loaded


def _surely_none(folder: Path | None) -> bool:
    """Whether there is surely no commands folder there (one ``lstat``, cheap enough for the
    event loop); False means "look" (:func:`load_commands` decides the rest)."""
    if folder is None:
        return True
    try:
        os.lstat(folder)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return False
