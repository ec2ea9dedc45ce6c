"""Error codes of the wire contract and the exceptions that carry them.

Hierarchy::

    TetherError                 code, message, data: becomes one JSON-RPC error response
    ├── InvalidParams           -32602  bad or missing params (``data.fields`` lists them)
    ├── InvalidRequest          -32600  not a valid request in this state
    ├── ServerNotInitialized    -32002  a request before ``initialize``
    ├── RequestCancelled        -32800  ``$/cancelRequest``; ``data`` is the partial result
    ├── SessionNotFound         -32010  unknown, deleted or expired session
    ├── SessionBusy             -32011  a run is still going on that session (in any process)
    │   └── RunLeaseLost        -32011  a run lost its lease on the session and stopped
    ├── ProviderError           -32012  the model endpoint failed after retries
    ├── ConfigError             -32013  invalid configuration
    ├── WorkspaceError          -32014  workspace missing, or a path outside it
    ├── StoreError              -32015  the session store failed (``data.reason`` says how)
    └── PromptRefused           -32016  a ``user_prompt_submit`` hook refused the prompt

Nothing here does I/O; the rpc layer turns any ``TetherError`` into a response in one place.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Literal


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
    STORE_ERROR = -32015
    PROMPT_REFUSED = -32016


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


Holder = Literal["this-process", "another-process"]
"""Who holds a session's run lease, as ``SessionBusy`` tells the client."""


class SessionBusy(TetherError):
    """A run holds the session's lease: ``data`` is ``{sessionId, runId, holder}``."""

    code = ErrorCode.SESSION_BUSY

    def __init__(
        self, session_id: str, run_id: str | None = None, holder: Holder | None = None
    ) -> None:
        data: dict[str, str] = {"sessionId": session_id}
        if run_id is not None:
            data["runId"] = run_id
        if holder is not None:
            data["holder"] = holder
        where = {"this-process": " in this process", "another-process": " in another process"}
        super().__init__(
            f"session is busy with a run{where.get(holder or '', '')}: {session_id}", data
        )
        self.session_id = session_id
        self.run_id = run_id
        self.holder = holder


class RunLeaseLost(SessionBusy):
    """The run ``run_id`` no longer holds the session's lease (its process was suspended or cut
    off from the database for longer than the lease): its writes are refused and it stops.
    ``data`` is ``{sessionId, runId, leaseLost: true}``."""

    def __init__(self, session_id: str, run_id: str) -> None:
        super().__init__(session_id, run_id)
        self.message = (
            f"the run {run_id} lost its lease on session {session_id} (its process could not "
            "renew it in time: see sessions.lease), so it stopped"
        )
        self.args = (self.message,)
        self.data = {"sessionId": session_id, "runId": run_id, "leaseLost": True}


class ProviderError(TetherError):
    code = ErrorCode.PROVIDER_ERROR


class ConfigError(TetherError):
    code = ErrorCode.CONFIG_ERROR


class WorkspaceError(TetherError):
    code = ErrorCode.WORKSPACE_ERROR


StoreFault = Literal["disk-full", "read-only", "corrupt", "unreachable", "replaced", "locked", "io"]
"""Why the session store failed, as ``StoreError`` tells the client (``data.reason``):

- ``disk-full``: no space left where the store keeps its data;
- ``read-only``: the store's files (or the database) may not be written;
- ``corrupt``: the store's data is damaged;
- ``unreachable``: the database cannot be reached or its file cannot be opened;
- ``replaced``: the SQLite file was deleted or replaced under the server;
- ``locked``: another process held the database's lock for longer than tether waits;
- ``io``: the disk failed a read or a write (a failing disk, a file size limit).
"""


class StoreError(TetherError):
    """The session store failed the request: ``data`` is ``{reason}`` (a :data:`StoreFault`)."""

    code = ErrorCode.STORE_ERROR

    def __init__(self, reason: StoreFault, message: str) -> None:
        super().__init__(message, {"reason": reason})
        self.reason: StoreFault = reason


class PromptRefused(TetherError):
    """A ``user_prompt_submit`` hook refused the prompt: the run recorded nothing. ``data`` is
    ``{hook, reason}`` (the hook's name, and what it said, with the configured secrets
    redacted)."""

    code = ErrorCode.PROMPT_REFUSED

    def __init__(self, hook: str, reason: str) -> None:
        super().__init__(
            f"the prompt was refused by a hook: {reason}", {"hook": hook, "reason": reason}
        )
