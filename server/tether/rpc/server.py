"""The tether language server: lifecycle, capabilities and the method table."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from tether import __version__
from tether.protocol import (
    InitializeParams,
    InitializeResult,
    ServerCapabilities,
    ServerInfo,
    SessionCapabilities,
)
from tether.rpc.converter import make_converter
from tether.rpc.handlers import session_methods
from tether.rpc.protocol import TetherProtocol
from tether.sessions import MemoryStore, SessionService, SessionStore

logger = logging.getLogger(__name__)


class TetherServer(LanguageServer):
    protocol: TetherProtocol

    def __init__(self, store: SessionStore | None = None) -> None:
        super().__init__(
            name="tether",
            version=__version__,
            text_document_sync_kind=lsp.TextDocumentSyncKind.None_,
            protocol_cls=TetherProtocol,
            converter_factory=make_converter,
        )
        self.sessions = SessionService(store or MemoryStore())
        self.client: InitializeParams | None = None
        self._stopped: asyncio.Event | None = None
        for method, handle in session_methods(self.sessions).items():
            self.feature(method)(handle)

    def initialize(self, params: InitializeParams) -> InitializeResult:
        """Record what the client told us and say what this server offers."""
        self.client = params
        self.sessions.set_default_workspace(_first_workspace(params))
        store = self.sessions.store
        return InitializeResult(
            server_info=ServerInfo(name=self.name, version=self.version),
            capabilities=ServerCapabilities(
                sessions=SessionCapabilities(store=store.kind, fork=False, durable=store.durable),
                methods=sorted(self.protocol.fm.features),
            ),
        )

    @property
    def stopped(self) -> asyncio.Event:
        if self._stopped is None:
            self._stopped = asyncio.Event()
        return self._stopped

    def stop(self) -> None:
        """End serving (after ``exit``, or when the client goes away)."""
        self.stopped.set()

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Requests already answer with their error; the rest is for the log, not a popup.
        logger.error("%s: %s", getattr(source, "__name__", source), error)


def _first_workspace(params: InitializeParams) -> str | None:
    if params.workspace_folders:
        return params.workspace_folders[0].uri
    return params.root_uri or params.root_path
