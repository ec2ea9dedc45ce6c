"""Errors both ways, and the one place where an exception becomes a JSON-RPC error object.

::

    Exception
     ├── ClientError   the peer answered one of our requests with an error (or not validly)
     └── RpcError      a handler's own error answer: code, message, data as they go out

:class:`~tether.protocol.TetherError` (the contract's errors) is answered with its own code but
where a face's :class:`ErrorTable` names another for it (ACP answers an unknown session with its
"resource not found", ``-32002``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tether.protocol import ErrorCode, TetherError

logger = logging.getLogger(__name__)

ErrorObject = dict[str, Any]


class ClientError(Exception):
    """The peer's answer to one of our requests is an error, or is not a JSON-RPC response.
    ``code`` is the peer's error code, ``None`` for a malformed answer or a request withdrawn
    before it was answered."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class RpcError(Exception):
    """An error answer a handler gives as is: a code, a message for people, optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def error_object(code: int, message: str, data: Any = None) -> ErrorObject:
    error: ErrorObject = {"code": int(code), "message": message}
    if data is not None:
        error["data"] = data
    return error


def method_not_found(method: str) -> RpcError:
    return RpcError(ErrorCode.METHOD_NOT_FOUND, f"method not found: {method}")


def _type_only(exc: BaseException) -> str:
    return f"internal error: {type(exc).__name__}"


@dataclass(frozen=True)
class ErrorTable:
    """How one face answers what its handlers raise.

    ``codes``: the contract's errors this face answers with another code than their own.
    ``validation``: how a :class:`~pydantic.ValidationError` escaping a handler is answered;
    ``None`` where handlers validate their params themselves, so one escaping is a bug.
    ``internal``: the message of a bug's ``-32603`` (never the exception's text, which may
    carry anything; the log gets the traceback).
    """

    codes: Mapping[type[TetherError], int] = field(default_factory=dict)
    validation: Callable[[ValidationError], ErrorObject] | None = None
    internal: Callable[[BaseException], str] = _type_only

    def error_of(self, exc: BaseException) -> ErrorObject:
        """The error object a request that raised ``exc`` is answered with."""
        if isinstance(exc, RpcError):
            return error_object(exc.code, exc.message, exc.data)
        if isinstance(exc, TetherError):
            return error_object(self._code(exc), exc.message, exc.data)
        if isinstance(exc, asyncio.CancelledError):
            return error_object(ErrorCode.REQUEST_CANCELLED, "request cancelled")
        if isinstance(exc, ValidationError) and self.validation is not None:
            return self.validation(exc)
        logger.error("internal error", exc_info=exc)
        return error_object(ErrorCode.INTERNAL_ERROR, self.internal(exc))

    def _code(self, exc: TetherError) -> int:
        if self.codes:
            for cls in type(exc).__mro__:
                code = self.codes.get(cls)
                if code is not None:
                    return code
        return int(exc.code)
