"""One ``kernel/run`` request as the client sees it: its progress events, its result, its cancel.

``kernel/progress`` notifications name their run by ``runId``, which the client learns only from
the run's first event. A :class:`Run` therefore waits for the first ``run_started`` of its session
that arrives after its request was sent, while the request has not been answered (a run answered
before it started emitted nothing), and takes that run's events from then on. When two runs are
sent on one session together, the one sent first takes the first ``run_started``; should the
server have refused that one as busy, the run it took is handed on to the next.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Generator
from typing import Any, Final, Generic

from pydantic import BaseModel, ValidationError

from tether.client.connection import Connection
from tether.client.errors import SessionBusyError
from tether.protocol.kernel import OutputT, ProgressParams, RunResult

logger = logging.getLogger(__name__)

_END: Final = object()  # put in a run's queue once its response has arrived


class Run(Generic[OutputT]):
    """A ``kernel/run`` in flight (from :meth:`TetherClient.run`); ``Run[Model]`` for a run
    with ``output_schema=Model``, whose result's ``output`` is a ``Model``.

    - ``async for event in run`` yields the run's ``kernel/progress`` params
      (:class:`~tether.protocol.kernel.ProgressParams`) in ``seq`` order, ``run_started`` first
      and ``run_finished`` last, and ends when the response arrives. A run that fails raises its
      error there, after its events (``RequestCancelledError`` after :meth:`cancel`).
    - ``await run`` (or ``await run.result()``) gives the :class:`RunResult`, or raises the error.
      Events not iterated are kept, so a run can be awaited without iterating it, and iterated
      after its result.
    - :meth:`cancel` sends ``$/cancelRequest``; ``TetherClient.cancel(session_id)`` is
      ``kernel/cancel``, which ends the run normally with ``stop_reason`` ``cancelled``.

    The iterator survives being interrupted: a ``CancelledError`` while waiting for an event loses
    nothing, and iterating again goes on where it stopped.
    """

    def __init__(
        self,
        connection: Connection,
        session_id: str,
        request_id: int,
        future: asyncio.Future[Any],
        *,
        output_type: type[OutputT] | None = None,
    ) -> None:
        self.session_id = session_id
        self.output_type = output_type  # the result's output is made an instance of it
        self.request_id = request_id
        self.run_id: str | None = None  # known from run_started on
        self._connection = connection
        self._future = future
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ended = False

    @property
    def done(self) -> bool:
        """Whether the response has arrived."""
        return self._future.done()

    def cancel(self) -> None:
        """Ask the server to stop this run (``$/cancelRequest``); the run then raises
        :class:`~tether.client.errors.RequestCancelledError` carrying the partial result."""
        if not self._future.done():
            self._connection.notify("$/cancelRequest", {"id": self.request_id})

    async def result(self) -> RunResult[OutputT]:
        """The result, once the run has ended; an error response raises its exception. With an
        ``output_type``, a valid ``output`` is an instance of it."""
        result: RunResult[Any] = RunResult.model_validate(await asyncio.shield(self._future))
        if self.output_type is not None and result.output is not None:
            assert issubclass(self.output_type, BaseModel)
            result.output = self.output_type.model_validate(result.output)
        return result

    def __await__(self) -> Generator[Any, None, RunResult[OutputT]]:
        return self.result().__await__()

    def __aiter__(self) -> Run[OutputT]:
        return self

    async def __anext__(self) -> ProgressParams:
        if self._ended:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is not _END:
            assert isinstance(item, ProgressParams)
            return item
        self._ended = True
        error = self._future.exception()
        if error is not None:
            raise error
        raise StopAsyncIteration

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        ids = f"session={self.session_id} run={self.run_id} request={self.request_id}"
        return f"<Run {ids} {state}>"


class RunRouter:
    """Hands each ``kernel/progress`` notification to the :class:`Run` it belongs to."""

    def __init__(self) -> None:
        self._by_run_id: dict[str, Run[Any]] = {}
        self._waiting: dict[
            str, deque[Run[Any]]
        ] = {}  # session id -> runs before their run_started
        self.runs: set[Run[Any]] = set()  # every run whose response has not arrived

    def add(self, run: Run) -> None:
        """Follow ``run``: call before any notification sent after its request can be read."""
        self.runs.add(run)
        self._waiting.setdefault(run.session_id, deque()).append(run)
        run._future.add_done_callback(lambda _: self._finished(run))

    def notification(self, method: str, params: Any) -> bool:
        if method != "kernel/progress":
            return False
        try:
            progress = ProgressParams.model_validate(params)
        except ValidationError as exc:
            logger.error("a kernel/progress notification that does not parse: %s", exc)
            return True
        run = self._by_run_id.get(progress.run_id)
        if run is None and progress.event.kind == "run_started":
            run = self._next_waiting(progress.session_id)
            if run is not None:
                self._bind(run, progress.run_id)
        if run is None:
            logger.debug("progress of a run nobody follows: %s", progress.run_id)
        else:
            run._queue.put_nowait(progress)
        return True

    def _next_waiting(self, session_id: str) -> Run | None:
        waiting = self._waiting.get(session_id)
        while waiting:
            run = waiting.popleft()
            if not run._future.done():  # answered before its run_started: it never started
                return run
        return None

    def _bind(self, run: Run, run_id: str) -> None:
        run.run_id = run_id
        self._by_run_id[run_id] = run
        waiting = self._waiting.get(run.session_id)
        if waiting is not None:
            if run in waiting:
                waiting.remove(run)
            if not waiting:
                del self._waiting[run.session_id]

    def _finished(self, run: Run) -> None:
        """The response has arrived, after every event of the run (the server writes them first)."""
        self.runs.discard(run)
        waiting = self._waiting.get(run.session_id)
        if waiting is not None and run in waiting:
            waiting.remove(run)
        if run.run_id is not None:
            self._by_run_id.pop(run.run_id, None)
            error = None if run._future.cancelled() else run._future.exception()
            if isinstance(error, SessionBusyError) and not error.lease_lost:
                self._hand_on(run)
        run._queue.put_nowait(_END)

    def _hand_on(self, refused: Run) -> None:
        """``refused`` took the run_started of another run of its session: give that run on."""
        assert refused.run_id is not None
        successor = self._next_waiting(refused.session_id)
        if successor is None:
            return
        self._bind(successor, refused.run_id)
        refused.run_id = None
        while not refused._queue.empty():
            successor._queue.put_nowait(refused._queue.get_nowait())
