"""``tether`` command line: ``serve`` (the editor-facing server), ``acp`` (the same as an Agent
Client Protocol agent), ``run`` (headless), ``schema``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from tether import __version__
from tether.escapes import inert

if TYPE_CHECKING:
    import argparse

    from tether.rpc.app import App
    from tether.rpc.wire import Wire


EDITOR_COMMANDS = ("serve", "acp")
"""What editors spawn, without options: read without building the parser."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(InertFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    from tether.secrets import redact_logs

    redact_logs()  # the secrets a run knows never reach the log
    command: str = args.command or "serve"
    if command == "serve":
        return _serve(args.tcp)
    if command == "schema":
        return _schema()
    if command == "acp":
        return _acp()
    return _run(args)


class InertFormatter(logging.Formatter):
    """Log lines with their control characters shown as escapes (but for line breaks and
    tabs): a log line quotes what tether did not write (a repository's file names and config
    keys, a server's messages), and the terminal or log viewer that shows tether's stderr must
    not act on a control sequence in it."""

    def format(self, record: logging.LogRecord) -> str:
        return inert(super().format(record))


def _arguments(argv: Sequence[str]) -> SimpleNamespace:
    """The command line's arguments. ``tether serve`` and ``tether acp`` without options, as
    editors spawn them, are read without argparse: importing it and building the parser is
    ~10 ms of every start, which the editor waits for before ``initialize`` is answered."""
    if len(argv) <= 1 and all(command in EDITOR_COMMANDS for command in argv):
        level = os.environ.get("TETHER_LOG_LEVEL", "warning")
        return SimpleNamespace(command=argv[0] if argv else None, log_level=level, tcp=None)
    return SimpleNamespace(**vars(_parser().parse_args(argv)))


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="tether", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    parser.add_argument(
        "--log-level",
        default=os.environ.get("TETHER_LOG_LEVEL", "warning"),
        choices=["debug", "info", "warning", "error"],
        help="log level (logs go to stderr; default: $TETHER_LOG_LEVEL or warning)",
    )
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve JSON-RPC on stdio (the default)")
    serve.add_argument("--tcp", metavar="HOST:PORT", help="serve one client over TCP instead")
    commands.add_parser("schema", help="print the protocol's JSON Schema")
    commands.add_parser("acp", help="serve the Agent Client Protocol (v1, NDJSON) on stdio")
    run = commands.add_parser("run", help="run one turn of the kernel without an editor")
    run.add_argument("prompt")
    run.add_argument("--workspace", type=Path, default=Path.cwd())
    run.add_argument(
        "--session",
        help="continue this session, created under this id when there is none (default: a new one)",
    )
    run.add_argument("--script", type=Path, help="use the scripted provider with this script")
    run.add_argument("--max-iterations", type=int)
    run.add_argument("--model")
    run.add_argument("--json", action="store_true", help="print the events as JSON lines")
    run.add_argument(
        "--approval",
        choices=("ask", "auto", "deny"),
        help="tools.approval for writes and commands (ask: on a terminal, asks you; else refuses)",
    )
    return parser


def _serve(tcp: str | None) -> int:
    from tether.rpc.app import App
    from tether.rpc.transport import LspFace, serve_stdio, serve_tcp

    lsp = LspFace(load=_load_lsp, attach=_attach_lsp)
    if tcp is None:
        return asyncio.run(serve_stdio(App(), lsp))
    host, _, port = tcp.rpartition(":")
    return asyncio.run(serve_tcp(App(), lsp, host or "127.0.0.1", int(port)))


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


def _run(args: SimpleNamespace) -> int:
    from tether.headless import RunOptions, run_headless

    options = RunOptions(
        prompt=args.prompt,
        workspace=args.workspace,
        session=args.session,
        script=args.script,
        max_iterations=args.max_iterations,
        model=args.model,
        json=args.json,
        approval=args.approval,
    )
    return asyncio.run(run_headless(options))
