"""Requests to the editor that a tool's thread waits for: each runs on the event loop within a
bound, and the wait ends at once when the call is cancelled.

The file tools run in a thread, and a write that has begun is finished rather than abandoned
(:func:`~tether.tools.writing.finish_once_started`), while an editor's buffers are reached by
requests made on the event loop (``workspace/applyEdit``, ACP's ``fs/write_text_file``). A
thread that waited for their answer without a bound would hold the call, and with it the run,
for as long as the editor does not answer: a cancelled run would never end. So every such wait
gives up after ``timeout`` seconds (the request is withdrawn: the coroutine is cancelled), and
:meth:`EditorRequests.interrupt` ends the waits of a call that was cancelled at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tether.tools.base import ToolError

T = TypeVar("T")


class RequestWithdrawn(ToolError):
    """A request to the editor was withdrawn before its answer came (the call was cancelled,
    or the editor took too long): the editor may have carried it out all the same."""


class EditorRequests:
    """The requests one tool call makes to the editor from its thread. ``setting`` names the
    key that sets ``timeout``, for the error that says it ran out."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float, setting: str) -> None:
        self._loop = loop
        self.timeout = timeout
        self._setting = setting
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._interrupted = False

    def call(self, request: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
        """From a tool's thread: ``request()`` run on the loop, and its result (or its error).
        :class:`RequestWithdrawn` when it takes longer than the timeout, or when the call is
        interrupted while it waits (the request's task is cancelled); a :class:`ToolError` when
        the call was interrupted before (nothing is sent)."""
        with self._lock:
            if self._interrupted:
                raise ToolError(f"the call was cancelled before {what} was sent")
            future = asyncio.run_coroutine_threadsafe(self._bounded(request), self._loop)
            self._pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise RequestWithdrawn(
                f"the call was cancelled while it waited for the editor's answer to {what}, "
                "so the request was withdrawn"
            ) from None
        except TimeoutError:
            raise RequestWithdrawn(
                f"the editor did not answer {what} within {self.timeout:g} s ({self._setting}), "
                "so the request was withdrawn"
            ) from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def interrupt(self) -> None:
        """The call was cancelled: the waits under way end now, and later ones at once."""
        with self._lock:
            self._interrupted = True
            pending = list(self._pending)
        for future in pending:
            future.cancel()  # cancels the request's task on the loop

    async def _bounded(self, request: Callable[[], Coroutine[Any, Any, T]]) -> T:
        async with asyncio.timeout(self.timeout):
            return await request()
