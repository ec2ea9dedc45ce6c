"""tether's protocol's wire: LSP frames in, envelopes checked, the lifecycle kept, responses out.

Built on the JSON-RPC core both faces share (:mod:`tether.jsonrpc`: envelope checks, the router,
our requests to the client, the exception -> error map); what is this face's is here: the
framing, the output batched per loop turn, ``initialize``/``shutdown``/``exit``,
``$/cancelRequest {id}``, ``workspace/didChangeConfiguration`` (the App applies the new settings
before the next message is read, so a request sent after it runs with them), and the hand-over
of the standard LSP methods to pygls.

Nothing here imports pygls. tether's own methods (``App.methods``: ``session/*``, and
``kernel/*`` once the kernel is loaded, on first use if need be) are dispatched here: params
validated by the handlers' models, coroutine handlers started eagerly
(:class:`~tether.jsonrpc.router.Router`), ``$/cancelRequest`` cancelling those that wait.
Requests to the client (``app.request_client``, and those the pygls side sends) take their ids
from one counter (:class:`~tether.jsonrpc.outgoing.OutgoingRequests`), and the client's answers
are routed back through its table. So a tether client never waits for pygls, whose
lsprotocol import alone builds some 550 attrs classes (most of a second here): pygls is loaded
in the background (see :mod:`tether.rpc.transport`) and gets the standard LSP methods; messages
for it that arrive before it is attached wait, in order.

Responses and notifications are written once per turn of the event loop: what a batch of
pipelined requests makes goes out in one write, at the end of the read that brought them (no
extra turn of the loop before a request answered at once goes out).

Every request that carries an id gets exactly one response: malformed bodies (-32700, id null),
invalid envelopes (-32600), requests before ``initialize`` (-32002) or after ``shutdown``
(-32600), and whatever the handlers raise, mapped by :data:`tether.rpc.errors.TETHER_ERRORS`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import orjson
from pydantic import BaseModel

from tether.jsonrpc import envelope
from tether.jsonrpc.envelope import ID_TYPES as _ID_TYPES
from tether.jsonrpc.envelope import EnvelopePolicy, Refusal
from tether.jsonrpc.envelope import Message as Message
from tether.jsonrpc.envelope import MsgId as MsgId
from tether.jsonrpc.outgoing import OnResponse, OutgoingRequests
from tether.jsonrpc.outgoing import is_error_object as is_error_object  # for the pygls side
from tether.jsonrpc.router import Router
from tether.protocol import ErrorCode, InitializeParams
from tether.protocol.framing import Frame, FrameDecoder, FrameError
from tether.rpc import splitparse
from tether.rpc.app import KERNEL_METHODS, SESSION_METHODS, App, ClientChannel
from tether.rpc.calls import Encoded, Handler, validate_params
from tether.rpc.errors import (
    TETHER_ERRORS,
    ErrorObject,
    error_from_exception,
    error_object,
)
from tether.rpc.ndjson import looks_like_ndjson, ndjson_refusal

logger = logging.getLogger(__name__)

Write = Callable[[bytes], None]
WriteParts = Callable[[Iterator[bytes]], None]
Default = Callable[[Any], Any]

_CANCEL = "$/cancelRequest"
_SETTINGS = "workspace/didChangeConfiguration"


class Dispatcher(Protocol):
    """What runs the standard LSP requests and notifications the wire lets through (pygls)."""

    def request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None: ...

    def notification(self, method: str, params: Any, message: Message) -> None: ...

    def cancel_requests(self) -> None: ...


class Wire:
    def __init__(
        self,
        app: App,
        on_initialized: Callable[[], None] | None = None,
        before_kernel: Callable[[], None] | None = None,
        before_sessions: Callable[[], None] | None = None,
    ) -> None:
        """``on_initialized`` is called once ``initialize`` has been answered, ``before_kernel``
        before the App loads the kernel, ``before_sessions`` before it makes its session
        service."""
        self._app = app
        self._methods = app.methods  # the same dict: the session and kernel methods join it
        app.attach_client(
            ClientChannel(
                self.send_notification,
                self.request_client,
                before_kernel or (lambda: None),
                before_sessions or (lambda: None),
            )
        )
        self.on_initialized = on_initialized
        self.on_waiting: Callable[[Message], None] | None = None
        """Called with each message that waits for a dispatcher not attached yet."""
        self._decoder = FrameDecoder()
        self._write: Write | None = None
        self._write_parts: WriteParts | None = None
        self._out: list[bytes] = []  # frames written at the end of this turn of the loop
        self._flushing: asyncio.Handle | None = None
        self._reading = False  # in data_received, which writes what it sent once it is done
        self._dispatcher: Dispatcher | None = None
        self._waiting: list[Message] = []  # let through before a dispatcher was attached
        self._unanswered: set[MsgId] = set()  # requests let through, not yet answered
        self._router = Router(TETHER_ERRORS, self.send_result, self.send_error)
        self._answered = asyncio.Event()
        self._tasks: set[asyncio.Future[None]] = set()
        self._outgoing = OutgoingRequests(self._send_request, self._tell_withdrawn)
        self.last_received = 0.0  # time.monotonic() when bytes last came in
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

    @property
    def attached(self) -> bool:
        return self._dispatcher is not None

    @property
    def busy(self) -> bool:
        """Some request is still to be answered."""
        return bool(self._unanswered)

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: decode every complete frame and handle it."""
        self.last_received = time.monotonic()
        if not self.initialized and self._write is not None and looks_like_ndjson(data):
            self._write(ndjson_refusal(data))  # an ACP client: tell it to use `tether acp`
            return
        items = self._decoder.feed(data)
        items.reverse()
        self._reading = True
        try:
            while items:  # popped, so a big body is freed as soon as it is decoded
                message = self._decode(items.pop())
                if message is not None:
                    self._handle(message)
        finally:
            self._reading = False
            self.flush()  # what these requests answered at once, in one write, in this turn

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
        message = envelope.decode(item.body, _loads)
        if isinstance(message, Refusal):
            self.send_error(message.msg_id, message.error)
            return None
        return message

    def _handle(self, message: Message) -> None:
        try:
            envelope.route(message, _ENVELOPE, self)
        except Exception as exc:  # a bug: answer the request it was, and go on to the next
            msg_id = message.get("id")
            if "method" in message and isinstance(msg_id, _ID_TYPES) and msg_id in self._unanswered:
                self.send_error(msg_id, error_from_exception(exc))
            else:
                logger.exception("could not handle a message")

    # -- the lifecycle -----------------------------------------------------------------------

    def on_request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None:
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
            handler = self._methods.get(method) or self._handler(method)
            if handler is None:
                self._forward(message)
            else:
                self._router.start(msg_id, handler, params)

    def _handler(self, method: str) -> Handler | None:
        """tether's handler of ``method``; the session methods' table is made on the first of
        them, the kernel loaded on the first ``kernel/*``."""
        handler = self._methods.get(method)
        if handler is None and method in SESSION_METHODS:
            self._app.load_session_methods()
            handler = self._methods.get(method)
        elif handler is None and method in KERNEL_METHODS:
            self._app.load_kernel()
            handler = self._methods.get(method)
        return handler

    def on_notification(self, method: str, params: Any, message: Message) -> None:
        if method == "exit":
            self.exit_code = 0 if self.shut_down else 1
            self.stopped.set()
        elif not self.initialized or (self.shut_down and method != _CANCEL):
            logger.info("ignored notification %r outside the session", method)
        elif method == _CANCEL:
            self._cancel(params, message)
        elif method == _SETTINGS:  # here, not in pygls: applied before the next request
            settings = params.get("settings") if isinstance(params, dict) else params
            self._app.settings_changed(settings)
        else:
            self._forward(message)

    def _cancel(self, params: Any, message: Message) -> None:
        """``$/cancelRequest``: a running tether request is cancelled here, one let through to
        pygls is cancelled there. Only an integer or string id can name a request; the rest (a
        list, an object, no id at all) is the client's mistake, noted and ignored. A request
        answered already is no news: a cancel often crosses the answer on the wire."""
        msg_id = params.get("id") if isinstance(params, dict) else None
        if not isinstance(msg_id, _ID_TYPES) or isinstance(msg_id, bool):
            logger.debug("ignored $/cancelRequest without a usable id: %.80r", params)
        elif not self._router.cancel(msg_id):
            if msg_id in self._unanswered:
                self._forward(message)
            else:
                logger.debug("$/cancelRequest for no running request: id %r", msg_id)

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
        self.flush()  # out before what on_initialized starts competes for the interpreter
        if self.on_initialized is not None:
            self.on_initialized()

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
        if cancel:
            self._router.cancel_all()
            if self._dispatcher is not None:
                self._dispatcher.cancel_requests()
        while self._unanswered - {besides}:
            self._answered.clear()
            await self._answered.wait()

    def _forward(self, message: Message) -> None:
        if self._dispatcher is not None:
            self._deliver(message)
            return
        self._waiting.append(message)
        if self.on_waiting is not None:
            self.on_waiting(message)

    def _deliver(self, message: Message) -> None:
        assert self._dispatcher is not None
        if "id" in message:
            self._dispatcher.request(
                message["id"], message["method"], message.get("params"), message
            )
        else:
            self._dispatcher.notification(message["method"], message.get("params"), message)

    # -- our requests to the client (jsonrpc.outgoing) ----------------------------------------

    def new_request_id(self) -> str:
        """An id for a request to the client; ``tether-N`` never clashes with a uuid."""
        return self._outgoing.new_id()

    def expect_response(self, msg_id: MsgId, on_response: OnResponse) -> None:
        """Route the client's answer to request ``msg_id`` (the caller sends it) to
        ``on_response``."""
        self._outgoing.expect(msg_id, on_response)

    def withdraw(self, msg_id: MsgId) -> None:
        """Give up on request ``msg_id``: the client is told with ``$/cancelRequest``, and a late
        answer is dropped as an answer to a request withdrawn."""
        self._outgoing.withdraw(msg_id)

    async def request_client(self, method: str, params: Any) -> Any:
        """Send a request to the client and return its result
        (:meth:`tether.jsonrpc.outgoing.OutgoingRequests.request`: an error answer raises
        :class:`ClientError`; cancelling the await withdraws the request)."""
        return await self._outgoing.request(method, params)

    def _send_request(self, msg_id: MsgId, method: str, params: Any) -> None:
        start = b'{"jsonrpc":"2.0","id":%s,"method":%s,"params":' % (
            orjson.dumps(msg_id),
            orjson.dumps(method),
        )
        self._send(start, _encode(params, None), b"}")

    def _tell_withdrawn(self, msg_id: MsgId) -> None:
        self.send_notification(_CANCEL, {"id": msg_id})

    def on_response(self, message: Message) -> None:
        self._outgoing.response(message)

    # -- encoding ----------------------------------------------------------------------------

    def send_result(self, msg_id: MsgId, result: Any, default: Default | None = None) -> None:
        if isinstance(result, Encoded) and result.length is not None:
            self._send_lazily(msg_id, result.parts, result.length)
            return
        try:
            parts = (
                tuple(result.parts)  # a tuple already is not copied
                if isinstance(result, Encoded)
                else (_encode(result, default),)
            )
        except Exception as exc:
            logger.error("result of request %r cannot be serialized", msg_id, exc_info=exc)
            error = error_object(ErrorCode.INTERNAL_ERROR, "result could not be serialized")
            self.send_error(msg_id, error)
            return
        self._send(b'{"jsonrpc":"2.0","id":%s,"result":' % orjson.dumps(msg_id), *parts, b"}")
        self._mark_answered(msg_id)

    def send_error(self, msg_id: MsgId | None, error: ErrorObject) -> None:
        """Answer request ``msg_id`` (``None``: a message whose id is unknown) with ``error``."""
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
        """One frame whose body is ``parts`` joined, written with the others of this turn of
        the loop; a big one is written piece by piece, so its body is never copied whole."""
        if self._write is None:
            logger.error("no transport; dropped %d bytes", sum(map(len, parts)))
            return
        size = sum(map(len, parts))
        if size < _BIG:
            self._out.append(b"Content-Length: %d\r\n\r\n" % size)
            self._out.extend(parts)
            if self._flushing is None and not self._reading:
                self._schedule_flush()
            return
        self.flush()
        self._write(b"Content-Length: %d\r\n\r\n" % size)
        for part in parts:
            self._write(part)

    def _schedule_flush(self) -> None:
        try:
            self._flushing = asyncio.get_running_loop().call_soon(self.flush)
        except RuntimeError:  # no loop running (a synchronous caller): write at once
            self.flush()

    def flush(self) -> None:
        """Write what this turn of the loop has sent so far, in one piece."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        if self._out and self._write is not None:
            out, self._out = self._out, []
            self._write(b"".join(out))

    def _send_lazily(self, msg_id: MsgId, parts: Iterable[bytes], length: int) -> None:
        """A result whose ``length`` bytes ``parts`` makes one by one, as the output drains."""
        if self._write is None:
            logger.error("no transport; dropped a result of %d bytes", length)
            return
        head = b'{"jsonrpc":"2.0","id":%s,"result":' % orjson.dumps(msg_id)
        self.flush()
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

    refuse = send_error  # what the envelope checks answer with (envelope.Routes)


_BIG = 64 * 1024
_SPLIT_FROM = splitparse.SPLIT_FROM
_ENVELOPE = EnvelopePolicy(answer_unaddressed=False, object_params=True)
"""tether's protocol: params are an object; a message neither request nor response is dropped."""


def _loads(body: bytes | bytearray) -> Any:
    """A body parsed whole, or a big one a piece of its ``messages`` at a time."""
    return orjson.loads(body) if len(body) < _SPLIT_FROM else splitparse.loads(body)


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
