"""The tether language server: pygls's server with tether's protocol and converter.

The place where standard LSP features (``textDocument/*``, ``workspace/*``...) are registered.
tether's own methods (``App.methods``) are not: the wire dispatches them without pygls.
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types as lsp
from pygls.exceptions import FeatureRequestError
from pygls.lsp.server import LanguageServer

from tether import __version__
from tether.lsp import register as register_lsp
from tether.lsp.converter import make_converter
from tether.lsp.pygls_protocol import TetherProtocol
from tether.rpc.app import App
from tether.rpc.wire import Wire

logger = logging.getLogger(__name__)


class TetherServer(LanguageServer):
    protocol: TetherProtocol

    def __init__(self, app: App, wire: Wire) -> None:
        super().__init__(
            name="tether",
            version=__version__,
            text_document_sync_kind=lsp.TextDocumentSyncKind.None_,
            protocol_cls=TetherProtocol,
            converter_factory=make_converter,
        )
        self.app = app
        register_lsp(self)  # the standard LSP methods: text sync, code actions, commands
        self.protocol.bind(wire)  # last: the messages waiting for pygls are handled at once

    def report_server_error(self, error: Exception, source: Any) -> None:
        """For the log, not a popup. A request has been answered with its error already (and an
        unexpected exception was logged with its traceback where it was answered), so that is
        routine; anything else is an error."""
        name = getattr(source, "__name__", source)
        if source is FeatureRequestError:
            logger.debug("%s: %s", name, error)
        else:
            logger.error("%s: %s", name, error)
