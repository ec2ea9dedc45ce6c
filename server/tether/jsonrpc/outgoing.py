"""Our requests to the peer: ids, the answers routed back, and their withdrawal.

Each request gets an id ``tether-N`` (never a uuid a client might use) and waits for the answer
with that id. Cancelling the wait withdraws the request: the face tells the peer if its protocol
has a way (``$/cancelRequest`` on tether's protocol; ACP's clients are not told), and an answer
that comes later is dropped as the answer to a request withdrawn.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from tether.jsonrpc.envelope import Message, MsgId
from tether.jsonrpc.errors import ClientError

logger = logging.getLogger(__name__)

OnResponse = Callable[[Message], None]
"""Takes the peer's answer to one of our requests (whatever it is: result, error, malformed)."""

SendRequest = Callable[[MsgId, str, Any], None]
"""Sends request ``(id, method, params)`` to the peer."""

_MAX_WITHDRAWN = 1024


class OutgoingRequests:
    """The requests we sent the peer and are still waiting for."""

    def __init__(self, send: SendRequest, tell_withdrawn: Callable[[MsgId], None] | None) -> None:
        self._send = send
        self._tell_withdrawn = tell_withdrawn
        self._ids = itertools.count(1)
        self._waiting: dict[MsgId, OnResponse] = {}
        self._withdrawn: set[MsgId] = set()  # cancelled before their answer came
        self._closed: str | None = None  # why the peer is gone

    def new_id(self) -> str:
        """An id for a request to the peer; ``tether-N`` never clashes with a uuid."""
        return f"tether-{next(self._ids)}"

    def expect(self, msg_id: MsgId, on_response: OnResponse) -> None:
        """Route the peer's answer to request ``msg_id`` (the caller sends it) to
        ``on_response``."""
        self._waiting[msg_id] = on_response

    def withdraw(self, msg_id: MsgId) -> None:
        """Give up on request ``msg_id``: the peer is told if the face can, and a late answer is
        dropped."""
        self._waiting.pop(msg_id, None)
        if len(self._withdrawn) >= _MAX_WITHDRAWN:  # peers that never answer them
            self._withdrawn.clear()
        self._withdrawn.add(msg_id)
        if self._tell_withdrawn is not None:
            self._tell_withdrawn(msg_id)

    def response(self, message: Message) -> None:
        """The peer's answer to one of our requests, by its id."""
        msg_id = message["id"]
        on_response = self._waiting.pop(msg_id, None)
        if on_response is not None:
            on_response(message)
        elif msg_id in self._withdrawn:
            self._withdrawn.discard(msg_id)
            logger.debug("dropped the late answer to withdrawn request %r", msg_id)
        else:  # an id of no request of ours (the peer's own ids do not count)
            logger.warning("dropped a response to no request of ours: id %r", msg_id)

    async def request(self, method: str, params: Any) -> Any:
        """Send a request to the peer and return its result.

        An error answer raises :class:`ClientError` with the peer's code; a malformed answer
        (neither ``result`` nor a well-formed ``error``) raises it with code ``None``, so nothing
        waits for an answer that will not come. Cancelling the await withdraws the request. A
        request that ends cancelled while its waiter was not is withdrawn the same way and raises
        :class:`ClientError` (code ``None``): the waiter gets no answer, but was not told to stop.
        Once the peer is gone (:meth:`close`), requests raise :class:`ConnectionError`.
        """
        if self._closed is not None:
            raise ConnectionError(self._closed)
        msg_id = self.new_id()
        answer = _Answer(asyncio.get_running_loop().create_future())
        self.expect(msg_id, answer)
        self._send(msg_id, method, params)
        try:
            return await answer.future
        except asyncio.CancelledError:
            self.withdraw(msg_id)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise ClientError("the request was cancelled before the client answered") from None

    def close(self, reason: str) -> None:
        """The peer is gone: every request waiting, and every later one, raises
        :class:`ConnectionError` with ``reason``."""
        self._closed = reason
        waiting, self._waiting = self._waiting, {}
        for on_response in waiting.values():
            if isinstance(on_response, _Answer) and not on_response.future.done():
                on_response.future.set_exception(ConnectionError(reason))


class _Answer:
    """Puts the peer's answer to a request of :meth:`OutgoingRequests.request` into
    ``future``."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future

    def __call__(self, message: Message) -> None:
        if self.future.done():
            return
        error: Any = message.get("error")
        if "result" in message:
            self.future.set_result(message["result"])
        elif is_error_object(error):
            self.future.set_exception(ClientError(error["message"], error["code"]))
        else:
            logger.warning("malformed response to request %r", message.get("id"))
            self.future.set_exception(ClientError("the client's answer is not a valid response"))


def is_error_object(error: Any) -> bool:
    """``{code: integer, message: string, ...}``, as JSON-RPC 2.0 has it."""
    return (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error.get("code"), bool)
        and isinstance(error.get("message"), str)
    )
