"""JSON-RPC 2.0 as newline-delimited JSON: one message per line, both ways.

Every request that carries an id gets exactly one response: a line that is not JSON is answered
``-32700`` with ``id: null``, a message that is not JSON-RPC 2.0 ``-32600``, an unknown method
``-32601``, bad params ``-32602`` (``data.fields`` names them), tether's errors their own codes
(an unknown session is ACP's "resource not found", ``-32002``), and a bug ``-32603``. Requests
run concurrently, each in its own task, so a long ``session/prompt`` does not hold up a
``session/cancel``; ``$/cancel_request`` cancels one (it answers ``-32800``).

The connection also sends requests of its own to the client (:meth:`Connection.request`) and
matches their responses by id; tether's ids are strings (``tether-1``, …).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from pydantic import BaseModel, ValidationError

from tether.jsonrpc.errors import (
    ClientError,
    ErrorObject,
    ErrorTable,
    RpcError,
    error_object,
    method_not_found,
)
from tether.protocol import ErrorCode, SessionNotFound
from tether.protocol.deep_requests import DEEP_REQUEST, DEEP_REQUEST_DATA, deep_request_id

__all__ = [  # the core's names the rest of the ACP face takes from here
    "ACP_ERRORS",
    "AcpError",
    "ClientError",
    "Connection",
    "method_not_found",
]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 256 * 1024 * 1024
RESOURCE_NOT_FOUND = -32002  # ACP's code for an unknown session
MsgId = str | int
Write = Callable[[bytes], None]


class Dispatcher(Protocol):
    async def request(self, method: str, params: Any) -> Any:
        """The result of a request (a model, or JSON-ready data); raises to answer an error."""
        ...

    def notification(self, method: str, params: Any) -> None: ...


AcpError = RpcError
"""A handler's own error answer (the core's :class:`~tether.jsonrpc.errors.RpcError`)."""


class Connection:
    def __init__(self, dispatcher: Dispatcher, write: Write) -> None:
        self._dispatcher = dispatcher
        self._write = write
        self._buffer = bytearray()
        self._skipping = False  # inside a line over the size limit
        self._running: dict[MsgId, asyncio.Task[None]] = {}
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._next_id = 0
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
            self._send_error(None, error_object(ErrorCode.PARSE_ERROR, "line over the size limit"))

    def connection_lost(self) -> None:
        if self._buffer.strip() and not self._skipping:
            self._receive(bytes(self._buffer))  # a last line without its newline
        self._buffer = bytearray()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the client went away"))
        self.closed.set()

    def _receive(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            request_id = deep_request_id(line)
            if request_id is None:
                self._send_error(None, error_object(ErrorCode.PARSE_ERROR, f"parse error: {exc}"))
            else:
                error = error_object(ErrorCode.INVALID_REQUEST, DEEP_REQUEST, DEEP_REQUEST_DATA)
                self._send_error(request_id, error)
            return
        if not isinstance(message, dict):
            reason = "batches are not supported" if isinstance(message, list) else "not an object"
            self._send_error(None, error_object(ErrorCode.INVALID_REQUEST, reason))
            return
        msg_id = message.get("id")
        valid_id = isinstance(msg_id, str | int) and not isinstance(msg_id, bool)
        method = message.get("method")
        if message.get("jsonrpc") != "2.0" or ("id" in message and not valid_id):
            self._send_error(msg_id if valid_id else None, _invalid("not JSON-RPC 2.0"))
        elif method is None:
            if valid_id:
                self._answered(message)
        elif not isinstance(method, str):
            if valid_id:
                self._send_error(msg_id, _invalid("method must be a string"))
        elif isinstance(msg_id, str | int) and valid_id:
            self._start(msg_id, method, message.get("params"))
        else:
            self._notified(method, message.get("params"))

    # -- requests from the client -----------------------------------------------------------

    def _start(self, msg_id: MsgId, method: str, params: Any) -> None:
        if msg_id in self._running:
            self._send_error(msg_id, _invalid(f"request id {msg_id!r} is already in use"))
            return
        task = asyncio.ensure_future(self._serve(msg_id, method, params))
        self._running[msg_id] = task
        task.add_done_callback(lambda _: self._running.pop(msg_id, None))

    async def _serve(self, msg_id: MsgId, method: str, params: Any) -> None:
        try:
            result = await self._dispatcher.request(method, params)
        except asyncio.CancelledError:
            self._send_error(msg_id, error_object(ErrorCode.REQUEST_CANCELLED, "request cancelled"))
            return
        except Exception as exc:
            self._send_error(msg_id, ACP_ERRORS.error_of(exc))
            return
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def _notified(self, method: str, params: Any) -> None:
        if method == "$/cancel_request":
            request_id = params.get("requestId") if isinstance(params, dict) else None
            task = self._running.get(request_id) if isinstance(request_id, str | int) else None
            if task is not None:
                task.cancel()
            return
        try:
            self._dispatcher.notification(method, params)
        except Exception:
            logger.exception("could not handle the notification %s", method)

    async def wait_all(self) -> None:
        """Wait for the requests still running to be answered."""
        if self._running:
            await asyncio.wait(list(self._running.values()))

    async def cancel_all(self) -> None:
        """Cancel the requests still running (each answers ``-32800``) and wait for them."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- requests to the client -------------------------------------------------------------

    async def request(self, method: str, params: Any) -> Any:
        """Send a request to the client and return its result (:class:`ClientError` for an
        error). Cancelling the await forgets the request: a late answer is ignored."""
        if self.closed.is_set():
            raise ConnectionError("the client went away")
        self._next_id += 1
        msg_id = f"tether-{self._next_id}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        self._send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        try:
            return await future
        finally:
            self._pending.pop(msg_id, None)

    def _answered(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message["id"]) if isinstance(message["id"], str) else None
        if future is None or future.done():
            return  # an answer to a request that was withdrawn, or to none
        error = message.get("error")
        if "result" in message:
            future.set_result(message["result"])
        elif isinstance(error, dict):
            code = error.get("code")
            future.set_exception(
                ClientError(str(error.get("message")), code if isinstance(code, int) else None)
            )
        else:
            future.set_exception(ClientError("a response with neither result nor error"))

    # -- bytes out --------------------------------------------------------------------------

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send_error(self, msg_id: MsgId | None, error: ErrorObject) -> None:
        self._send({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def _send(self, message: dict[str, Any]) -> None:
        try:
            line = orjson.dumps(message) + b"\n"
        except TypeError:  # a bug: a request still gets its one response
            logger.exception("could not encode a message")
            if "result" in message:
                error = error_object(ErrorCode.INTERNAL_ERROR, "a result that cannot be encoded")
                self._send_error(message["id"], error)
            return
        try:
            self._write(line)
        except Exception:  # the pipe is gone: nothing more can be said to the client
            logger.debug("could not write to the client", exc_info=True)


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
