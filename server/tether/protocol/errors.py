"""Error codes of the wire contract and the exceptions that carry them.

Hierarchy::

    TetherError                 code, message, data: becomes one JSON-RPC error response
    ├── InvalidParams           -32602  bad or missing params (``data.fields`` lists them)
    ├── InvalidRequest          -32600  not a valid request in this state
    ├── ServerNotInitialized    -32002  a request before ``initialize``
    ├── RequestCancelled        -32800  ``$/cancelRequest``; ``data`` is the partial result
    ├── SessionNotFound         -32010  unknown, deleted or expired session
    ├── SessionBusy             -32011  a run is still going on that session
    ├── ProviderError           -32012  the model endpoint failed after retries
    ├── ConfigError             -32013  invalid configuration
    └── WorkspaceError          -32014  workspace missing, or a path outside it

Nothing here does I/O; the rpc layer turns any ``TetherError`` into a response in one place.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ErrorCode(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SERVER_NOT_INITIALIZED = -32002
    REQUEST_CANCELLED = -32800
    SESSION_NOT_FOUND = -32010
    SESSION_BUSY = -32011
    PROVIDER_ERROR = -32012
    CONFIG_ERROR = -32013
    WORKSPACE_ERROR = -32014


class TetherError(Exception):
    """An error the client is told about: a code, a message and optional JSON ``data``."""

    code: ErrorCode = ErrorCode.INTERNAL_ERROR

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidParams(TetherError):
    code = ErrorCode.INVALID_PARAMS

    @classmethod
    def field(cls, field: str, message: str) -> InvalidParams:
        """An error about one named field."""
        return cls(f"{field}: {message}", {"fields": [{"field": field, "message": message}]})


class InvalidRequest(TetherError):
    code = ErrorCode.INVALID_REQUEST


class ServerNotInitialized(TetherError):
    code = ErrorCode.SERVER_NOT_INITIALIZED


class RequestCancelled(TetherError):
    code = ErrorCode.REQUEST_CANCELLED


class SessionNotFound(TetherError):
    code = ErrorCode.SESSION_NOT_FOUND

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session not found: {session_id}", {"sessionId": session_id})
        self.session_id = session_id


class SessionBusy(TetherError):
    code = ErrorCode.SESSION_BUSY

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session is busy with a run: {session_id}", {"sessionId": session_id})


class ProviderError(TetherError):
    code = ErrorCode.PROVIDER_ERROR


class ConfigError(TetherError):
    code = ErrorCode.CONFIG_ERROR


class WorkspaceError(TetherError):
    code = ErrorCode.WORKSPACE_ERROR
