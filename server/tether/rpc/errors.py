"""The one place where exceptions become JSON-RPC error objects."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from tether.protocol import ErrorCode, InvalidParams, TetherError
from tether.protocol.limits import LIMIT_EXCEEDED

logger = logging.getLogger(__name__)

ErrorObject = dict[str, Any]


class ClientError(Exception):
    """The client's answer to one of our requests is an error, or is not a JSON-RPC response.
    ``code`` is the client's error code, ``None`` for a malformed answer."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def error_object(code: int, message: str, data: Any = None) -> ErrorObject:
    error: ErrorObject = {"code": int(code), "message": message}
    if data is not None:
        error["data"] = data
    return error


def error_from_exception(exc: BaseException) -> ErrorObject:
    """The error object a request that raised ``exc`` is answered with.

    Anything that is not one of the contract's errors is a bug: the client learns its type, the
    log gets the traceback, and the text of the exception stays out of the response.
    """
    if isinstance(exc, TetherError):
        return error_object(exc.code, exc.message, exc.data)
    if isinstance(exc, asyncio.CancelledError):
        return error_object(ErrorCode.REQUEST_CANCELLED, "request cancelled")
    logger.error("internal error", exc_info=exc)
    return error_object(ErrorCode.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")


def invalid_params(exc: ValidationError, within: str = "", offset: int = 0) -> InvalidParams:
    """-32602 with one entry per failing field, named by its wire path (``messages.0.role``).

    A field over a size limit also names the limit and its value, in its entry and at the top of
    ``data`` (``{"limit": "maxAppendMessages", "value": 100000}``). Only for the validation of a
    request's params: a model that fails validation anywhere else is a bug, answered -32603.
    ``within`` and ``offset`` place the errors of a slice of a list (``messages``, from item
    ``offset`` on) that was validated on its own.
    """
    data: dict[str, Any] = {"fields": []}
    for error in exc.errors(include_url=False, include_input=False):
        loc = list(error["loc"])
        if within and loc and isinstance(loc[0], int):
            loc = [within, loc[0] + offset, *loc[1:]]
        field = {
            "field": ".".join(str(part) for part in loc) or "params",
            "message": error["msg"],
            "type": error["type"],
        }
        if error["type"] == LIMIT_EXCEEDED and "ctx" in error:
            limit = {"limit": error["ctx"]["limit"], "value": error["ctx"]["value"]}
            field.update(limit)
            data = {**limit, **data}
        data["fields"].append(field)
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in data["fields"][:3])
    return InvalidParams(f"invalid params: {summary}", data)
