"""The server-sent events reader."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tether.providers.sse import EventDecoder, ServerSentEvent, iter_events


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


BODY = (
    'data: {"a": "caf\u00e9 \u2028 \U0001f600"}\r\n\r\n'  # CRLF, a multi-byte character, U+2028
    ": keep-alive\n\n"
    "event: ping\ndata: one\ndata: two\n\n"
    "data: three\r\rdata:four\n\n\n"  # a CR alone ends a line too
    "event: named\n"
    "data: five\n\n"
    "data: cut off"
).encode()
EVENTS = [
    ServerSentEvent("message", '{"a": "caf\u00e9 \u2028 \U0001f600"}'),
    ServerSentEvent("ping", "one\ntwo"),
    ServerSentEvent("message", "three"),
    ServerSentEvent("message", "four"),
    ServerSentEvent("named", "five"),
]


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = EventDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)] + decoder.end()


def test_a_body_read_whole_gives_its_events_in_order() -> None:
    assert decode(BODY) == EVENTS


def test_a_body_cut_anywhere_gives_the_same_events() -> None:
    """Cut between the bytes of a character, between "\\r" and "\\n", inside a field name..."""
    for cut in range(len(BODY) + 1):
        assert decode(BODY[:cut], BODY[cut:]) == EVENTS, cut
    assert decode(*(BODY[i : i + 1] for i in range(len(BODY)))) == EVENTS


def test_only_cr_lf_and_crlf_end_lines() -> None:
    """Not the other line breaks of ``str.splitlines`` (which httpx's ``aiter_lines`` used)."""
    expected = ServerSentEvent("message", "a\x0bb\x1cc\x85d\u2028e")
    assert decode("data: a\x0bb\x1cc\x85d\u2028e\n\n".encode()) == [expected]


def test_a_crlf_cut_between_its_two_characters_ends_one_line() -> None:
    assert decode(b"data: x\r", b"\n\r", b"\n") == [ServerSentEvent("message", "x")]
    assert decode(b"data: x\r", b"\ndata: y\r\n\r\n") == [ServerSentEvent("message", "x\ny")]


def test_a_named_event_and_its_data_line_are_read_as_the_general_rules_say() -> None:
    body = (
        b"event: \ndata: unnamed\n\n"  # an empty name is the default
        b"event:  spaced\ndata: a\n\n"  # only one space is dropped
        b"event: a:b\ndata: c\n\n"
        b"event: first\n\nevent: second\ndata: d\n\n"  # the blank line forgets the first name
    )
    assert decode(body) == [
        ServerSentEvent("message", "unnamed"),
        ServerSentEvent(" spaced", "a"),
        ServerSentEvent("a:b", "c"),
        ServerSentEvent("second", "d"),
    ]
    for cut in range(len(body) + 1):
        assert decode(body[:cut], body[cut:]) == decode(body), cut


def test_a_body_that_ends_with_a_lone_cr_ends_its_last_line_there() -> None:
    decoder = EventDecoder()
    assert decoder.feed(b"data: a\r\rdata: b\r\r") == [ServerSentEvent("message", "a")]
    assert decoder.end() == [ServerSentEvent("message", "b")]
    assert decoder.end() == []
