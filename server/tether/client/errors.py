"""Error responses as exceptions: a class per error code of the contract (see :func:`error_from`).

Hierarchy (clients decide by class or by ``code``)::

    TetherClientError (alias RpcError)   code, message, data as the server sent them
    ├── ParseFailedError            -32700
    ├── InvalidRequestError         -32600
    ├── MethodNotFoundError         -32601  a method the server does not serve
    ├── InvalidParamsError          -32602  ``fields``: the offending wire paths
    ├── InternalServerError         -32603
    ├── ServerNotInitializedError   -32002
    ├── RequestCancelledError       -32800  ``partial``: the RunResult so far, for ``kernel/run``
    ├── SessionNotFoundError        -32010  ``session_id``
    ├── SessionBusyError            -32011  ``session_id``, ``run_id``, ``holder``, ``lease_lost``
    ├── ProviderFailedError         -32012
    ├── ConfigInvalidError          -32013  ``key``
    ├── WorkspaceInvalidError       -32014
    ├── StoreFailedError            -32015  ``reason``: disk-full, read-only, corrupt...
    └── PromptRefusedError          -32016  ``hook``, ``reason``: a hook refused the prompt

A code not in the table raises :class:`TetherClientError` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from tether.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tether.protocol.kernel import RunResult


class TetherClientError(Exception):
    """An error response of the server: ``code``, ``message`` and ``data`` as it sent them."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def _data_field(self, name: str) -> Any:
        return self.data.get(name) if isinstance(self.data, dict) else None


RpcError = TetherClientError
"""The name :class:`~tether.client.Connection` users know the base class by."""


class _CodedError(TetherClientError):
    """An error of one fixed code: constructed from the message and data alone."""

    CODE: ClassVar[int]

    def __init__(self, message: str, data: Any = None) -> None:
        super().__init__(int(self.CODE), message, data)


class ParseFailedError(_CodedError):
    CODE = ErrorCode.PARSE_ERROR


class InvalidRequestError(_CodedError):
    CODE = ErrorCode.INVALID_REQUEST


class MethodNotFoundError(_CodedError):
    CODE = ErrorCode.METHOD_NOT_FOUND


class InvalidParamsError(_CodedError):
    CODE = ErrorCode.INVALID_PARAMS

    @property
    def fields(self) -> list[str]:
        """The wire paths the server named, e.g. ``["messages.0.role"]``."""
        fields = self._data_field("fields")
        if not isinstance(fields, list):
            return []
        return [f["field"] for f in fields if isinstance(f, dict) and "field" in f]


class InternalServerError(_CodedError):
    CODE = ErrorCode.INTERNAL_ERROR


class ServerNotInitializedError(_CodedError):
    CODE = ErrorCode.SERVER_NOT_INITIALIZED


class RequestCancelledError(_CodedError):
    """``$/cancelRequest`` (or ``exit``) stopped the request."""

    CODE = ErrorCode.REQUEST_CANCELLED

    @property
    def partial(self) -> RunResult | None:
        """For ``kernel/run``: the result of the run up to where it stopped, when there is one."""
        from pydantic import ValidationError

        from tether.protocol.kernel import RunResult

        if not isinstance(self.data, dict):
            return None
        try:
            return RunResult.model_validate(self.data)
        except ValidationError:
            return None


class SessionNotFoundError(_CodedError):
    CODE = ErrorCode.SESSION_NOT_FOUND

    @property
    def session_id(self) -> str | None:
        value = self._data_field("sessionId")
        return value if isinstance(value, str) else None


class SessionBusyError(_CodedError):
    """A run (of this server or another process on the same store) holds the session; or, with
    ``lease_lost``, the ``kernel/run`` itself lost its lease on the session and stopped."""

    CODE = ErrorCode.SESSION_BUSY

    @property
    def session_id(self) -> str | None:
        value = self._data_field("sessionId")
        return value if isinstance(value, str) else None

    @property
    def run_id(self) -> str | None:
        """The run that holds the session (with ``lease_lost``: the run that lost it)."""
        value = self._data_field("runId")
        return value if isinstance(value, str) else None

    @property
    def holder(self) -> str | None:
        """``"this-process"`` or ``"another-process"``: which server runs it."""
        value = self._data_field("holder")
        return value if isinstance(value, str) else None

    @property
    def lease_lost(self) -> bool:
        return self._data_field("leaseLost") is True


class ProviderFailedError(_CodedError):
    CODE = ErrorCode.PROVIDER_ERROR


class ConfigInvalidError(_CodedError):
    CODE = ErrorCode.CONFIG_ERROR

    @property
    def key(self) -> str | None:
        """The dotted configuration key at fault, e.g. ``kernel.max_iterations``."""
        value = self._data_field("key")
        return value if isinstance(value, str) else None


class WorkspaceInvalidError(_CodedError):
    CODE = ErrorCode.WORKSPACE_ERROR


class StoreFailedError(_CodedError):
    """The server's session store failed the request (a full disk, a database that is down...)."""

    CODE = ErrorCode.STORE_ERROR

    @property
    def reason(self) -> str | None:
        """Why: ``disk-full``, ``read-only``, ``corrupt``, ``unreachable``, ``replaced``,
        ``locked`` or ``io`` (see the protocol's errors)."""
        value = self._data_field("reason")
        return value if isinstance(value, str) else None


class PromptRefusedError(_CodedError):
    """A ``user_prompt_submit`` hook of the server's configuration refused the prompt of a
    ``kernel/run``: nothing was stored."""

    CODE = ErrorCode.PROMPT_REFUSED

    @property
    def hook(self) -> str | None:
        """The name of the hook that refused it."""
        value = self._data_field("hook")
        return value if isinstance(value, str) else None

    @property
    def reason(self) -> str | None:
        """What the hook said (its stderr, or its ``reason``)."""
        value = self._data_field("reason")
        return value if isinstance(value, str) else None


ERRORS: dict[int, type[_CodedError]] = {
    cls.CODE: cls
    for cls in (
        ParseFailedError,
        InvalidRequestError,
        MethodNotFoundError,
        InvalidParamsError,
        InternalServerError,
        ServerNotInitializedError,
        RequestCancelledError,
        SessionNotFoundError,
        SessionBusyError,
        ProviderFailedError,
        ConfigInvalidError,
        WorkspaceInvalidError,
        StoreFailedError,
        PromptRefusedError,
    )
}
"""The one table from an error code to its exception class."""


def error_from(code: int, message: str, data: Any = None) -> TetherClientError:
    """The exception for an error response: the class of its code, else the base class."""
    cls = ERRORS.get(code)
    return cls(message, data) if cls is not None else TetherClientError(code, message, data)
