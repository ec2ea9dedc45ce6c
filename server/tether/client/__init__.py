"""Clients of a tether server over a spawned process's stdio.

- :class:`TetherClient`: the async client of the whole contract, with typed results and errors.
- :class:`Connection`: the raw JSON-RPC connection it is built on (any message, even a bad one).
"""

from tether.client.connection import Connection
from tether.client.errors import (
    ERRORS,
    ConfigInvalidError,
    InternalServerError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    ParseFailedError,
    PromptRefusedError,
    ProviderFailedError,
    RequestCancelledError,
    RpcError,
    ServerNotInitializedError,
    SessionBusyError,
    SessionNotFoundError,
    StoreFailedError,
    TetherClientError,
    WorkspaceInvalidError,
    error_from,
)
from tether.client.run import Run
from tether.client.tether_client import (
    UNSET,
    PermissionHandler,
    PermissionOutcome,
    TetherClient,
    workspace_uri,
)
from tether.protocol.kernel import PermissionParams
from tether.protocol.tools import ProposedChange

__all__ = [
    "ERRORS",
    "UNSET",
    "ConfigInvalidError",
    "Connection",
    "InternalServerError",
    "InvalidParamsError",
    "InvalidRequestError",
    "MethodNotFoundError",
    "ParseFailedError",
    "PermissionHandler",
    "PermissionOutcome",
    "PermissionParams",
    "PromptRefusedError",
    "ProposedChange",
    "ProviderFailedError",
    "RequestCancelledError",
    "RpcError",
    "Run",
    "ServerNotInitializedError",
    "SessionBusyError",
    "SessionNotFoundError",
    "StoreFailedError",
    "TetherClient",
    "TetherClientError",
    "WorkspaceInvalidError",
    "error_from",
    "workspace_uri",
]
