"""Server-sent events, as model endpoints stream them (the WHATWG ``text/event-stream`` rules).

An event is dispatched at the blank line that ends it. An event the stream stops in the middle of
is dropped, as the standard says: a provider notices the missing end of its turn and reports it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str  # "message" when the stream names none
    data: str  # the ``data:`` lines of the event, joined with newlines


async def iter_events(lines: AsyncIterable[str]) -> AsyncGenerator[ServerSentEvent, None]:
    """The complete events in ``lines`` (text lines without their line endings)."""
    event = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):  # a comment, often a keep-alive
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        # ``id`` and ``retry`` only matter to reconnecting browsers; unknown fields are ignored.
