"""ACP's wire: JSON-RPC 2.0 as newline-delimited JSON, one message per line, both ways.

The envelope checks, the router, our requests to the client and the exception -> error map are
the core's (:mod:`tether.jsonrpc`), shared with tether's own protocol; what is ACP's is here:
the framing (lines, ``MAX_LINE_BYTES`` at most), ``$/cancel_request {requestId}``, and the code
table :data:`ACP_ERRORS` (an unknown session is ACP's "resource not found", ``-32002``; params
that fail validation ``-32602`` with ``data.fields``; a bug ``-32603``).

Every request that carries an id gets exactly one response. Handlers start in the order their
requests arrive, each up to its first wait, so a ``session/cancel`` read with the
``session/prompt`` it cancels finds the turn started; a long ``session/prompt`` then waits as a
task and does not hold up what comes after it. ``$/cancel_request`` cancels one (it answers
``-32800``). tether's own requests to the client have string ids (``tether-1``, …).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from pydantic import BaseModel, ValidationError

from tether.jsonrpc import envelope
from tether.jsonrpc.envelope import ID_TYPES, EnvelopePolicy, Message, MsgId, Refusal
from tether.jsonrpc.errors import (
    ClientError,
    ErrorObject,
    ErrorTable,
    RpcError,
    error_object,
    method_not_found,
)
from tether.jsonrpc.outgoing import OutgoingRequests
from tether.jsonrpc.router import Handler, Router
from tether.protocol import ErrorCode, SessionNotFound

__all__ = [  # the core's names the rest of the ACP face takes from here
    "ACP_ERRORS",
    "AcpError",
    "AcpWire",
    "ClientError",
    "Write",
    "method_not_found",
]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 256 * 1024 * 1024
RESOURCE_NOT_FOUND = -32002  # ACP's code for an unknown session
Write = Callable[[bytes], None]

AcpError = RpcError
"""A handler's own error answer (the core's :class:`~tether.jsonrpc.errors.RpcError`)."""


class AcpMethods(Protocol):
    """What serves ACP's methods (the agent): a handler per request, and the notifications."""

    def handler(self, method: str) -> Handler:
        """The handler of ``method``; raises to refuse the request (unknown method, say)."""
        ...

    def notification(self, method: str, params: Any) -> None: ...


class AcpWire:
    """One ACP client's JSON-RPC connection: lines in, handlers started, lines out."""

    def __init__(self, methods: AcpMethods, write: Write) -> None:
        self._methods = methods
        self._write = write
        self._buffer = bytearray()
        self._skipping = False  # inside a line over the size limit
        self._router = Router(ACP_ERRORS, self._send_result, self.refuse)
        self._outgoing = OutgoingRequests(self._send_request, tell_withdrawn=None)
        self.closed = asyncio.Event()

    # -- bytes in ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._take(data[start:end])
            start = end + 1
        self._take_partial(data[start:])

    def _take(self, piece: bytes) -> None:
        if self._skipping:
            self._skipping = False
            return
        if self._buffer:
            self._buffer += piece
            piece, self._buffer = bytes(self._buffer), bytearray()
        if piece.strip():
            self._receive(piece)

    def _take_partial(self, piece: bytes) -> None:
        if self._skipping or not piece:
            return
        self._buffer += piece
        if len(self._buffer) > MAX_LINE_BYTES:
            self._buffer = bytearray()
            self._skipping = True
            self.refuse(None, error_object(ErrorCode.PARSE_ERROR, "line over the size limit"))

    def connection_lost(self) -> None:
        if self._buffer.strip() and not self._skipping:
            self._receive(bytes(self._buffer))  # a last line without its newline
        self._buffer = bytearray()
        self._outgoing.close("the client went away")
        self.closed.set()

    def _receive(self, line: bytes) -> None:
        message = envelope.decode(line)
        if isinstance(message, Refusal):
            self.refuse(message.msg_id, message.error)
        else:
            envelope.route(message, _ENVELOPE, self)

    # -- requests from the client (envelope.Routes) -----------------------------------------

    def on_request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None:
        if msg_id in self._router.running:
            self.refuse(msg_id, _invalid(f"request id {msg_id!r} is already in use"))
            return
        try:
            handler = self._methods.handler(method)
        except Exception as exc:
            self.refuse(msg_id, ACP_ERRORS.error_of(exc))
            return
        # ACP's requests all carry an object: one without params is read as an empty one
        self._router.start(msg_id, handler, {} if params is None else params)

    def on_notification(self, method: str, params: Any, message: Message) -> None:
        if method == "$/cancel_request":
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if isinstance(request_id, ID_TYPES):
                self._router.cancel(request_id)
            return
        try:
            self._methods.notification(method, params)
        except Exception:
            logger.exception("could not handle the notification %s", method)

    def on_response(self, message: Message) -> None:
        self._outgoing.response(message)

    async def wait_all(self) -> None:
        """Wait for the requests still running to be answered."""
        await self._router.wait_all()

    async def cancel_all(self) -> None:
        """Cancel the requests still running (each answers ``-32800``) and wait for them."""
        tasks = self._router.cancel_all()
        if tasks:
            await asyncio.wait(tasks)

    # -- requests to the client -------------------------------------------------------------

    async def request(self, method: str, params: Any) -> Any:
        """Send a request to the client and return its result (:class:`ClientError` for an
        error, :class:`ConnectionError` once the client is gone). Cancelling the await
        withdraws the request: a late answer is dropped."""
        return await self._outgoing.request(method, params)

    def _send_request(self, msg_id: MsgId, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})

    # -- bytes out --------------------------------------------------------------------------

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send_result(self, msg_id: MsgId, result: Any) -> None:
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def refuse(self, msg_id: MsgId | None, error: ErrorObject) -> None:
        """Answer request ``msg_id`` (``None``: a message whose id is unknown) with ``error``."""
        self._send({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def _send(self, message: dict[str, Any]) -> None:
        try:
            line = orjson.dumps(message) + b"\n"
        except TypeError:  # a bug: a request still gets its one response
            logger.exception("could not encode a message")
            if "result" in message:
                error = error_object(ErrorCode.INTERNAL_ERROR, "a result that cannot be encoded")
                self.refuse(message["id"], error)
            return
        try:
            self._write(line)
        except Exception:  # the pipe is gone: nothing more can be said to the client
            logger.debug("could not write to the client", exc_info=True)


_ENVELOPE = EnvelopePolicy(answer_unaddressed=True, object_params=False)
"""ACP: every fault with the envelope is answered; params are the handlers' to validate."""


def _invalid(message: str) -> ErrorObject:
    return error_object(ErrorCode.INVALID_REQUEST, message)


def _invalid_params(exc: ValidationError) -> ErrorObject:
    """ACP's handlers validate params as they read them: a failure names the fields."""
    fields = [
        {"field": ".".join(str(part) for part in error["loc"]), "message": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False)
    ]
    listed = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    return error_object(ErrorCode.INVALID_PARAMS, f"invalid params: {listed}", {"fields": fields})


def _see_the_log(exc: BaseException) -> str:
    return "internal error (see the agent's log)"


ACP_ERRORS = ErrorTable(
    codes={SessionNotFound: RESOURCE_NOT_FOUND},
    validation=_invalid_params,
    internal=_see_the_log,
)
"""ACP's codes: an unknown session is "resource not found"; a ValidationError is invalid params."""
