"""One JSON-RPC connection: frames in, envelopes checked, the lifecycle kept, responses out.

Nothing here imports pygls. That keeps the handshake fast: ``initialize`` is answered as soon as
tether's own modules are loaded, and pygls (whose lsprotocol import alone builds some 550 attrs
classes, most of a second here) is loaded right after, while the editor goes on with its own
start-up. Messages that arrive before it is attached wait, in order.

Every request that carries an id gets exactly one response: malformed bodies (-32700, id null),
invalid envelopes (-32600), requests before ``initialize`` (-32002) or after ``shutdown``
(-32600), and whatever the handlers raise, mapped to codes in :mod:`tether.rpc.errors`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import orjson
from pydantic import BaseModel

from tether.protocol import ErrorCode, InitializeParams
from tether.protocol.framing import Frame, FrameDecoder, FrameError, encode_frame
from tether.rpc import splitparse
from tether.rpc.app import App
from tether.rpc.errors import ErrorObject, error_from_exception, error_object
from tether.rpc.handlers import Encoded, validate_params
from tether.rpc.ndjson import looks_like_ndjson, ndjson_refusal

logger = logging.getLogger(__name__)

MsgId = str | int
Message = dict[str, Any]
Write = Callable[[bytes], None]
WriteParts = Callable[[Iterator[bytes]], None]
Default = Callable[[Any], Any]


class Dispatcher(Protocol):
    """What runs the requests and notifications the wire lets through (the pygls protocol)."""

    def request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None: ...

    def notification(self, method: str, params: Any, message: Message) -> None: ...

    def response(self, message: Message) -> None: ...

    def cancel_requests(self) -> None: ...


class Wire:
    def __init__(self, app: App, on_initialized: Callable[[], None] | None = None) -> None:
        self._app = app
        app.notify = self.send_notification
        self._on_initialized = on_initialized
        self._decoder = FrameDecoder()
        self._write: Write | None = None
        self._write_parts: WriteParts | None = None
        self._dispatcher: Dispatcher | None = None
        self._waiting: list[Message] = []  # let through before a dispatcher was attached
        self._unanswered: set[MsgId] = set()  # requests let through, not yet answered
        self._answered = asyncio.Event()
        self._tasks: set[asyncio.Future[None]] = set()
        self.initialized = False
        self.shut_down = False
        self.exit_code: int | None = None
        self.stopped = asyncio.Event()

    # -- the connection ----------------------------------------------------------------------

    def connect(self, write: Write, write_parts: WriteParts | None = None) -> None:
        """Start a connection: ``write`` sends bytes to the client; ``write_parts``, if given,
        sends the pieces an iterator makes, pulling each only when the client can take it."""
        self._write = write
        self._write_parts = write_parts
        self._decoder = FrameDecoder()

    def attach(self, dispatcher: Dispatcher) -> None:
        """Hand requests to ``dispatcher`` from now on, starting with those that waited."""
        self._dispatcher = dispatcher
        waiting, self._waiting = self._waiting, []
        for message in waiting:
            self._deliver(message)

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: decode every complete frame and handle it."""
        if not self.initialized and self._write is not None and looks_like_ndjson(data):
            self._write(ndjson_refusal(data))  # an ACP client: tell it to use `tether acp`
            return
        items = self._decoder.feed(data)
        items.reverse()
        while items:  # popped, so a big body is freed as soon as it is decoded
            message = self._decode(items.pop())
            if message is not None:
                self._handle(message)

    def connection_lost(self) -> None:
        """The client went away: stop as ``exit`` would."""
        if self.exit_code is None:
            self.exit_code = 0 if self.shut_down else 1
        self.stopped.set()

    # -- decoding ----------------------------------------------------------------------------

    def _decode(self, item: Frame | FrameError) -> Message | None:
        """The message in a frame; a framing fault or a body that is no object is answered."""
        if isinstance(item, FrameError):
            logger.warning("bad frame: %s", item.reason)
            data = None if item.limit is None else {"limit": item.limit, "value": item.value}
            self.send_error(None, error_object(ErrorCode.PARSE_ERROR, item.reason, data))
            return None
        try:
            message = splitparse.loads(item.body)
        except orjson.JSONDecodeError as exc:
            self.send_error(None, error_object(ErrorCode.PARSE_ERROR, f"parse error: {exc}"))
            return None
        if not isinstance(message, dict):
            reason = "batches are not supported" if isinstance(message, list) else "not an object"
            self.send_error(None, error_object(ErrorCode.INVALID_REQUEST, reason))
            return None
        return message

    def _handle(self, message: Message) -> None:
        try:
            self._route(message)
        except Exception as exc:  # a bug: answer the request it was, and go on to the next
            msg_id = message.get("id")
            if "method" in message and isinstance(msg_id, str | int) and msg_id in self._unanswered:
                self.send_error(msg_id, error_from_exception(exc))
            else:
                logger.exception("could not handle a message")

    def _route(self, message: Message) -> None:
        msg_id = message.get("id")
        valid_id = isinstance(msg_id, str | int) and not isinstance(msg_id, bool)
        method = message.get("method")
        if message.get("jsonrpc") != "2.0" or ("id" in message and not valid_id):
            if "method" in message or "id" in message:
                error = error_object(ErrorCode.INVALID_REQUEST, "not JSON-RPC 2.0")
                self.send_error(msg_id if valid_id else None, error)
            return
        if method is None:
            if valid_id:
                self._forward(message)  # the answer to one of our requests (or a malformed one)
            return
        params = message.get("params")
        problem = None
        if not isinstance(method, str):
            problem = error_object(ErrorCode.INVALID_REQUEST, "method must be a string")
        elif params is not None and not isinstance(params, dict):
            problem = error_object(ErrorCode.INVALID_PARAMS, "params must be an object")
        if problem is not None:
            if valid_id:
                self.send_error(msg_id, problem)
            return
        if "id" in message:
            self._request(msg_id, method, params, message)  # type: ignore[arg-type]
        else:
            self._notification(method, params, message)

    # -- the lifecycle -----------------------------------------------------------------------

    def _request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None:
        if self.shut_down:
            self.send_error(msg_id, error_object(ErrorCode.INVALID_REQUEST, "server is shut down"))
        elif method == "initialize":
            self._initialize(msg_id, params)
        elif not self.initialized:
            error = error_object(ErrorCode.SERVER_NOT_INITIALIZED, "server not initialized")
            self.send_error(msg_id, error)
        elif method == "shutdown":
            self._shutdown(msg_id)
        else:
            self._unanswered.add(msg_id)
            self._forward(message)

    def _notification(self, method: str, params: Any, message: Message) -> None:
        if method == "exit":
            self.exit_code = 0 if self.shut_down else 1
            self.stopped.set()
        elif not self.initialized or (self.shut_down and method != "$/cancelRequest"):
            logger.info("ignored notification %r outside the session", method)
        else:
            self._forward(message)

    def _initialize(self, msg_id: MsgId, params: Any) -> None:
        if self.initialized:
            error = error_object(ErrorCode.INVALID_REQUEST, "initialize was already called")
            self.send_error(msg_id, error)
            return
        try:
            result = self._app.initialize(validate_params(InitializeParams, params))
        except Exception as exc:
            self.send_error(msg_id, error_from_exception(exc))
            return
        self.initialized = True
        self._decoder.max_body = self._app.limits.max_frame_bytes
        self.send_result(msg_id, result)
        if self._on_initialized is not None:
            self._on_initialized()

    def _shutdown(self, msg_id: MsgId) -> None:
        """Refuse new requests at once; answer once every earlier request has been answered."""
        self.shut_down = True
        self._unanswered.add(msg_id)
        task = asyncio.ensure_future(self._answer_shutdown(msg_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_shutdown(self, msg_id: MsgId) -> None:
        await self.settle(cancel=False, besides=msg_id)
        self.send_result(msg_id, None)

    async def settle(self, *, cancel: bool, besides: MsgId | None = None) -> None:
        """Return once every request let through has been answered; cancel them if asked."""
        if cancel and self._dispatcher is not None:
            self._dispatcher.cancel_requests()
        while self._unanswered - {besides}:
            self._answered.clear()
            await self._answered.wait()

    def _forward(self, message: Message) -> None:
        if self._dispatcher is None:
            self._waiting.append(message)
        else:
            self._deliver(message)

    def _deliver(self, message: Message) -> None:
        assert self._dispatcher is not None
        if "method" not in message:
            self._dispatcher.response(message)
        elif "id" in message:
            self._dispatcher.request(
                message["id"], message["method"], message.get("params"), message
            )
        else:
            self._dispatcher.notification(message["method"], message.get("params"), message)

    # -- encoding ----------------------------------------------------------------------------

    def send_result(self, msg_id: MsgId, result: Any, default: Default | None = None) -> None:
        if isinstance(result, Encoded) and result.length is not None:
            self._send_lazily(msg_id, result.parts, result.length)
            return
        try:
            parts = (
                list(result.parts) if isinstance(result, Encoded) else [_encode(result, default)]
            )
        except Exception as exc:
            logger.error("result of request %r cannot be serialized", msg_id, exc_info=exc)
            error = error_object(ErrorCode.INTERNAL_ERROR, "result could not be serialized")
            self.send_error(msg_id, error)
            return
        self._send(b'{"jsonrpc":"2.0","id":%s,"result":' % orjson.dumps(msg_id), *parts, b"}")
        self._mark_answered(msg_id)

    def send_error(self, msg_id: MsgId | None, error: ErrorObject) -> None:
        try:
            body = orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error})
        except TypeError:  # data that is not JSON: the code and message still go out
            error.pop("data", None)
            body = orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error})
        self._send(body)
        self._mark_answered(msg_id)

    def send_notification(self, method: str, params: Any, default: Default | None = None) -> None:
        start = b'{"jsonrpc":"2.0","method":%s,"params":' % orjson.dumps(method)
        self._send(start, _encode(params, default), b"}")

    def send_message(self, message: Any, default: Default | None = None) -> None:
        """Any other message, e.g. a request to the client, built by the dispatcher."""
        self._send(_encode(message, default))

    def _send(self, *parts: bytes) -> None:
        """One frame whose body is ``parts`` joined; a big one is written piece by piece, so its
        body is never copied whole."""
        if self._write is None:
            logger.error("no transport; dropped %d bytes", sum(map(len, parts)))
            return
        if len(parts) == 1 or sum(map(len, parts)) < _BIG:
            self._write(encode_frame(b"".join(parts)))
            return
        self._write(b"Content-Length: %d\r\n\r\n" % sum(map(len, parts)))
        for part in parts:
            self._write(part)

    def _send_lazily(self, msg_id: MsgId, parts: Iterable[bytes], length: int) -> None:
        """A result whose ``length`` bytes ``parts`` makes one by one, as the output drains."""
        if self._write is None:
            logger.error("no transport; dropped a result of %d bytes", length)
            return
        head = b'{"jsonrpc":"2.0","id":%s,"result":' % orjson.dumps(msg_id)
        self._write(b"Content-Length: %d\r\n\r\n%s" % (length + len(head) + 1, head))
        body = itertools.chain(parts, (b"}",))
        if self._write_parts is not None:
            self._write_parts(body)
        else:
            for part in body:
                self._write(part)
        self._mark_answered(msg_id)

    def _mark_answered(self, msg_id: MsgId | None) -> None:
        if msg_id in self._unanswered:
            self._unanswered.discard(msg_id)
            self._answered.set()


_BIG = 64 * 1024


def _encode(value: Any, default: Default | None) -> bytes:
    """JSON for a model, a dict or anything ``default`` knows.

    Models are dumped to Python objects and encoded by orjson, which is about twice as fast as
    pydantic's own JSON on text full of escapes (source code, say) and gives the same bytes.
    """
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True, exclude_none=True)
    return orjson.dumps(value, default=default or _dump_model, option=orjson.OPT_UTC_Z)


def _dump_model(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
