"""What tether serves, independent of the JSON-RPC machinery: its methods and its handshake."""

from __future__ import annotations

from tether import __version__
from tether.protocol import (
    InitializeParams,
    InitializeResult,
    ServerCapabilities,
    ServerInfo,
    SessionCapabilities,
)
from tether.rpc.handlers import Handler, session_methods
from tether.sessions import MemoryStore, SessionService, SessionStore


class App:
    """The services behind the methods, and the table of request methods they answer."""

    def __init__(self, store: SessionStore | None = None) -> None:
        self.sessions = SessionService(store or MemoryStore())
        self.methods: dict[str, Handler] = session_methods(self.sessions)
        self.client: InitializeParams | None = None

    def initialize(self, params: InitializeParams) -> InitializeResult:
        """Record what the client told us and say what this server offers."""
        self.client = params
        self.sessions.set_default_workspace(_first_workspace(params))
        store = self.sessions.store
        return InitializeResult(
            server_info=ServerInfo(name="tether", version=__version__),
            capabilities=ServerCapabilities(
                sessions=SessionCapabilities(store=store.kind, fork=False, durable=store.durable),
                methods=sorted(self.methods),
            ),
        )


def _first_workspace(params: InitializeParams) -> str | None:
    if params.workspace_folders:
        return params.workspace_folders[0].uri
    return params.root_uri or params.root_path
