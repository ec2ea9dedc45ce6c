"""Requests from the peer run by their handlers, started in the order they arrive.

A handler is started at once, in the read that brought its request, and runs up to its first
wait (:mod:`tether.jsonrpc.eager`): one that never waits is answered without a trip around the
event loop, and a notification that follows its request in the same read (ACP's
``session/cancel`` after a ``session/prompt``) finds what the request started. Only a handler
that waits becomes a task, which the peer can cancel by the request's id.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from tether.jsonrpc import eager
from tether.jsonrpc.envelope import MsgId
from tether.jsonrpc.errors import ErrorObject, ErrorTable, error_object
from tether.protocol import ErrorCode

Handler = Callable[[Any], Coroutine[Any, Any, Any]]
"""Takes a request's params; returns its result, or raises what the face's table answers."""

Answer = Callable[[MsgId, Any], None]
Refuse = Callable[[MsgId, ErrorObject], None]


class Router:
    """Starts requests' handlers and answers each request once, with ``answer`` (its result)
    or ``refuse`` (the error object ``errors`` maps what it raised to)."""

    def __init__(self, errors: ErrorTable, answer: Answer, refuse: Refuse) -> None:
        self._errors = errors
        self._answer = answer
        self._refuse = refuse
        self.running: dict[MsgId, asyncio.Future[Any]] = {}
        """The requests whose handlers wait, by id."""

    def start(self, msg_id: MsgId, handler: Handler, params: Any) -> None:
        """Run ``handler`` for request ``msg_id`` (in a copy of the current context, as a task
        would) up to its first wait."""
        contextvars.copy_context().run(self._start, msg_id, handler, params)

    def _start(self, msg_id: MsgId, handler: Handler, params: Any) -> None:
        coroutine = handler(params)
        try:
            waiting_on = coroutine.send(None)  # eager.start, inlined: every request's path
        except StopIteration as finished:
            self._answer(msg_id, finished.value)
            return
        except Exception as exc:
            self._refuse(msg_id, self._errors.error_of(exc))
            return
        task = asyncio.ensure_future(eager.Resume(coroutine, waiting_on))
        self.running[msg_id] = task
        task.add_done_callback(functools.partial(self._finished, msg_id))

    def _finished(self, msg_id: MsgId, task: asyncio.Future[Any]) -> None:
        self.running.pop(msg_id, None)
        if task.cancelled():
            self._refuse(msg_id, error_object(ErrorCode.REQUEST_CANCELLED, "request cancelled"))
            return
        exc = task.exception()
        if exc is not None:
            self._refuse(msg_id, self._errors.error_of(exc))
        else:
            self._answer(msg_id, task.result())

    def cancel(self, msg_id: MsgId) -> bool:
        """Cancel request ``msg_id`` if its handler waits (it answers ``-32800``)."""
        task = self.running.get(msg_id)
        if task is None:
            return False
        task.cancel()
        return True

    def cancel_all(self) -> list[asyncio.Future[Any]]:
        """Cancel every waiting handler; the tasks, to wait for."""
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        return tasks

    async def wait_all(self) -> None:
        """Return once every handler waiting now has finished."""
        if self.running:
            await asyncio.wait(list(self.running.values()))
