"""tether's protocol's error table for the one exception -> error map
(:mod:`tether.jsonrpc.errors`), and the invalid params of its handlers."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tether.jsonrpc.errors import ClientError, ErrorObject, ErrorTable, error_object
from tether.protocol import InvalidParams
from tether.protocol.limits import LIMIT_EXCEEDED

__all__ = [
    "TETHER_ERRORS",
    "ClientError",
    "ErrorObject",
    "error_from_exception",
    "error_object",
    "invalid_params",
]


TETHER_ERRORS = ErrorTable()
"""tether's protocol answers the contract's errors with their own codes; a ValidationError
escaping a handler is a bug (handlers validate their params into models themselves)."""


def error_from_exception(exc: BaseException) -> ErrorObject:
    """The error object a request that raised ``exc`` is answered with.

    Anything that is not one of the contract's errors is a bug: the client learns its type, the
    log gets the traceback, and the text of the exception stays out of the response.
    """
    return TETHER_ERRORS.error_of(exc)


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
