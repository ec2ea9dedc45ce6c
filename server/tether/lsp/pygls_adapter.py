"""Every pygls internal tether relies on, named in this module and nowhere else.

pygls's public extension points (``LanguageServer(protocol_cls=..., converter_factory=...)``,
``server.feature``, ``JsonRPCProtocol.structure_message``, ``handle_message``, ``send_request``,
``notify``, ``protocol.progress``, ``protocol.fm``) carry the LSP face. They have no hook for
four things tether needs, so :class:`PyglsAdapter` overrides or calls pygls's private members
for them, and turns each into a method with a name of tether's:

- **how a handler runs** (``_execute_handler``): tether starts coroutine handlers eagerly
  (pygls makes every one a task, three trips around the event loop) -> :meth:`execute_handler`,
  with pygls's own way kept as :meth:`execute_as_pygls`;
- **how an outcome is answered** (``_send_handler_result``, ``_check_handler_result``,
  ``_send_response``): pygls answers nothing when a result cannot be serialized, and maps every
  error to its own codes -> :meth:`answer_request`, :meth:`notification_done`,
  :meth:`send_response`;
- **where a message goes out** (``_send_data``): through tether's wire, encoded with orjson,
  not pygls's writer -> :meth:`send_data`;
- **how a response finds its request** (``_handle_response``, ``_request_futures``,
  ``_result_types``): JSON-RPC ids are per sender, yet pygls keeps the client's requests and its
  own in one table -> :meth:`response_arrived`, :meth:`take_client_request` and company.

Besides, it enters pygls's dispatch at ``_handle_request``/``_handle_notification``: the wire
has decoded and checked the message already, and the public ``handle_message`` re-checks it with
``isinstance`` against runtime-checkable protocols, ~17 us per check on Python 3.11 (9 us through
``_handle_notification`` against 64 us through ``handle_message`` for a no-op notification); and
it sets ``_workspace``, which pygls sets only in its own ``initialize`` (tether answers that).

:data:`RELIED_ON` lists each private method with the parameters tether passes or receives, and
:data:`RELIED_ON_ATTRIBUTES` the private attributes; :func:`check_pygls` compares them with the
installed pygls when this module is imported, so a release that changed them fails loudly here,
not as requests that are never answered. ``tests/lsp/test_pygls_adapter.py`` checks the same and
that no other module of tether names a pygls internal; ``make pygls-matrix`` runs the LSP tests
under every pygls release the pin in pyproject.toml allows. The protocol layer of pygls is the same
in 2.0.0-2.1.1 (2.0.1 only made ``_check_handler_result`` skip cancelled futures).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pygls.protocol import LanguageServerProtocol

if TYPE_CHECKING:
    from cattrs import Converter
    from lsprotocol import types as lsp
    from pygls.server import JsonRPCServer
    from pygls.workspace import Workspace

MsgId = int | str
Handler = Callable[..., Any]
Callback = Callable[[Any], None]
Running = Future[Any] | asyncio.Future[Any]  # a thread's or pygls's future, or a task

RELIED_ON: dict[str, tuple[str, ...]] = {
    # called and overridden: runs one handler, calls ``callback`` with its outcome (a future)
    "_execute_handler": ("self", "msg_id", "handler", "callback", "args", "kwargs"),
    # called: find the handler of a request/notification and run it, answering errors
    "_handle_request": ("self", "msg_id", "method_name", "params"),
    "_handle_notification": ("self", "method_name", "params"),
    # overridden: the callbacks _handle_request/_handle_notification give _execute_handler
    "_send_handler_result": ("self", "future", "msg_id"),
    "_check_handler_result": ("self", "future"),
    # overridden: what handle_message calls for a response; what pygls answers and sends with
    "_handle_response": ("self", "msg_id", "result", "error"),
    "_send_response": ("self", "msg_id", "result", "error"),
    "_send_data": ("self", "data"),
}
"""pygls's private methods this module calls or overrides, with their parameter names."""

RELIED_ON_ATTRIBUTES = ("_request_futures", "_result_types", "_workspace")
"""pygls's private instance attributes: in-flight requests by id (the client's and, while
``send_request`` runs, ours), result types of our requests by id, the document store."""


class IncompatiblePygls(RuntimeError):
    """The installed pygls lacks an internal tether relies on."""


def check_pygls() -> None:
    """Raise :class:`IncompatiblePygls` naming what the installed pygls changed."""
    problems = []
    for name, expected in RELIED_ON.items():
        member = getattr(LanguageServerProtocol, name, None)
        if not callable(member):
            problems.append(f"{name} is gone")
            continue
        found = tuple(inspect.signature(member).parameters)
        if found != expected:
            problems.append(f"{name}{found} (expected {expected})")
    if problems:
        from importlib.metadata import version

        raise IncompatiblePygls(
            f"pygls {version('pygls')} changed what tether's LSP face relies on: "
            f"{'; '.join(problems)}. Install a release tether supports (see pyproject.toml)."
        )


check_pygls()


class PyglsAdapter(LanguageServerProtocol):
    """pygls's protocol with its private hooks turned into tether-named methods.

    A subclass implements the hooks (:meth:`execute_handler` ... :meth:`send_data`) and uses the
    helpers; it names no pygls internal itself.
    """

    def __init__(self, server: JsonRPCServer, converter: Converter) -> None:
        self.converter = converter  # the one pygls was given (``converter_factory``)
        super().__init__(server, converter)  # type: ignore[arg-type]

    # -- into pygls -----------------------------------------------------------------------

    def run_request(self, msg_id: MsgId, method: str, params: Any) -> None:
        """Run the handler of a request; its outcome comes back to :meth:`answer_request`."""
        self._handle_request(msg_id, method, params)

    def run_notification(self, method: str, params: Any) -> None:
        """Run the handler of a notification; its outcome comes to :meth:`notification_done`."""
        self._handle_notification(method, params)

    def execute_as_pygls(
        self,
        msg_id: MsgId,
        handler: Handler,
        callback: Callback,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """pygls's own way to run a handler (threads, generators, tasks)."""
        super()._execute_handler(msg_id, handler, callback, args, kwargs)

    def use_workspace(self, workspace: Workspace) -> None:
        """Give pygls's text-sync handlers their document store (pygls makes one only in its
        ``initialize``, which tether answers itself)."""
        self._workspace = workspace

    def drop_builtin(self, method: str) -> None:
        """Forget pygls's built-in handler of ``method`` (``fm.builtin_features`` is the live
        table pygls dispatches from)."""
        self.fm.builtin_features.pop(method, None)

    # -- the table of requests in flight ----------------------------------------------------

    def take_client_request(self, msg_id: MsgId) -> Running | None:
        """Remove and return the client's request ``msg_id`` if it is still running."""
        return self._request_futures.pop(msg_id, None)

    def track_client_request(self, msg_id: MsgId, running: Running) -> None:
        """Let ``$/cancelRequest`` find a client's request that is running."""
        self._request_futures[msg_id] = running  # type: ignore[assignment]  # pygls mixes both

    def client_requests(self) -> list[Running]:
        return list(self._request_futures.values())

    def forget_result_type(self, msg_id: MsgId) -> None:
        """Drop the result type ``send_request`` noted for our request ``msg_id``."""
        self._result_types.pop(msg_id, None)

    # -- pygls's private hooks, forwarded ------------------------------------------------------

    def _execute_handler(
        self,
        msg_id: MsgId,
        handler: Handler,
        callback: Callback,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.execute_handler(msg_id, handler, callback, args or (), kwargs or {})

    def _send_handler_result(self, future: Any, *, msg_id: MsgId) -> None:
        self.take_client_request(msg_id)
        self.answer_request(msg_id, future)

    def _check_handler_result(self, future: Any) -> None:
        self.notification_done(future)

    def _handle_response(
        self, msg_id: MsgId, result: Any | None = None, error: lsp.ResponseError | None = None
    ) -> None:
        self.response_arrived(msg_id, result, error)

    def _send_response(
        self, msg_id: MsgId, result: Any = None, error: lsp.ResponseError | None = None
    ) -> None:
        self.send_response(msg_id, result, error)

    def _send_data(self, data: Any) -> None:
        self.send_data(data)

    # -- the hooks, for the subclass -------------------------------------------------------

    def execute_handler(
        self,
        msg_id: MsgId,
        handler: Handler,
        callback: Callback,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Run ``handler(*args, **kwargs)``; call ``callback`` with a future-like outcome."""
        self.execute_as_pygls(msg_id, handler, callback, args, kwargs)

    def answer_request(self, msg_id: MsgId, outcome: Any) -> None:
        """A request's handler finished (``outcome``: a future, maybe cancelled): answer it."""
        raise NotImplementedError

    def notification_done(self, outcome: Any) -> None:
        """A notification's handler finished; ``outcome`` is a future, maybe cancelled."""
        raise NotImplementedError

    def response_arrived(
        self, msg_id: MsgId, result: Any | None, error: lsp.ResponseError | None
    ) -> None:
        """The client answered our request ``msg_id`` (through :meth:`handle_message`)."""
        raise NotImplementedError

    def send_response(self, msg_id: MsgId, result: Any, error: lsp.ResponseError | None) -> None:
        """Answer the client's request ``msg_id`` (pygls's own errors come here)."""
        raise NotImplementedError

    def send_data(self, data: Any) -> None:
        """Send a message pygls built (a request of ours, an answer, a notification)."""
        raise NotImplementedError
