"""The server-sent events reader."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tether.providers.sse import ServerSentEvent, iter_events


async def lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


async def read(*items: str) -> list[ServerSentEvent]:
    return [event async for event in iter_events(lines(*items))]


async def test_an_event_ends_at_a_blank_line_and_keeps_its_name() -> None:
    events = await read("event: ping", "data: {}", "", "data: two", "")
    assert events == [ServerSentEvent("ping", "{}"), ServerSentEvent("message", "two")]


async def test_data_lines_of_one_event_are_joined_with_newlines() -> None:
    assert await read("data: a", "data:b", "data:  c", "") == [
        ServerSentEvent("message", "a\nb\n c")
    ]


async def test_comments_unknown_fields_and_empty_events_are_skipped() -> None:
    events = await read(": keep-alive", "", "id: 7", "retry: 100", "", "data: x", "")
    assert events == [ServerSentEvent("message", "x")]


async def test_an_event_cut_off_by_the_end_of_the_stream_is_dropped() -> None:
    assert await read("data: whole", "", 'data: {"half') == [ServerSentEvent("message", "whole")]
