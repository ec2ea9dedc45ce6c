"""tether's JSON-RPC protocol: pygls's request machinery with its slow and fragile paths replaced.

pygls keeps what it does well here: handler dispatch, in-flight request futures,
``$/cancelRequest``, server-to-client requests, work-done progress and shutdown. Replaced:

- decoding: frames come from :class:`FrameDecoder`; bodies are parsed once with orjson, and the
  params of tether's own methods stay plain dicts (handlers validate them into pydantic models).
  Only standard LSP methods are structured into lsprotocol types;
- encoding: results and notifications are written with orjson; pydantic results are dumped by
  alias with unset optionals omitted; a result that cannot be serialized becomes -32603;
- every request with an id gets exactly one response: malformed bodies (-32700, id null), invalid
  envelopes (-32600), requests before ``initialize`` (-32002) or after ``shutdown`` (-32600),
  missing params, and handler exceptions, mapped to codes in :mod:`tether.rpc.errors`.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import attrs
import orjson
from lsprotocol import types as lsp
from pydantic import BaseModel
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from tether.protocol import ErrorCode, InitializeParams, InitializeResult, InvalidRequest
from tether.protocol.framing import Frame, FrameDecoder, encode_frame
from tether.rpc.errors import ErrorObject, error_from_exception, error_object

if TYPE_CHECKING:
    from cattrs import Converter

    from tether.rpc.server import TetherServer

logger = logging.getLogger(__name__)

MsgId = str | int
Write = Callable[[bytes], None]

# Standard LSP methods whose params pygls's builtins expect as lsprotocol types. Lifecycle
# methods are handled here on plain dicts, so a sloppy client cannot make them fail to decode.
_UNTYPED_LSP = {lsp.INITIALIZE, lsp.INITIALIZED, lsp.SHUTDOWN, lsp.EXIT}
_TYPED_LSP = frozenset(lsp.METHOD_TO_TYPES) - _UNTYPED_LSP


class TetherProtocol(LanguageServerProtocol):
    _server: TetherServer

    def __init__(self, server: TetherServer, converter: Converter) -> None:
        super().__init__(server, converter)
        self._decoder = FrameDecoder()
        self._write: Write | None = None
        self._unanswered: set[MsgId] = set()  # requests handed to a handler, not yet answered
        self._answered = asyncio.Event()
        self._shutdown_id: MsgId | None = None
        self._coroutine_handlers: dict[Callable[..., Any], bool] = {}
        self.initialized = False
        self.exit_code: int | None = None

    # -- transport ---------------------------------------------------------------------------

    def connect(self, write: Write) -> None:
        """Start a connection: ``write`` sends bytes to the client."""
        self._write = write
        self._decoder = FrameDecoder()

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: decode every complete frame and handle it."""
        for item in self._decoder.feed(data):
            if isinstance(item, Frame):
                self._receive(item.body)
            else:
                logger.warning("bad frame: %s", item.reason)
                self._send_error(None, error_object(ErrorCode.PARSE_ERROR, item.reason))

    def _send_frame(self, body: bytes) -> None:
        if self._write is None:
            logger.error("no transport; dropped %d bytes", len(body))
            return
        self._write(encode_frame(body))

    # -- decoding and dispatch ---------------------------------------------------------------

    def _receive(self, body: bytes) -> None:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            self._send_error(None, error_object(ErrorCode.PARSE_ERROR, f"parse error: {exc}"))
            return
        if not isinstance(data, dict):
            message = "batches are not supported" if isinstance(data, list) else "not an object"
            self._send_error(None, error_object(ErrorCode.INVALID_REQUEST, message))
            return
        ctx = contextvars.copy_context()
        ctx.run(self._dispatch, data)

    def _dispatch(self, data: dict[str, Any]) -> None:
        msg_id = data.get("id")
        valid_id = isinstance(msg_id, str | int) and not isinstance(msg_id, bool)
        method = data.get("method")
        if data.get("jsonrpc") != "2.0" or ("id" in data and not valid_id):
            if "method" in data or "id" in data:
                reply_to = msg_id if valid_id else None
                self._send_error(
                    reply_to, error_object(ErrorCode.INVALID_REQUEST, "not JSON-RPC 2.0")
                )
            return
        if method is None:
            if valid_id and ("result" in data or "error" in data):
                self.handle_message(self.structure_message(data))
            return
        if not isinstance(method, str):
            self._reply_or_log(
                msg_id, error_object(ErrorCode.INVALID_REQUEST, "method must be a string")
            )
            return
        params = data.get("params")
        if params is not None and not isinstance(params, dict):
            self._reply_or_log(
                msg_id, error_object(ErrorCode.INVALID_PARAMS, "params must be an object")
            )
            return
        if "id" in data:
            self._request(msg_id, method, params, data)  # type: ignore[arg-type]
        else:
            self._notification(method, params, data)

    def _request(self, msg_id: MsgId, method: str, params: Any, data: dict[str, Any]) -> None:
        if self._shutdown:
            self._send_error(msg_id, error_object(ErrorCode.INVALID_REQUEST, "server is shut down"))
            return
        if not self.initialized and method != lsp.INITIALIZE:
            self._send_error(
                msg_id, error_object(ErrorCode.SERVER_NOT_INITIALIZED, "server not initialized")
            )
            return
        if method in _TYPED_LSP:
            try:
                params = self.structure_message(data).params
            except Exception as exc:
                self._send_error(msg_id, error_from_exception(exc))
                return
        self._unanswered.add(msg_id)
        if method == lsp.SHUTDOWN:  # refuse what follows at once, even within this same read
            self._shutdown, self._shutdown_id = True, msg_id
        self._handle_request(msg_id, method, params)

    def _notification(self, method: str, params: Any, data: dict[str, Any]) -> None:
        if method != lsp.EXIT and (self._shutdown or not self.initialized):
            logger.info("dropped notification %r outside the session", method)
            return
        if method in _TYPED_LSP:
            try:
                params = self.structure_message(data).params
            except Exception:
                logger.warning("dropped malformed %r notification", method)
                return
        self._handle_notification(method, params)

    def _execute_handler(
        self,
        msg_id: MsgId,
        handler: Callable[..., Any],
        callback: Callable[[Any], None],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
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
            super()._execute_handler(msg_id, handler, callback, args, kwargs)
            return
        coroutine = handler(*(args or ()), **(kwargs or {}))
        try:
            waiting_on = coroutine.send(None)
        except StopIteration as finished:
            done = _Done(finished.value, None)
        except Exception as exc:
            done = _Done(None, exc)
        else:
            task = asyncio.ensure_future(_Resume(coroutine, waiting_on))
            self._request_futures[msg_id] = task  # type: ignore[assignment]  # pygls mixes both kinds
            task.add_done_callback(callback)
            return
        callback(done)

    # -- responses ---------------------------------------------------------------------------

    def _send_handler_result(self, future: Future[Any], *, msg_id: MsgId) -> None:
        self._request_futures.pop(msg_id, None)
        if future.cancelled():
            self._send_error(msg_id, error_object(ErrorCode.REQUEST_CANCELLED, "request cancelled"))
            return
        exc = future.exception()
        if exc is not None:
            self._send_error(msg_id, error_from_exception(exc))
            return
        self._send_result(msg_id, future.result())

    def _send_response(
        self, msg_id: MsgId, result: Any = None, error: lsp.ResponseError | None = None
    ) -> None:
        if error is not None:
            self._send_error(msg_id, error_object(error.code, error.message, error.data))
        else:
            self._send_result(msg_id, result)

    def _send_result(self, msg_id: MsgId, result: Any) -> None:
        try:
            payload = self._encode(result)
        except Exception as exc:
            logger.error("result of request %r cannot be serialized", msg_id, exc_info=exc)
            self._send_error(
                msg_id, error_object(ErrorCode.INTERNAL_ERROR, "result could not be serialized")
            )
            return
        self._send_frame(b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (orjson.dumps(msg_id), payload))
        self._mark_answered(msg_id)

    def _send_error(self, msg_id: MsgId | None, error: ErrorObject) -> None:
        try:
            body = orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error})
        except TypeError:
            error.pop("data", None)
            body = orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "error": error})
        self._send_frame(body)
        self._mark_answered(msg_id)

    def _mark_answered(self, msg_id: MsgId | None) -> None:
        if msg_id in self._unanswered:
            self._unanswered.discard(msg_id)
            self._answered.set()

    def _reply_or_log(self, msg_id: Any, error: ErrorObject) -> None:
        if isinstance(msg_id, str | int) and not isinstance(msg_id, bool):
            self._send_error(msg_id, error)
        else:
            logger.warning("dropped bad notification: %s", error["message"])

    def _send_data(self, data: Any) -> None:
        """pygls's own path for notifications and server-to-client requests."""
        if not data:
            return
        try:
            self._send_frame(orjson.dumps(data, default=self._to_json))
        except Exception:
            logger.exception("could not send %r", type(data).__name__)

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification; ``params`` may be a pydantic model, a dict or an lsprotocol type."""
        self._send_frame(
            b'{"jsonrpc":"2.0","method":%s,"params":%s}'
            % (orjson.dumps(method), self._encode(params))
        )

    def _encode(self, value: Any) -> bytes:
        if isinstance(value, BaseModel):
            return value.model_dump_json(by_alias=True, exclude_none=True).encode()
        return orjson.dumps(value, default=self._to_json)

    def _to_json(self, value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json", by_alias=True, exclude_none=True)
        if attrs.has(type(value)):
            return self._converter.unstructure(value)
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    # -- lifecycle ---------------------------------------------------------------------------

    # These replace pygls's builtins of the same name (registered by method name): its
    # initialize needs lsprotocol-typed params, its shutdown cancels the requests in flight
    # instead of answering them, and its exit calls sys.exit from inside a callback.
    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: dict[str, Any] | None) -> InitializeResult:  # type: ignore[override]
        if self.initialized:
            raise InvalidRequest("initialize was already called")
        result = self._server.initialize(InitializeParams.model_validate(params or {}))
        self.initialized = True
        return result

    @lsp_method(lsp.SHUTDOWN)
    async def lsp_shutdown(self, *args: Any) -> None:  # type: ignore[override]
        """Answer once every request received before it has been answered."""
        await self.settle(cancel=False)

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any) -> None:  # type: ignore[override]
        self.exit_code = 0 if self._shutdown else 1
        self._server.stop()

    async def settle(self, *, cancel: bool) -> None:
        """Return once every request received so far has been answered; cancel them if asked.

        Handlers of incoming requests run as asyncio tasks; the concurrent futures pygls keeps in
        the same table are its own requests to the client, which are not ours to cancel here.
        """
        if cancel:
            for msg_id, future in list(self._request_futures.items()):
                if isinstance(future, asyncio.Future) and msg_id != self._shutdown_id:
                    future.cancel()
        current = self.msg_id
        while self._unanswered - {current}:
            self._answered.clear()
            await self._answered.wait()


class _Resume:
    """The rest of a coroutine that was started eagerly and is suspended on ``waiting_on``.

    Awaited by a task, it passes each awaited future up to the task, and the task's wake-ups,
    results and cancellations back down, exactly as if the task had run the coroutine from the
    start.
    """

    __slots__ = ("_coroutine", "_waiting_on")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self._coroutine = coroutine
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, None, Any]:
        coroutine, waiting_on = self._coroutine, self._waiting_on
        while True:
            thrown: BaseException | None = None
            try:
                yield waiting_on
            except BaseException as exc:  # the task threw in, e.g. CancelledError
                thrown = exc
            try:
                waiting_on = coroutine.send(None) if thrown is None else coroutine.throw(thrown)
            except StopIteration as finished:
                return finished.value


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
