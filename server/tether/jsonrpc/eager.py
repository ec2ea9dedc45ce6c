"""Coroutines started eagerly, as Python 3.12's eager tasks do.

A handler that never waits (most session methods) finishes on its first step: wrapping it in a
task would cost three trips around the event loop before its answer goes out. Here it runs at
once, and only one that suspends becomes a task (and so can be cancelled).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any


class Finished:
    """A coroutine that finished on its first step: its result, or the exception it raised."""

    __slots__ = ("exception", "result")

    def __init__(self, result: Any, exception: Exception | None) -> None:
        self.result, self.exception = result, exception


def start(coroutine: Coroutine[Any, Any, Any]) -> Finished | asyncio.Future[Any]:
    """Run ``coroutine`` up to its first suspension: what it finished with, or a task that runs
    the rest of it."""
    try:
        waiting_on = coroutine.send(None)
    except StopIteration as finished:
        return Finished(finished.value, None)
    except Exception as exc:
        return Finished(None, exc)
    return asyncio.ensure_future(Resume(coroutine, waiting_on))


class Resume:
    """The rest of a coroutine that was started eagerly and is suspended on ``waiting_on``.

    Awaited by a task, it passes each awaited future up to the task, and the task's wake-ups and
    cancellations back down, exactly as if the task had run the coroutine from the start.
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
