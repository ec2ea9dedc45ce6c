"""``tether`` command line: ``serve`` (the editor-facing server), ``acp`` (the same as an Agent
Client Protocol agent), ``run`` (one turn, headless), ``chat`` (a conversation on a terminal),
``schema``. Bare ``tether`` chats on a terminal and serves on a pipe."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from tether import __version__
from tether.escapes import inert

if TYPE_CHECKING:
    from tether.rpc.app import App
    from tether.rpc.wire import Wire


logger = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "warning", "error")


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
    parser = _parser()
    args = parser.parse_args(arguments)
    log_level = _log_level(args)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(InertFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    from tether.secrets import redact_logs

    redact_logs()  # the secrets a run knows never reach the log
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


def _on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the interpreter's last flush must not
    fail again on the way out."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _log_level(args: argparse.Namespace) -> str:
    """``--log-level`` (before or after the command), else ``$TETHER_LOG_LEVEL``, else warning."""
    given: str | None = getattr(args, "log_level", None)
    if given is not None:
        return given
    level = os.environ.get("TETHER_LOG_LEVEL", "").strip().lower() or "warning"
    if level not in LOG_LEVELS:
        raise UsageError(
            f"tether: error: TETHER_LOG_LEVEL={level!r} is not a log level: use one of "
            f"{', '.join(LOG_LEVELS)}"
        )
    return level


class InertFormatter(logging.Formatter):
    """Log lines with their control characters shown as escapes (but for line breaks and
    tabs): a log line quotes what tether did not write (a repository's file names and config
    keys, a server's messages), and the terminal or log viewer that shows tether's stderr must
    not act on a control sequence in it."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record))


class _Parser(argparse.ArgumentParser):
    """Misuse said in one line (``tether run: error: …``), the way to the help named."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
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
    run.add_argument("prompt", help="what to ask; - reads it from stdin")
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
    return parser


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        choices=LOG_LEVELS,
        help="log level (logs go to stderr; default: $TETHER_LOG_LEVEL or warning); passed on "
        "to the server run and chat start",
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
        help="use the scripted provider with the demo script shipped with tether",
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
    host, colon, port = value.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535 or (colon and not host):
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with a port from 1 to 65535, got {value!r}"
        )
    return host or "127.0.0.1", int(port)


def _iterations(value: str) -> int:
    if not value.strip().isdigit() or not 1 <= int(value) <= 1000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1000, got {value!r}")
    return int(value)


def _directory(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is not a directory")
    return path


def _file(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is not a file")
    return path


def _serve(tcp: tuple[str, int] | None) -> int:
    from tether.rpc.app import App
    from tether.rpc.transport import LspFace, serve_stdio, serve_tcp

    lsp = LspFace(load=_load_lsp, attach=_attach_lsp)
    logger.debug("tether %s serving on %s", __version__, "stdio" if tcp is None else "TCP")
    if tcp is None:
        _check_stdin_is_a_stream()
        return asyncio.run(serve_stdio(App(), lsp))
    host, port = tcp
    try:
        return asyncio.run(serve_tcp(App(), lsp, host, port))
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

    return asyncio.run(serve_acp(AcpAgent()))


def _schema() -> int:
    import orjson

    from tether.protocol.schema import protocol_schema

    sys.stdout.buffer.write(orjson.dumps(protocol_schema(), option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def _run(args: argparse.Namespace, log_level: str) -> int:
    from tether.headless import RunOptions, run_headless

    prompt: str = args.prompt
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


def _chat(args: argparse.Namespace, log_level: str) -> int:
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
        return Path(__file__).parent / "demo-script.json"
    script: Path | None = args.script
    return script
