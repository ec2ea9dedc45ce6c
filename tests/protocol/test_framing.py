"""LSP base-protocol framing: the pure decoder and encoder, fed bytes as a pipe delivers them."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tether.protocol import framing
from tether.protocol.framing import Frame, FrameDecoder, FrameError, encode_frame

REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"session/get","params":{"sessionId":"s"}}'
OTHER = b'{"jsonrpc":"2.0","id":2,"method":"shutdown"}'


def feed_whole(decoder: FrameDecoder, data: bytes) -> list[Frame | FrameError]:
    return decoder.feed(data)


def feed_bytewise(decoder: FrameDecoder, data: bytes) -> list[Frame | FrameError]:
    return [item for i in range(len(data)) for item in decoder.feed(data[i : i + 1])]


def frames_of(items: list[Frame | FrameError]) -> list[bytes]:
    return [item.body for item in items if isinstance(item, Frame)]


def errors_of(items: list[Frame | FrameError]) -> list[FrameError]:
    return [item for item in items if isinstance(item, FrameError)]


feeders = pytest.mark.parametrize("feed", [feed_whole, feed_bytewise], ids=["whole", "bytewise"])


def test_encode_frame_prefixes_the_body_with_its_content_length_header() -> None:
    assert encode_frame(b"{}") == b"Content-Length: 2\r\n\r\n{}"


@feeders
def test_a_whole_frame_decodes_to_its_body(feed) -> None:
    assert feed(FrameDecoder(), encode_frame(REQUEST)) == [Frame(REQUEST)]


def test_a_frame_split_at_every_byte_boundary_decodes_once_complete() -> None:
    data = encode_frame(REQUEST)
    for cut in range(len(data) + 1):
        decoder = FrameDecoder()
        items = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert items == [Frame(REQUEST)], cut


def test_a_frame_fed_one_byte_at_a_time_yields_nothing_until_its_last_byte() -> None:
    data = encode_frame(REQUEST)
    decoder = FrameDecoder()
    for i in range(len(data) - 1):
        assert decoder.feed(data[i : i + 1]) == []
    assert decoder.feed(data[-1:]) == [Frame(REQUEST)]


@feeders
def test_many_frames_in_one_chunk_decode_in_order(feed) -> None:
    bodies = [b'{"id":%d}' % i for i in range(50)]
    items = feed(FrameDecoder(), b"".join(encode_frame(body) for body in bodies))
    assert items == [Frame(body) for body in bodies]


@feeders
@pytest.mark.parametrize("name", [b"content-length", b"CONTENT-LENGTH", b"Content-length"])
def test_the_content_length_header_name_is_case_insensitive(feed, name: bytes) -> None:
    data = name + b": %d\r\n\r\n%s" % (len(REQUEST), REQUEST)
    assert feed(FrameDecoder(), data) == [Frame(REQUEST)]


@feeders
@pytest.mark.parametrize("order", ["before", "after"])
def test_a_content_type_header_is_ignored(feed, order: str) -> None:
    length = b"Content-Length: %d" % len(REQUEST)
    content_type = b"Content-Type: application/vscode-jsonrpc; charset=utf-8"
    lines = [content_type, length] if order == "before" else [length, content_type]
    data = b"\r\n".join(lines) + b"\r\n\r\n" + REQUEST
    assert feed(FrameDecoder(), data) == [Frame(REQUEST)]


@feeders
def test_the_content_length_counts_utf8_bytes_not_characters(feed) -> None:
    body = json.dumps({"text": "héllo wörld — 日本語 🎉"}, ensure_ascii=False).encode()
    assert len(body) > len(body.decode())
    data = encode_frame(body) + encode_frame(OTHER)
    assert feed(FrameDecoder(), data) == [Frame(body), Frame(OTHER)]


@feeders
def test_a_header_block_without_content_length_is_reported_and_the_next_frame_decodes(feed) -> None:
    data = b"Content-Type: application/json\r\n\r\n" + encode_frame(REQUEST)
    items = feed(FrameDecoder(), data)
    assert isinstance(items[0], FrameError)
    assert frames_of(items) == [REQUEST]


@feeders
def test_a_body_sent_without_any_header_is_reported_and_the_next_frame_decodes(feed) -> None:
    data = OTHER + encode_frame(REQUEST)
    items = feed(FrameDecoder(), data)
    assert len(errors_of(items)) == 1
    assert frames_of(items) == [REQUEST]


@feeders
@pytest.mark.parametrize("value", [b"abc", b"-1", b"1e3", b"0x10", b"", b"12abc"])
def test_a_non_numeric_content_length_is_reported_and_the_next_frame_decodes(
    feed, value: bytes
) -> None:
    data = b"Content-Length: " + value + b"\r\n\r\n" + encode_frame(REQUEST)
    items = feed(FrameDecoder(), data)
    assert isinstance(items[0], FrameError)
    assert frames_of(items) == [REQUEST]


@feeders
def test_junk_before_a_header_is_reported_and_the_frame_after_it_decodes(feed) -> None:
    data = b"garbage that is not a header" + encode_frame(REQUEST) + encode_frame(OTHER)
    items = feed(FrameDecoder(), data)
    assert len(errors_of(items)) == 1
    assert frames_of(items) == [REQUEST, OTHER]


@feeders
def test_a_body_shorter_than_its_content_length_is_cut_at_the_next_header(feed) -> None:
    data = b"Content-Length: 500\r\n\r\n" + OTHER + encode_frame(REQUEST)
    assert frames_of(feed(FrameDecoder(), data)) == [OTHER, REQUEST]


def test_a_body_declared_a_few_bytes_too_long_still_lets_the_next_frame_decode() -> None:
    data = b"Content-Length: 3\r\n\r\n{}" + encode_frame(REQUEST)
    assert frames_of(FrameDecoder().feed(data)) == [b"{}", REQUEST]


@feeders
def test_a_body_over_max_body_is_reported_skipped_and_the_next_frame_decodes(feed) -> None:
    oversized = b'{"blob":"' + b"x" * 200 + b'"}'
    data = encode_frame(oversized) + encode_frame(REQUEST)
    items = feed(FrameDecoder(max_body=100), data)
    assert isinstance(items[0], FrameError)
    assert frames_of(items) == [REQUEST]


@feeders
@pytest.mark.parametrize(
    "length", [b"1001", b"2147483648", b"1099511627776", b"9" * 40, b"1" * 5000], ids=len
)
def test_a_content_length_over_the_limit_is_reported_and_the_stream_resyncs_at_the_next_header(
    feed, length: bytes
) -> None:
    body = b'{"blob":"' + b"x" * 200  # cut short by the next frame, and still over the limit
    data = b"Content-Length: " + length + b"\r\n\r\n" + body + encode_frame(REQUEST)
    items = feed(FrameDecoder(max_body=100), data)
    assert [(e.limit, e.value) for e in errors_of(items)] == [("maxFrameBytes", 100)]
    assert frames_of(items) == [REQUEST]


@feeders
def test_a_request_under_a_content_length_over_the_limit_is_handed_on_like_any_cut_body(
    feed,
) -> None:
    data = b"Content-Length: 5000000000\r\n\r\n" + OTHER + encode_frame(REQUEST)
    items = feed(FrameDecoder(max_body=100), data)
    assert len(errors_of(items)) == 1
    assert frames_of(items) == [OTHER, REQUEST]


def test_an_oversized_body_arriving_in_pieces_is_dropped_as_it_comes_and_never_buffered() -> None:
    decoder = FrameDecoder(max_body=1000)
    items = decoder.feed(b"Content-Length: 1000000\r\n\r\n")
    for _ in range(100):
        items += decoder.feed(b"x" * 10_000)
        assert decoder.buffered <= 1000 + 10_000
    items += decoder.feed(encode_frame(REQUEST))
    assert len(errors_of(items)) == 1
    assert frames_of(items) == [REQUEST]
    assert decoder.buffered == 0


def test_a_body_exactly_at_max_body_is_accepted() -> None:
    body = b'"' + b"x" * 98 + b'"'
    assert FrameDecoder(max_body=100).feed(encode_frame(body)) == [Frame(body)]


def test_a_header_block_that_never_ends_is_reported_and_the_stream_recovers() -> None:
    decoder = FrameDecoder()
    items = decoder.feed(b"X" * (70 * 1024)) + decoder.feed(b"\r\n\r\n" + encode_frame(REQUEST))
    assert isinstance(items[0], FrameError)
    assert frames_of(items) == [REQUEST]


# --- properties -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["Content-Length: 5", "content-length:1\r\n", "\r\n\r\n"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    value = draw(json_values)
    if draw(st.booleans()):
        # Pretty-printed with CR LF line breaks: raw CR LF between tokens is valid JSON.
        return json.dumps(value, indent=1, ensure_ascii=False).replace("\n", "\r\n").encode()
    return json.dumps(value, ensure_ascii=draw(st.booleans())).encode()


@settings(max_examples=300)
@given(bodies=st.lists(json_bodies(), max_size=8), data=st.data())
def test_any_json_bodies_in_any_chunking_decode_to_exactly_those_bodies(
    bodies: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(body) for body in bodies)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20), label="cuts"))
    decoder = FrameDecoder()
    items: list[Frame | FrameError] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        items += decoder.feed(stream[start:end])
    assert items == [Frame(body) for body in bodies]


_LENGTH_NAMES = [b"Content-Length: ", b"content-length:", b"CONTENT-LENGTH :"]
_HUGE_LENGTHS = [b"1001", b"4294967296", b"99999999999999999999999"]
_OTHER_HEADERISH = [
    b"Content-Type: application/json",
    b"\r\n",
    b"\r\n\r\n",
    b"\r",
    b"\n",
    b":",
    b" ",
    b"0",
    b"1",
    b"7",
    b"42",
    b"300",
    b"abc",
    b"{}",
]


def garbage(fragments: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.lists(st.binary(max_size=6) | st.sampled_from(fragments), max_size=30).map(b"".join)


MAX_BODY = 1000


def decodes_final_frame_after(junk: bytes, cuts: list[int] | None = None) -> bool:
    """Whether the frame after ``junk`` decodes, the stream fed in one chunk or cut at ``cuts``.

    A junk header whose declared body ends inside the next frame's header is held until that
    header has arrived, so how the bytes are chunked does not matter.
    """
    stream = junk + b"\r\n\r\n" + encode_frame(REQUEST)
    bounds = sorted({min(cut, len(stream)) for cut in cuts or []})
    decoder = FrameDecoder(max_body=MAX_BODY)
    items: list[Frame | FrameError] = []
    for start, end in zip([0, *bounds], [*bounds, len(stream)], strict=True):
        items += decoder.feed(stream[start:end])
    frames = frames_of(items)
    return bool(frames) and frames[-1] == REQUEST


@settings(max_examples=500)
@given(junk=garbage(_OTHER_HEADERISH))
def test_garbage_that_declares_no_content_length_never_prevents_the_next_frame(
    junk: bytes,
) -> None:
    assume(re.search(rb"content-length", junk, re.IGNORECASE) is None)
    assert decodes_final_frame_after(junk)


@settings(max_examples=500)
@given(junk=garbage(_LENGTH_NAMES + _HUGE_LENGTHS + _OTHER_HEADERISH))
@example(junk=b"Content-Length: 1")  # a declared body that ends inside the next header
@example(junk=b"Content-Length: 4294967296")  # a declared body far over the limit
def test_garbage_with_any_content_length_in_or_over_the_limit_never_prevents_the_next_frame(
    junk: bytes,
) -> None:
    assert decodes_final_frame_after(junk)


@settings(max_examples=500)
@given(
    junk=garbage(_LENGTH_NAMES + _HUGE_LENGTHS + _OTHER_HEADERISH),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
@example(junk=b"Content-Length: 12\r\n\r\n0123456789", cuts=[36])  # body ends in "Co"
def test_garbage_fed_in_any_chunks_never_prevents_the_next_frame(
    junk: bytes, cuts: list[int]
) -> None:
    assert decodes_final_frame_after(junk, cuts)


def test_a_valid_body_that_reaches_its_length_is_handed_on_without_waiting() -> None:
    for body in [b"true", b"false", b"null", b"12", b'"c"', b"[]", b"{} \r"]:
        assert FrameDecoder().feed(encode_frame(body)) == [Frame(body)]


def _may_start_by_search(buffer: bytes, end: int) -> bool:
    """``_header_may_start_before`` without its shortcut on the last byte: the search alone."""
    if len(buffer) - end >= framing._EMBEDDED_HEADER_MAX:
        return False
    match = framing._HEADER_PREFIX.search(buffer, max(0, end - framing._EMBEDDED_HEADER_MAX))
    return match is not None and match.start() < end


@pytest.mark.parametrize("header", [b"content-length: 123 \r", b"CONTENT-LENGTH\t:\t9\r"])
def test_the_last_byte_shortcut_agrees_with_the_search_for_every_byte(header: bytes) -> None:
    for cut in range(len(header) + 1):
        for last in range(256):
            buffer = b'{"a":1}' + header[:cut] + bytes([last])
            for end in (7, len(buffer) - 1, len(buffer)):
                assert framing._header_may_start_before(buffer, end) == _may_start_by_search(
                    buffer, end
                ), (buffer, end)
