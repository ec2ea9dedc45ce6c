"""Requests a face makes to its editor that no person answers (an edit to apply, a file to
read, a terminal to start), each within a bound: :func:`bounded_request`, the one place both
faces (LSP, ACP) bound them, and :class:`EditorRequests` for a tool's thread that waits for one.

The file tools run in a thread, and a write that has begun is finished rather than abandoned
(:func:`~tether.tools.writing.finish_once_started`), while an editor's buffers are reached by
requests made on the event loop (``workspace/applyEdit``, ACP's ``fs/write_text_file``). A
thread that waited for their answer without a bound would hold the call, and with it the run,
for as long as the editor does not answer: a cancelled run would never end. So every such
request gives up after ``timeout`` seconds (it is withdrawn: its await is cancelled, which each
face's wire turns into forgetting it, and LSP's into ``$/cancelRequest``);
:meth:`EditorRequests.interrupt` ends the waits of a call that was cancelled at once; and the
thread's own wait is bounded too, so a thread never outlives an event loop that stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tether.tools.base import ToolError

Send = Callable[[str, Any], Awaitable[Any]]
"""A face's request to its client: method, params -> the answer (cancelling it withdraws it)."""

LOOP_GRACE = 1.0
"""Seconds a tool's thread waits for an answer beyond the request's own bound: the event loop
hands every answer (or the end of the bound) over at once, unless it has stopped."""


@dataclass(frozen=True)
class Bound:
    """How long the editor has to answer a request no person answers: ``seconds``, which the
    configuration key ``setting`` sets (named in the error)."""

    seconds: float
    setting: str


class Unanswered(TimeoutError):
    """A request that no person answers was not answered within its bound, and was withdrawn
    (the editor may carry it out all the same)."""

    def __init__(self, method: str, bound: Bound) -> None:
        super().__init__(
            f"the editor did not answer {method} within {bound.seconds:g} s ({bound.setting})"
        )
        self.method = method


class RequestWithdrawn(ToolError):
    """A request to the editor was withdrawn before its answer came (the call was cancelled,
    or the editor took too long): the editor may have carried it out all the same."""


async def bounded_request(send: Send, method: str, params: Any, bound: Bound) -> Any:
    """``send(method, params)``'s answer, within ``bound``: :class:`Unanswered` after that, the
    request withdrawn."""
    deadline = asyncio.timeout(bound.seconds)
    try:
        async with deadline:
            return await send(method, params)
    except TimeoutError:
        if not deadline.expired():  # the request's own error
            raise
        raise Unanswered(method, bound) from None


class EditorRequests:
    """The requests one tool call makes to the editor from its thread, each with ``timeout``
    seconds to be answered (``setting`` names the key that sets it, for the error)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float, setting: str) -> None:
        self._loop = loop
        self._bound = Bound(timeout, setting)
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._interrupted = False

    def call(self, send: Send, method: str, params: Any) -> Any:
        """From a tool's thread: :func:`bounded_request` on the loop, and its answer (or its
        error). :class:`RequestWithdrawn` when it is not answered in time, when the call is
        interrupted while it waits (the request's task is cancelled), or when the loop does not
        hand the answer over (it stopped); a :class:`ToolError` when the call was interrupted
        before (nothing is sent)."""
        request = bounded_request(send, method, params, self._bound)
        with self._lock:
            if self._interrupted:
                request.close()
                raise ToolError(f"the call was cancelled before {method} was sent")
            future = asyncio.run_coroutine_threadsafe(request, self._loop)
            self._pending.add(future)
        try:
            return future.result(timeout=self._bound.seconds + LOOP_GRACE)
        except concurrent.futures.CancelledError:
            raise RequestWithdrawn(
                f"the call was cancelled while it waited for the editor's answer to {method}, "
                "so the request was withdrawn"
            ) from None
        except Unanswered as exc:
            raise RequestWithdrawn(f"{exc}, so the request was withdrawn") from None
        except TimeoutError:  # the loop never handed the answer over: it stopped
            future.cancel()
            raise RequestWithdrawn(
                f"no answer to {method} came back within {self._bound.seconds + LOOP_GRACE:g} s "
                "(tether's event loop stopped), so the request was withdrawn"
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
