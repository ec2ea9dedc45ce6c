"""``tether`` command line: ``serve`` (the editor-facing server), ``acp`` (the same as an Agent
Client Protocol agent), ``run`` (one turn, headless), ``chat`` (a conversation on a terminal),
``schema``, and the setup commands ``doctor``, ``config show``, ``completion``. Bare ``tether``
chats on a terminal and serves on a pipe."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import stat
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from tether import __version__
from tether.escapes import inert

if TYPE_CHECKING:
    import argparse

    from tether.config import LogConfig
    from tether.rpc.app import App
    from tether.rpc.wire import Wire


logger = logging.getLogger(__name__)

_AnyParser = TypeVar("_AnyParser", bound="argparse.ArgumentParser")


class UsageError(Exception):
    """A command line tether cannot act on: said in one line on stderr, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """``tether``'s entry point: every misuse it can foresee ends in one line on stderr, never a
    traceback (a closed stdout, such as ``tether run --json | head``, ends quietly)."""
    try:
        return _main(argv)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 141  # as a shell reports a process that SIGPIPE ended
    except KeyboardInterrupt:
        return 130


def _main(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    spawned = _editor_command(arguments)
    if spawned is not None:
        _start(None)
        return _serve(None) if spawned == "serve" else _acp()
    parser = _parser()
    args = parser.parse_args(arguments)
    log_level: str | None = getattr(args, "log_level", None)  # before or after the command
    _start(log_level)
    command_handler = getattr(args, "handler", None)  # the commands that set one (doctor, ...)
    if command_handler is not None:
        return int(command_handler(args))
    command: str | None = args.command
    if command is None:  # bare ``tether``: a chat on a terminal, the server on a pipe
        command = "chat" if _on_terminal() else "serve"
        if command == "chat":
            args = parser.parse_args([*arguments, "chat"])
    if command == "serve":
        return _serve(getattr(args, "tcp", None))
    if command == "schema":
        return _schema()
    if command == "acp":
        return _acp()
    if command == "chat":
        return _chat(args, log_level)
    return _run(args, log_level)


EDITOR_COMMANDS = ("serve", "acp")


def _editor_command(arguments: Sequence[str]) -> str | None:
    """``serve`` or ``acp`` as editors spawn them (no option; bare ``tether`` on a pipe), known
    without building the parser: the editor waits for every ms before ``initialize``."""
    if len(arguments) == 1 and arguments[0] in EDITOR_COMMANDS:
        return arguments[0]
    return "serve" if not arguments and not _on_terminal() else None


def _start(log_level: str | None) -> None:
    """What every command does first: the log set up, the secrets it will know kept out of it."""
    _check_level_variable(os.environ)
    setup_logging(log_level)
    from tether.secrets import redact_logs

    redact_logs()  # the secrets a run knows never reach the log


def _on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the interpreter's last flush must not
    fail again on the way out."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _check_level_variable(environ: Mapping[str, str]) -> None:
    """``$TETHER_LOG_LEVEL`` naming no level is a usage error, said before anything runs."""
    level = environ.get(LEVEL_VARIABLE, "").strip()
    if level and level.lower() not in LOG_LEVELS:
        raise UsageError(
            f"tether: error: {LEVEL_VARIABLE}={level!r} is not a log level: use one of "
            f"{', '.join(LOG_LEVELS)}"
        )


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_LIBRARIES = ("httpx", "httpcore")
"""Loggers kept at warning: tether logs each provider request itself (without its query), and
httpcore's debug lines are one per socket event."""


def setup_logging(flag: str | None, environ: Mapping[str, str] = os.environ) -> None:
    """stderr, and ``log.file`` when set, at one level: ``--log-level``, else ``log.level``
    (its variable ``TETHER_LOG_LEVEL``, or the user file), else warning."""
    settings = _log_settings(environ)
    configured = settings.level if settings is not None else _environment_level(environ)
    level = (flag or configured or "warning").upper()
    formatter = InertFormatter(LOG_FORMAT)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if settings is not None and settings.file:
        file_handler = _log_file(settings.file, settings.max_bytes, settings.backups)
        if file_handler is not None:
            handlers.append(file_handler)
    for handler in handlers:
        handler.setFormatter(formatter)
        handler.setLevel(level)  # fixed: a client's $/setTrace does not reach them
    logging.basicConfig(level=level, handlers=handlers, force=True)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))


LOG_LEVELS = ("debug", "info", "warning", "error")
LEVEL_VARIABLE = "TETHER_LOG_LEVEL"
_LOG_SETTING = re.compile(
    r"""^\s*(\[\s*["']?log["']?\s*[\].]|["']?log["']?\s*[.=])""", re.MULTILINE
)


def _environment_level(environ: Mapping[str, str]) -> str | None:
    """``TETHER_LOG_LEVEL`` when it names a level (the configuration reports it otherwise)."""
    level = environ.get(LEVEL_VARIABLE, "").strip().lower()
    return level if level in LOG_LEVELS else None


def _log_settings(environ: Mapping[str, str]) -> LogConfig | None:
    """``[log]`` of the user file and the environment; None when they set nothing but a valid
    ``TETHER_LOG_LEVEL``, known without loading the configuration (its models cost a few
    hundred ms that a command's start need not wait for). A configuration that does not load
    is reported, and the log is set up without it."""
    if not _log_mentioned(environ):
        return None
    from tether.config import load_config
    from tether.protocol import ConfigError

    try:
        return load_config(workspace=None, environ=environ).log
    except ConfigError as exc:
        print(f"tether: the log is set up without log.*: {inert(exc.message)}", file=sys.stderr)
        return None


def _log_mentioned(environ: Mapping[str, str]) -> bool:
    for var, value in environ.items():
        if var.startswith("TETHER_LOG_") and value.strip():
            if var != LEVEL_VARIABLE or _environment_level(environ) is None:
                return True
    user_file = _user_file(environ)
    if user_file is None:
        return False
    try:
        return _LOG_SETTING.search(user_file.read_text("utf-8", "replace")) is not None
    except OSError:
        return False


def _user_file(environ: Mapping[str, str]) -> Path | None:
    from tether.paths import user_config_path

    path = user_config_path(environ)
    return path if path is not None and path.is_file() else None


def _log_file(name: str, max_bytes: int, backups: int) -> logging.Handler | None:
    """A rotating handler of ``log.file``; None (and a line on stderr) when it cannot be opened."""
    from logging.handlers import RotatingFileHandler

    path = Path(name).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        print(
            f"tether: log.file {inert(str(path))} cannot be opened ({reason}); "
            "logging to stderr only",
            file=sys.stderr,
        )
        return None


class InertFormatter(logging.Formatter):
    """Log lines with their control characters shown as escapes (but for line breaks and
    tabs): a log line quotes what tether did not write (a repository's file names and config
    keys, a server's messages), and the terminal or log viewer that shows tether's stderr must
    not act on a control sequence in it."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record))


def _parser() -> argparse.ArgumentParser:
    """The command line's parser (argparse is imported here: an editor's ``tether serve`` or
    ``tether acp`` needs none of it)."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        """Misuse said in one line (``tether run: error: …``), the way to the help named."""

        def error(self, message: str) -> NoReturn:
            raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")

    parser = _Parser(prog="tether", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    _add_log_level(parser)
    commands = parser.add_subparsers(
        dest="command",
        metavar="COMMAND",
        help="what to do (default: chat on a terminal, serve on a pipe)",
    )
    serve = commands.add_parser("serve", help="serve JSON-RPC on stdio (the default on a pipe)")
    _add_log_level(serve)
    serve.add_argument(
        "--tcp", metavar="HOST:PORT", type=_host_port, help="serve one client over TCP instead"
    )
    _add_log_level(commands.add_parser("schema", help="print the protocol's JSON Schema"))
    _add_log_level(
        commands.add_parser("acp", help="serve the Agent Client Protocol (v1, NDJSON) on stdio")
    )
    run = commands.add_parser("run", help="run one turn of the kernel without an editor")
    run.add_argument(
        "prompt",
        nargs="?",
        help=f"what to ask; - reads it from stdin (with --demo: {DEMO_PROMPT!r})",
    )
    _add_turn_options(run)
    run.add_argument(
        "--session",
        help="continue this session of the store; a new one when not given (an unknown id is "
        "an error)",
    )
    run.add_argument("--json", action="store_true", help="print the events as JSON lines")
    chat = commands.add_parser(
        "chat", help="talk with the agent on a terminal (the default on a terminal)"
    )
    _add_turn_options(chat)
    resume = chat.add_mutually_exclusive_group()
    resume.add_argument(
        "--continue",
        dest="continue_last",
        action="store_true",
        help="continue the workspace's last session",
    )
    resume.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="ID",
        help="continue session ID; without ID, choose among the workspace's sessions",
    )
    _add_setup_commands(commands)
    return parser


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    import argparse

    parser.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        choices=LOG_LEVELS,
        help="log level (logs go to stderr, and to log.file when set; default: log.level, "
        "$TETHER_LOG_LEVEL, or warning); passed on to the server run and chat start",
    )


def _add_turn_options(parser: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``chat`` share."""
    _add_log_level(parser)
    parser.add_argument(
        "--workspace",
        type=_directory,
        default=Path.cwd(),
        help="the workspace folder (default: the current directory)",
    )
    provider = parser.add_mutually_exclusive_group()
    provider.add_argument(
        "--script",
        type=_file,
        help="use the scripted provider with this script (JSON turns) instead of a model",
    )
    provider.add_argument(
        "--demo",
        action="store_true",
        help="play the demo script shipped with tether (no model, no key; a read-only tool call)",
    )
    parser.add_argument(
        "--max-iterations",
        type=_iterations,
        metavar="N",
        help="model calls a turn may make, 1 to 1000 (default: kernel.max_iterations)",
    )
    parser.add_argument("--model", help="the model to use (default: provider.model)")
    parser.add_argument(
        "--approval",
        choices=("ask", "auto", "deny"),
        help="tools.approval for writes and commands (ask: on a terminal, asks you; else refuses)",
    )


def _host_port(value: str) -> tuple[str, int]:
    import argparse

    host, colon, port = value.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535 or (colon and not host):
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with a port from 1 to 65535, got {value!r}"
        )
    return host or "127.0.0.1", int(port)


def _iterations(value: str) -> int:
    import argparse

    if not value.strip().isdigit() or not 1 <= int(value) <= 1000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1000, got {value!r}")
    return int(value)


def _directory(value: str) -> Path:
    import argparse

    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is not a directory")
    return path


def _file(value: str) -> Path:
    import argparse

    path = Path(value).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file")
    return path


EVENT_LOOP_VARIABLE = "TETHER_EVENT_LOOP"
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _event_loop(command: str) -> tuple[str, LoopFactory | None]:
    """The event loop a server runs on: uvloop when it is installed (the ``tether[fast]``
    extra), else asyncio's own; ``TETHER_EVENT_LOOP`` (``asyncio`` or ``uvloop``) chooses.
    uvloop's loop and transports are written in C: with many runs at once the server spends
    0-7% less CPU per run (``bench/http_bench.py``)."""
    wanted = os.environ.get(EVENT_LOOP_VARIABLE, "").strip().lower()
    if wanted not in ("", "asyncio", "uvloop"):
        raise UsageError(
            f"{command}: error: {EVENT_LOOP_VARIABLE} is {wanted!r}; expected asyncio or uvloop"
        )
    if wanted == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise UsageError(
                f"{command}: error: {EVENT_LOOP_VARIABLE}=uvloop, but uvloop is not installed "
                "(pip install 'tether[fast]')"
            ) from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def _run_server(main: Coroutine[Any, Any, int], factory: LoopFactory | None) -> int:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def _serve(tcp: tuple[str, int] | None) -> int:
    from tether.rpc.app import App
    from tether.rpc.transport import LspFace, serve_stdio, serve_tcp

    lsp = LspFace(load=_load_lsp, attach=_attach_lsp)
    loop, factory = _event_loop("tether serve")
    logger.debug(
        "tether %s serving on %s (event loop: %s)",
        __version__,
        "stdio" if tcp is None else "TCP",
        loop,
    )
    if tcp is None:
        _check_stdin_is_a_stream()
        return _run_server(_until_terminated(serve_stdio(App(), lsp)), factory)
    host, port = tcp
    try:
        return _run_server(_until_terminated(serve_tcp(App(), lsp, host, port)), factory)
    except OSError as exc:  # the port is taken, the host unknown or not this machine's
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"tether serve: error: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 1


def _check_stdin_is_a_stream() -> None:
    """stdio serving reads stdin as a stream (a pipe, a socket, a terminal): a file or
    ``/dev/null`` cannot be waited on, and would fail deep in the event loop."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        raise UsageError("tether serve: error: stdin is closed") from None
    if stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and not sys.stdin.isatty()):
        raise UsageError(
            "tether serve: error: stdin is a file, not a stream: an editor starts tether serve "
            "with pipes (or use --tcp HOST:PORT)"
        )


def _load_lsp() -> None:
    """Import the LSP face (pygls): on the server's background thread, off the event loop."""
    import tether.lsp.server  # noqa: F401


def _attach_lsp(app: App, wire: Wire) -> object:
    """The LSP face's pygls server, serving the standard LSP methods on ``wire``."""
    from tether.lsp.server import TetherServer

    return TetherServer(app, wire)


def _acp() -> int:
    from tether.acp.agent import AcpAgent
    from tether.acp.stdio import serve_acp

    loop, factory = _event_loop("tether acp")
    logger.debug("tether %s serving ACP on stdio (event loop: %s)", __version__, loop)
    return _run_server(_until_terminated(serve_acp(AcpAgent())), factory)


async def _until_terminated(serving: Coroutine[Any, Any, int]) -> int:
    """Serve until done; on ``SIGTERM``, stop as at the end of input (what runs is cancelled
    and answered, the stores closed) and exit 143. A second ``SIGTERM`` ends the process at
    once. A ``SIGTERM`` ignored when tether started stays ignored."""
    task = asyncio.ensure_future(serving)
    loop = asyncio.get_running_loop()
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        terminated = True
        loop.remove_signal_handler(signal.SIGTERM)  # the default again: the next one ends it
        task.cancel()

    handled = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if handled:
        loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await task
    except asyncio.CancelledError:
        if not terminated:
            raise
        return 128 + signal.SIGTERM
    finally:
        if handled and not terminated:
            loop.remove_signal_handler(signal.SIGTERM)


def _schema() -> int:
    import orjson

    from tether.protocol.schema import protocol_schema

    sys.stdout.buffer.write(orjson.dumps(protocol_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def _run(args: argparse.Namespace, log_level: str | None) -> int:
    from tether.headless import RunOptions, run_headless

    if args.prompt is None and not args.demo:
        raise UsageError("tether run: error: a prompt is needed, or --demo (see tether run --help)")
    prompt: str = args.prompt or DEMO_PROMPT
    if prompt == "-":
        prompt = sys.stdin.read()
        if not prompt.strip():
            raise UsageError("tether run: error: the prompt read from stdin is empty")
    options = RunOptions(
        prompt=prompt,
        workspace=args.workspace,
        session=args.session,
        script=_script(args),
        max_iterations=args.max_iterations,
        model=args.model,
        json=args.json,
        approval=args.approval,
        log_level=log_level,
    )
    return asyncio.run(run_headless(options))


def _chat(args: argparse.Namespace, log_level: str | None) -> int:
    if not _on_terminal():
        raise UsageError(
            "tether chat: error: needs a terminal (tether run answers one prompt anywhere)"
        )
    from tether.chat import ChatOptions, run_chat

    options = ChatOptions(
        workspace=args.workspace,
        script=_script(args),
        max_iterations=args.max_iterations,
        model=args.model,
        approval=args.approval,
        log_level=log_level,
        continue_last=args.continue_last,
        resume=args.resume,
    )
    return asyncio.run(run_chat(options))


def _script(args: argparse.Namespace) -> Path | None:
    """The scripted provider's script: ``--script``, or with ``--demo`` the one tether ships."""
    if args.demo:
        return demo_script()
    script: Path | None = args.script
    return script


DEMO_PROMPT = "What is in this folder?"


def demo_script() -> Path:
    """The demo script shipped in the package (``tether run --demo``)."""
    from importlib import resources

    return Path(str(resources.files("tether") / "demo" / "script.json"))


# --- setup: doctor, config show -------------------------------------------------------------------


def _add_setup_commands(commands: argparse._SubParsersAction[_AnyParser]) -> None:
    doctor = commands.add_parser(
        "doctor", help="check the provider, key, endpoint, model, store, sandbox and MCP servers"
    )
    doctor.add_argument(
        "--workspace",
        type=_directory,
        default=Path.cwd(),
        help="the workspace whose configuration is checked (default: the current directory)",
    )
    doctor.add_argument("--json", action="store_true", help="print the verdicts as JSON lines")
    doctor.set_defaults(handler=_doctor)
    config = commands.add_parser("config", help="show the configuration in force")
    config_commands = config.add_subparsers(
        dest="config_command", required=True, metavar="COMMAND", help="show"
    )
    show = config_commands.add_parser(
        "show", help="every key with its value (secrets masked) and the layer that set it"
    )
    show.add_argument(
        "--workspace",
        type=_directory,
        default=Path.cwd(),
        help="the workspace whose files are layered in (default: the current directory)",
    )
    show.add_argument("--json", action="store_true", help="print the keys as JSON lines")
    show.add_argument("--model", help="as `tether run --model` would set it (source: flag)")
    show.add_argument("--approval", choices=("ask", "auto", "deny"), help="as `tether run` would")
    show.set_defaults(handler=_config_show)
    completion = commands.add_parser(
        "completion",
        help="print the shell completion script (e.g. tether completion bash > "
        "~/.local/share/bash-completion/completions/tether)",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete")
    completion.set_defaults(handler=_completion)


def _doctor(args: argparse.Namespace) -> int:
    import orjson

    from tether.doctor import diagnose, failed, summary

    verdicts = asyncio.run(diagnose(args.workspace.resolve()))
    for verdict in verdicts:
        if args.json:
            print(orjson.dumps(verdict.as_json()).decode(), flush=True)
        else:
            print(inert(verdict.line()), flush=True)
    if not args.json:
        print(summary(verdicts))
    return 1 if failed(verdicts) else 0


def _workspace_file_left_out(error: Exception) -> None:
    print(f"tether config show: left out: {inert(str(error))}", file=sys.stderr)


def _config_show(args: argparse.Namespace) -> int:
    import orjson

    from tether.config import explain_config
    from tether.protocol import ConfigError

    flags: dict[str, dict[str, str]] = {}
    if args.model:
        flags["provider"] = {"model": args.model}
    if args.approval:
        flags["tools"] = {"approval": args.approval}
    try:
        entries = explain_config(
            workspace=args.workspace.resolve(),
            overlay=flags or None,
            overlay_source="flag",
            on_workspace_error=_workspace_file_left_out,
        )
    except ConfigError as exc:
        print(f"tether config show: {inert(exc.message)}", file=sys.stderr)
        return 1
    width = max(len(entry.key) for entry in entries)
    for entry in entries:
        value = orjson.dumps(entry.value).decode()
        if args.json:
            print(
                orjson.dumps(
                    {"key": entry.key, "value": entry.value, "source": entry.source}
                ).decode()
            )
        else:
            print(inert(f"{entry.key:<{width}} = {value}  # {entry.source}"))
    return 0


_PATH_ARGUMENTS = {"workspace": "DIRECTORY", "script": "FILE"}


def _completion(args: argparse.Namespace) -> int:
    """shtab's script for the shell, generated from this parser; paths complete as paths."""
    import shtab

    parser = _parser()
    for action in _actions(parser):
        kind = _PATH_ARGUMENTS.get(action.dest)
        if kind is not None:
            action.complete = getattr(shtab, kind)  # type: ignore[attr-defined]
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of ``parser`` and of its subcommands, at any depth."""
    import argparse

    found: list[argparse.Action] = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += _actions(child)
    return found
