"""Server-sent events, as model endpoints stream them (the WHATWG ``text/event-stream`` rules).

An event is dispatched at the blank line that ends it. An event the stream stops in the middle of
is dropped, as the standard says: a provider notices the missing end of its turn and reports it.

:class:`EventDecoder` takes the body as it arrives, a chunk at a time, and gives the events each
chunk completes: a provider reads everything one network read brought in one go (a fast endpoint
sends a whole answer in a read or two), instead of one line and one event per step.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable
from typing import NamedTuple


class ServerSentEvent(NamedTuple):  # a tuple: made several times faster than a frozen dataclass
    event: str  # "message" when the stream names none
    data: str  # the ``data:`` lines of the event, joined with newlines


_new_tuple = tuple.__new__  # makes an event without NamedTuple's Python-level ``__new__``


def _event(event: str, data: str) -> ServerSentEvent:
    return _new_tuple(ServerSentEvent, (event, data))


class EventDecoder:
    """The events of a ``text/event-stream`` body fed in pieces of any size.

    Lines end at ``\\r\\n``, ``\\n`` or ``\\r`` (only those, as the standard says: a U+2028 inside
    a JSON string stays in its line); a ``\\r`` at the end of a piece waits for the next one, which
    may start with the ``\\n`` of the same line end. Bytes are decoded as UTF-8, a character split
    between two pieces included; invalid bytes become U+FFFD.
    """

    __slots__ = ("_cr", "_data", "_event", "_pending", "_utf8")

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[str] = []  # the start of a line not yet ended
        self._cr = False  # the last piece ended with "\r"
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` (the next bytes of the body) completes, in order."""
        return self.feed_text(self._utf8.decode(chunk))

    def end(self) -> list[ServerSentEvent]:
        """The events the end of the body completes: a lone CR it ended with ends a line (its
        last, blank one, when the stream uses CR alone)."""
        if not self._cr:
            return []
        self._cr = False
        return self.feed_text("\n")

    def feed_text(self, text: str) -> list[ServerSentEvent]:
        """The events that ``text`` (the next characters of the body) completes, in order."""
        if self._cr:
            text = "\r" + text
            self._cr = False
        if text.endswith("\r"):
            self._cr = True
            text = text[:-1]
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text:
            if text:
                self._pending.append(text)
            return []
        if self._pending:
            self._pending.append(text)
            text = "".join(self._pending)
            self._pending = []
        end = text.rfind("\n") + 1
        if end < len(text):
            self._pending.append(text[end:])
        return self._whole_lines(text[:end])

    def _whole_lines(self, text: str) -> list[ServerSentEvent]:
        """The events of ``text``, lines that each end with a newline. It is cut at the blank
        lines: the usual events, one ``data:`` line with or without an ``event:`` line before it,
        are taken whole."""
        events: list[ServerSentEvent] = []
        blocks = text.split("\n\n")  # each but the last ends with a line and a blank line
        last = blocks.pop()
        for block in blocks:
            if block.startswith("data: ") and "\n" not in block and not self._data:
                if self._event:
                    events.append(_event(self._event, block[6:]))
                    self._event = ""
                else:
                    events.append(_event("message", block[6:]))
            elif (  # a named one-line event (Anthropic's)
                block.startswith("event: ")
                and block.count("\n") == 1
                and not self._data
                and block.find("\ndata: ") > 7
            ):
                name, data = block.split("\ndata: ")
                events.append(_event(name[7:], data))
                self._event = ""
            else:
                lines = block.split("\n")
                lines.append("")
                self._lines(lines, events)
        if last:  # lines, the last ending with the newline
            self._lines(last[:-1].split("\n"), events)
        return events

    def _lines(self, lines: list[str], events: list[ServerSentEvent]) -> None:
        event, data = self._event, self._data
        for line in lines:
            if line.startswith("data: "):
                data.append(line[6:])
            elif not line:
                if data:
                    text = data[0] if len(data) == 1 else "\n".join(data)
                    events.append(ServerSentEvent(event or "message", text))
                    data = []
                event = ""
            elif line[0] != ":":  # a ":" starts a comment, often a keep-alive
                name, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if name == "data":
                    data.append(value)
                elif name == "event":
                    event = value
                # ``id`` and ``retry`` only matter to reconnecting browsers; others are ignored.
        self._event, self._data = event, data


async def iter_events(lines: AsyncIterable[str]) -> AsyncGenerator[ServerSentEvent, None]:
    """The complete events in ``lines`` (text lines without their line endings)."""
    decoder = EventDecoder()
    async for line in lines:
        for event in decoder.feed_text(line + "\n"):
            yield event
