"""tether's pygls protocol: pygls's request machinery behind tether's :class:`Wire`.

tether's own methods never come here: the wire dispatches them. pygls keeps what it does well
for the standard LSP methods: handler dispatch through its feature table, in-flight request
futures and ``$/cancelRequest`` for them, and work-done progress. The wire does the rest
(framing, decoding, the lifecycle, encoding, ids and routing of requests to the client), so here:

- requests pygls-side code sends to the client (``window/showMessageRequest``,
  ``window/workDoneProgress/create``...) take their ids from the wire, and the client's answers
  come back through the wire's routing table, structured into lsprotocol types here; JSON-RPC
  ids are per sender, so pygls's ``_request_futures`` holds the client's requests only;
- params of methods without an lsprotocol type stay the plain dicts orjson decoded; only
  standard LSP methods are structured into lsprotocol types;
- coroutine handlers start eagerly, and only those that suspend become tasks;
- everything pygls sends goes out through the wire, encoded with orjson.

pygls's internals are reached only through :class:`~tether.lsp.pygls_adapter.PyglsAdapter`.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import attrs
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from tether.lsp.pygls_adapter import Callback, Handler, PyglsAdapter
from tether.protocol import ErrorCode, TetherError
from tether.rpc import eager
from tether.rpc.errors import ClientError, error_from_exception, error_object
from tether.rpc.wire import Message, MsgId, Wire, is_error_object

if TYPE_CHECKING:
    from cattrs import Converter
    from pygls.server import JsonRPCServer

logger = logging.getLogger(__name__)

# Standard LSP methods whose params pygls's builtins expect as lsprotocol types.
_TYPED_LSP = frozenset(lsp.METHOD_TO_TYPES) - {
    lsp.INITIALIZE,
    lsp.INITIALIZED,
    lsp.SHUTDOWN,
    lsp.EXIT,
}


class TetherProtocol(PyglsAdapter):
    """A :class:`tether.rpc.wire.Dispatcher` built from pygls's protocol."""

    def __init__(self, server: JsonRPCServer, converter: Converter) -> None:
        self.wire: Wire | None = None
        self._coroutine_handlers: dict[Callable[..., Any], bool] = {}
        self._outgoing: dict[MsgId, Future[Any]] = {}  # our requests, waiting for the answer
        self._unsendable: BaseException | None = None  # why the request being sent was not
        super().__init__(server, converter)

    def bind(self, wire: Wire) -> None:
        self.wire = wire
        wire.attach(self)

    # -- what the wire lets through ----------------------------------------------------------

    def request(self, msg_id: MsgId, method: str, params: Any, message: Message) -> None:
        if not self._serves(method):  # routine for a generic LSP client: not worth a warning
            logger.debug("method not found: %r", method)
            error = error_object(ErrorCode.METHOD_NOT_FOUND, f"method not found: {method}")
            self._out().send_error(msg_id, error)
            return
        if method in _TYPED_LSP:
            try:
                params = self.structure_message(message).params
            except Exception as exc:
                self._out().send_error(msg_id, _error_of(exc))
                return
        contextvars.copy_context().run(self.run_request, msg_id, method, params)

    def notification(self, method: str, params: Any, message: Message) -> None:
        if method == lsp.CANCEL_REQUEST:
            self._cancel(params)
            return
        if not self._serves(method):
            logger.debug("ignored notification of unknown method %r", method)
            return
        if method in _TYPED_LSP:
            try:
                params = self.structure_message(message).params
            except Exception:
                logger.warning("dropped malformed %r notification", method)
                return
        contextvars.copy_context().run(self.run_notification, method, params)

    def _serves(self, method: str) -> bool:
        return method in self.fm.features or method in self.fm.builtin_features

    def notification_done(self, outcome: Any) -> None:
        """A notification handler that failed: the client's mistake (a :class:`TetherError`,
        such as an unknown session) is noted; anything else is a bug, logged with its traceback."""
        exc = None if outcome.cancelled() else outcome.exception()
        if isinstance(exc, TetherError):
            logger.info("a notification was refused: %s", exc.message)
        elif exc is not None:
            logger.error("a notification handler failed", exc_info=exc)

    def _cancel(self, params: Any) -> None:
        """``$/cancelRequest``: only an integer or string id can name a request; the rest (a list,
        an object, no id at all) is the client's mistake, noted at debug level and ignored."""
        msg_id = params.get("id") if isinstance(params, dict) else None
        if not isinstance(msg_id, str | int) or isinstance(msg_id, bool):
            logger.debug("ignored $/cancelRequest without a usable id: %.80r", params)
            return
        self._cancel_request(msg_id)

    def _cancel_request(self, msg_id: MsgId) -> None:
        """Cancel a request still running. One that was answered already is no news: a cancel
        often crosses the answer on the wire."""
        future = self.take_client_request(msg_id)
        if future is None:
            logger.debug("$/cancelRequest for no running request: id %r", msg_id)
        elif future.cancel():
            logger.debug("cancelled request %r", msg_id)

    def _response(self, pending: Future[Any], message: Message) -> None:
        """The client's answer to a request pygls-side code sent, structured into the result
        type of its method. A malformed answer (neither ``result`` nor a well-formed ``error``)
        fails the request, so nothing waits for an answer that will not come."""
        msg_id = message["id"]
        try:
            if "result" not in message and not is_error_object(message.get("error")):
                raise ValueError("neither a result nor an error object")
            self.handle_message(self.structure_message(message))
        except Exception as exc:
            logger.warning("malformed response to request %r: %s", msg_id, exc)
            self._forget(msg_id)
            if not pending.done():
                pending.set_exception(ClientError("the client's answer is not a valid response"))

    async def request_client(self, method: str, params: Any) -> Any:
        """Send a request to the client and return its result: the wire's
        :meth:`~tether.rpc.wire.Wire.request_client`."""
        return await self._out().request_client(method, params)

    def send_request(
        self,
        method: str,
        params: Any | None = None,
        callback: Callable[[Any], None] | None = None,
        msg_id: MsgId | None = None,
    ) -> Future[Any]:
        """pygls's ``send_request``, with an id of the wire's and the answer routed back by it."""
        wire = self._out()
        if msg_id is None:
            msg_id = wire.new_request_id()
        theirs = self.take_client_request(msg_id)  # a request of the client's, same id
        self._unsendable = None
        try:
            future = super().send_request(method, params, callback, msg_id)
        finally:  # pygls puts it in the table of the client's requests: it is ours
            self.take_client_request(msg_id)
            if theirs is not None:
                self.track_client_request(msg_id, theirs)
        if self._unsendable is not None:  # never sent, so never answered: fail it now
            future.set_exception(self._unsendable)
            self._unsendable = None
            return future
        self._outgoing[msg_id] = future
        wire.expect_response(msg_id, lambda message: self._response(future, message))
        return future

    def response_arrived(
        self, msg_id: MsgId, result: Any | None, error: lsp.ResponseError | None
    ) -> None:
        future = self._outgoing.pop(msg_id, None)
        if future is None:
            logger.warning("dropped a response to no request of ours: id %r", msg_id)
        elif error is not None:
            future.set_exception(JsonRpcException.from_error(error))
        else:
            future.set_result(result)

    def _forget(self, msg_id: MsgId) -> None:
        self._outgoing.pop(msg_id, None)
        self.forget_result_type(msg_id)

    def cancel_requests(self) -> None:
        """Cancel the client's requests still running (our requests to it are left)."""
        for future in self.client_requests():
            if isinstance(future, asyncio.Future):
                future.cancel()

    # -- running handlers --------------------------------------------------------------------

    def execute_handler(
        self,
        msg_id: MsgId,
        handler: Handler,
        callback: Callback,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Start coroutine handlers eagerly, as Python 3.12's eager tasks do.

        pygls wraps every coroutine handler in a task and answers from its done callback: three
        trips around the event loop for a handler that never waits. Here the coroutine runs at
        once; only one that suspends becomes a task (and so can be cancelled).
        """
        is_coroutine = self._coroutine_handlers.get(handler)
        if is_coroutine is None:
            is_coroutine = self._coroutine_handlers[handler] = inspect.iscoroutinefunction(handler)
        if not is_coroutine:
            self.execute_as_pygls(msg_id, handler, callback, args, kwargs)
            return
        started = eager.start(handler(*args, **kwargs))
        if isinstance(started, eager.Finished):
            callback(_Done(started.result, started.exception))
            return
        self.track_client_request(msg_id, started)
        started.add_done_callback(callback)

    # -- what pygls sends, through the wire --------------------------------------------------

    def _out(self) -> Wire:
        # A method, not a property: pygls's __init__ getattr()s every attribute by name.
        assert self.wire is not None, "bind() the protocol to a wire first"
        return self.wire

    def answer_request(self, msg_id: MsgId, outcome: Any) -> None:
        if outcome.cancelled():
            self._out().send_error(
                msg_id, error_object(ErrorCode.REQUEST_CANCELLED, "request cancelled")
            )
        elif (exc := outcome.exception()) is not None:
            self._out().send_error(msg_id, _error_of(exc))
        else:
            self._out().send_result(msg_id, outcome.result(), self._to_json)

    def send_response(self, msg_id: MsgId, result: Any, error: lsp.ResponseError | None) -> None:
        if error is not None:
            self._out().send_error(msg_id, error_object(error.code, error.message, error.data))
        else:
            self._out().send_result(msg_id, result, self._to_json)

    def send_data(self, data: Any) -> None:
        if data:
            try:
                self._out().send_message(data, self._to_json)
            except Exception as exc:
                logger.exception("could not send %s", type(data).__name__)
                if getattr(data, "method", None) and getattr(data, "id", None) is not None:
                    self._unsendable = exc  # a request of ours: send_request fails its future

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; ``params`` may be a pydantic model, a dict or an lsprotocol type."""
        self._out().send_notification(method, params, self._to_json)

    def _to_json(self, value: Any) -> Any:
        if attrs.has(type(value)):
            return self.converter.unstructure(value)
        if hasattr(value, "model_dump"):
            return value.model_dump(mode="json", by_alias=True, exclude_none=True)
        raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _error_of(exc: BaseException) -> dict[str, Any]:
    """pygls's own exceptions (method not found, invalid LSP params) keep their code."""
    if isinstance(exc, JsonRpcException):
        return error_object(exc.code, exc.message, exc.data)
    return error_from_exception(exc)


class _Done:
    """A finished handler's outcome, read by pygls's callbacks through the Future interface."""

    __slots__ = ("_exception", "_result")

    def __init__(self, result: Any, exception: BaseException | None) -> None:
        self._result, self._exception = result, exception

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException | None:
        return self._exception

    def result(self) -> Any:
        if self._exception is not None:
            raise self._exception
        return self._result
