"""A body decoded into a message, and the message's envelope checked and routed.

Both faces answer the same faults the same way (``-32700`` for a body that is not JSON, id
``null``; ``-32600`` for a batch, a body that is no object, a message that is not JSON-RPC 2.0,
an id that is neither a string nor an integer, a method that is no string), but for what their
:class:`EnvelopePolicy` says: whether a message with neither ``method`` nor ``id`` is answered,
and whether ``params`` must be an object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson

from tether.jsonrpc.errors import ErrorObject, error_object
from tether.protocol import ErrorCode
from tether.protocol.deep_requests import DEEP_REQUEST, DEEP_REQUEST_DATA, deep_request_id

MsgId = str | int
Message = dict[str, Any]
ID_TYPES = (str, int)  # a tuple: ``str | int`` in an isinstance builds the union each time


class Refusal(NamedTuple):
    """A body that is no message: the answer it gets (``msg_id`` None: the id is unknown)."""

    msg_id: MsgId | None
    error: ErrorObject


def decode(
    body: bytes | bytearray, loads: Callable[[bytes | bytearray], Any] = orjson.loads
) -> Message | Refusal:
    """The message in ``body``; a body that is not JSON, a batch or no object is refused.

    A body too deeply nested for the parser still gets its answer by id when one can be read
    from its start (:mod:`tether.protocol.deep_requests`). ``loads`` raises
    :class:`orjson.JSONDecodeError` for what is not JSON.
    """
    try:
        message = loads(body)
    except orjson.JSONDecodeError as exc:
        request_id = deep_request_id(body)
        if request_id is None:
            return Refusal(None, error_object(ErrorCode.PARSE_ERROR, f"parse error: {exc}"))
        return Refusal(
            request_id, error_object(ErrorCode.INVALID_REQUEST, DEEP_REQUEST, DEEP_REQUEST_DATA)
        )
    if not isinstance(message, dict):
        reason = "batches are not supported" if isinstance(message, list) else "not an object"
        return Refusal(None, error_object(ErrorCode.INVALID_REQUEST, reason))
    return message


@dataclass(frozen=True, slots=True)
class EnvelopePolicy:
    """Where the faces' envelope checks differ.

    ``answer_unaddressed``: a message that is not JSON-RPC 2.0 and has neither ``method`` nor
    ``id`` is answered (id ``null``) rather than dropped.
    ``object_params``: ``params`` must be an object (``-32602`` otherwise) rather than left to the
    handler's validation.
    """

    answer_unaddressed: bool
    object_params: bool


class Routes(Protocol):
    """Where :func:`route` sends each kind of message."""

    def on_request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None: ...

    def on_notification(self, method: str, params: Any, message: Message) -> None: ...

    def on_response(self, message: Message) -> None:
        """An answer to one of our requests (``message["id"]`` is a valid id)."""
        ...

    def refuse(self, msg_id: MsgId | None, error: ErrorObject) -> None: ...


def route(message: Message, policy: EnvelopePolicy, routes: Routes) -> None:
    """Check ``message``'s envelope and hand it on: a request, a notification, a response, or
    a refusal (only for a message that has an id; a notification is never answered)."""
    msg_id = message.get("id")
    valid_id = isinstance(msg_id, ID_TYPES) and not isinstance(msg_id, bool)
    method = message.get("method")
    if message.get("jsonrpc") != "2.0" or ("id" in message and not valid_id):
        if policy.answer_unaddressed or "method" in message or "id" in message:
            error = error_object(ErrorCode.INVALID_REQUEST, "not JSON-RPC 2.0")
            routes.refuse(msg_id if valid_id else None, error)
        return
    if method is None:
        if valid_id:
            routes.on_response(message)
        return
    params = message.get("params")
    if not isinstance(method, str):
        problem = error_object(ErrorCode.INVALID_REQUEST, "method must be a string")
    elif policy.object_params and params is not None and not isinstance(params, dict):
        problem = error_object(ErrorCode.INVALID_PARAMS, "params must be an object")
    elif "id" in message:
        routes.on_request(msg_id, method, params, message)  # type: ignore[arg-type]
        return
    else:
        routes.on_notification(method, params, message)
        return
    if valid_id:
        routes.refuse(msg_id, problem)
