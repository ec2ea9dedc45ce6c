"""tether as a language server any LSP client can use without a plugin.

:func:`register` adds the standard LSP methods to the pygls server (tether answers ``initialize``
itself, with the standard capabilities beside its own: :mod:`tether.protocol.lifecycle`):

- text sync: ``didOpen``/``didChange``/``didClose`` keep the client's buffers, which the file
  tools read (:mod:`tether.lsp.documents`); ``didSave``, watched files and other notifications
  are taken quietly (``workspace/didChangeConfiguration`` never comes here: the wire hands it to
  the App, :meth:`tether.backend.Backend.reconfigure`, before pygls could see it);
- ``textDocument/codeAction``: "Ask tether…", "Explain", "Fix" on a selection or a diagnostic;
- ``workspace/executeCommand``: ``tether.ask``, ``tether.cancel``, ``tether.newSession``,
  ``tether.undo``
  (:mod:`tether.lsp.runs`); an unknown command is -32602 naming it;
- ``window/workDoneProgress/cancel`` stops the run that reports on that token, as
  ``kernel/cancel`` does (for ``kernel/run`` tokens and the turns' own);
- ``$/setTrace``; tether's warnings go out as ``window/logMessage`` and, while traced, its info
  lines as ``$/logTrace`` (:mod:`tether.rpc.client_log`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.workspace import Workspace

from tether.lsp.actions import AskArguments, Diagnostic, Range, code_actions
from tether.lsp.documents import Buffers
from tether.lsp.runs import Runs
from tether.protocol import InvalidParams
from tether.protocol.lifecycle import LSP_COMMANDS
from tether.rpc import client_log
from tether.rpc.app import FaceHooks
from tether.rpc.handlers import validate_params

if TYPE_CHECKING:
    from tether.lsp.server import TetherServer

logger = logging.getLogger(__name__)

__all__ = ["register"]

# Notifications a client sends that tether has nothing to do with: taken without a word.
QUIET = (
    lsp.TEXT_DOCUMENT_DID_SAVE,
    lsp.TEXT_DOCUMENT_WILL_SAVE,
    lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
    lsp.WORKSPACE_DID_CREATE_FILES,
    lsp.WORKSPACE_DID_RENAME_FILES,
    lsp.WORKSPACE_DID_DELETE_FILES,
)

# pygls's own handlers of these are replaced: they log at warning level or answer wrongly.
REPLACED = (lsp.WORKSPACE_EXECUTE_COMMAND, lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)


def register(server: TetherServer) -> Runs:
    """Serve the standard LSP methods on ``server`` (called once, as it is made)."""
    protocol = server.protocol
    app = server.app
    buffers = Buffers(_workspace(server))
    protocol.use_workspace(buffers.workspace)
    runs = Runs(app, buffers)
    for method in REPLACED:
        protocol.drop_builtin(method)
    _documents(server, buffers)
    server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION)(_code_actions(server, runs))
    server.feature(lsp.WORKSPACE_EXECUTE_COMMAND)(_commands(runs))

    def progress_cancel(params: lsp.WorkDoneProgressCancelParams) -> None:
        if runs.cancel_token(params.token):
            return
        future = protocol.progress.tokens.get(params.token)
        if future is not None:
            future.cancel()
        else:
            logger.debug("window/workDoneProgress/cancel for no run: %r", params.token)

    server.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)(progress_cancel)
    app.attach_face(
        FaceHooks(
            tool_layer=runs.tools,
            approver=runs.approve,
            stop=runs.aclose,
            trace=lambda: _value(protocol.trace),  # for the client log (App.initialize)
        )
    )
    return runs


def _documents(server: TetherServer, buffers: Buffers) -> None:
    """Text sync (pygls's handlers keep the documents), the quiet notifications, ``$/setTrace``."""

    def reported(params: Any) -> None:
        buffers.reported(params.text_document.uri)

    for method in (
        lsp.TEXT_DOCUMENT_DID_OPEN,
        lsp.TEXT_DOCUMENT_DID_CHANGE,
        lsp.TEXT_DOCUMENT_DID_CLOSE,
    ):
        server.feature(method)(reported)
    for method in QUIET:
        server.feature(method)(_ignore)

    def set_trace(params: lsp.SetTraceParams) -> None:
        client_log.trace_set(_value(params.value))

    server.feature(lsp.SET_TRACE)(set_trace)


def _code_actions(
    server: TetherServer, runs: Runs
) -> Callable[[lsp.CodeActionParams], Awaitable[list[dict[str, Any]]]]:
    converter = server.protocol.converter

    async def code_action(params: lsp.CodeActionParams) -> list[dict[str, Any]]:
        uri = params.text_document.uri
        selection = Range.model_validate(converter.unstructure(params.range))
        diagnostics = [
            Diagnostic.model_validate(converter.unstructure(d)) for d in params.context.diagnostics
        ]
        return code_actions(uri, selection, diagnostics, await runs.commands(uri))

    return code_action


def _commands(runs: Runs) -> Callable[[lsp.ExecuteCommandParams], Awaitable[Any]]:
    async def execute_command(params: lsp.ExecuteCommandParams) -> Any:
        if params.command == "tether.ask":
            return await runs.ask(_ask_arguments(params.arguments))
        if params.command == "tether.cancel":
            return await runs.cancel()
        if params.command == "tether.newSession":
            return await runs.new_session(_ask_arguments(params.arguments).uri)
        if params.command == "tether.undo":
            return await runs.undo(_ask_arguments(params.arguments).uri)
        raise InvalidParams(
            f"unknown command {params.command!r}: tether serves {', '.join(LSP_COMMANDS)}"
        )

    return execute_command


def _ask_arguments(arguments: Sequence[Any] | None) -> AskArguments:
    """``tether.ask``'s one argument: an object (:class:`AskArguments`) or a prompt string."""
    first = arguments[0] if arguments else {}
    if isinstance(first, str):
        first = {"prompt": first}
    if not isinstance(first, dict):
        raise InvalidParams("tether.ask takes one object argument (or a prompt string)")
    return validate_params(AskArguments, first)


def _workspace(server: TetherServer) -> Workspace:
    """pygls's document store for the folders the client gave in ``initialize``."""
    client = server.app.client
    folders = client.workspace_folders or [] if client is not None else []
    root = folders[0].uri if folders else (client.root_uri if client is not None else None)
    return Workspace(
        root,
        lsp.TextDocumentSyncKind.Incremental,
        [lsp.WorkspaceFolder(uri=f.uri, name=f.name or f.uri) for f in folders],
    )


def _ignore(params: Any) -> None:
    return None


def _value(trace: Any) -> str:
    """A ``TraceValue`` (or its string) as ``off``, ``messages`` or ``verbose``."""
    return str(getattr(trace, "value", trace))
