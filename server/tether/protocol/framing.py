"""LSP base-protocol framing: ``Content-Length: N\\r\\n\\r\\n`` + N bytes of JSON.

The decoder is pure (bytes in, frames out) so it can be tested and fuzzed without a process. It is
strict about what a frame is and forgiving about what surrounds it, so a bad frame never desyncs the
frames after it:

- header names are case-insensitive, unknown headers (``Content-Type``) are ignored;
- a header block without a usable ``Content-Length`` is reported and skipped;
- junk before a header (a body sent without its header, say) is reported and skipped;
- a body shorter than its ``Content-Length`` is cut where the next frame's header shows up inside
  it. That is unambiguous: a raw CR LF after ``Content-Length: N`` cannot occur in valid JSON,
  whose strings escape control characters. The cut body is handed on as it is, so a request in it
  still gets its response (or a parse error);
- a ``Content-Length`` over the size limit is reported at once; its body is then read like any
  other, cut at the next header as above, except that what goes past the limit is discarded as
  it arrives (at most the limit is ever buffered). A lie about the length, in or over the limit,
  resynchronizes the stream the same way, at the next header.

A body is handed on as the buffer it was read into (no copy): a 200 MB frame costs 200 MB here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
_MAX_LENGTH_DIGITS = 18  # longer numbers are over any limit (and int() refuses > 4300 digits)

_HEADER_END = b"\r\n\r\n"
_TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_CANONICAL_HEADER = re.compile(rb"Content-Length: (\d{1,9})\r\n\r\n")
_LENGTH_LINE = re.compile(rb"content-length[ \t]*:[ \t]*(\S*)[ \t]*$", re.IGNORECASE)
# A Content-Length header line, wherever it starts: the mark of a frame boundary inside a body.
_EMBEDDED_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*\d+[ \t]*\r\n", re.IGNORECASE)
_EMBEDDED_HEADER_MAX = 64  # the longest such match we need to see across two chunks
# The start of such a line, cut off by the end of the bytes received so far: any prefix of
# ``content-length: 123\r``, nested as ``c(?:o(?:n(?:...)?)?)?``.
_HEADER_PREFIX = re.compile(
    b"".join(b"(?:" + re.escape(bytes([c])) for c in b"content-length")[3:]
    + rb"(?:[ \t]*(?::[ \t]*\d*[ \t]*\r?)?)?"
    + b")?" * (len(b"content-length") - 1)
    + rb"\Z",
    re.IGNORECASE,
)

_PREFIX_ENDS = frozenset(b"content-lengthCONTENT-LENGTH \t:0123456789\r")
"""The bytes a match of ``_HEADER_PREFIX`` can end in (it is never empty)."""


@dataclass(slots=True)
class Frame:
    """One frame's body. Not a frozen dataclass: its ``__init__`` (through ``object.__setattr__``)
    costs twice as much, which a batch of pipelined requests pays per frame."""

    body: bytes | bytearray


@dataclass(frozen=True, slots=True)
class FrameError:
    reason: str
    limit: str | None = None  # the size limit that was exceeded, when that is the fault
    value: int | None = None  # and its value


def encode_frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


class FrameDecoder:
    """Turns a byte stream into frames and framing errors, in order."""

    def __init__(self, max_body: int = MAX_BODY_BYTES) -> None:
        self._buffer = bytearray()
        self._length: int | None = None  # what is left of the body once its header is read
        self._scanned = 0  # how far into the pending body we looked for an embedded header
        self._cut = False  # bytes of the pending body were discarded (its length is over the limit)
        self.max_body = max_body

    @property
    def buffered(self) -> int:
        """Bytes held, waiting for the rest of their frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame | FrameError]:
        out: list[Frame | FrameError] = []
        if not self._buffer and self._length is None:
            data = data[_take_canonical_frames(data, self.max_body, out) :]
        if data:
            self._buffer += data
            while self._step(out):
                pass
        return out

    def _step(self, out: list[Frame | FrameError]) -> bool:
        """Decode one item into ``out``; False when more bytes are needed."""
        if self._length is None:
            return self._read_header(out)
        return self._read_body(out)

    def _read_header(self, out: list[Frame | FrameError]) -> bool:
        taken = _take_canonical_frames(self._buffer, self.max_body, out)
        if taken:  # the frames that follow a body split across reads, in one go
            del self._buffer[:taken]  # cheap: bytearray drops a prefix without moving the rest
            return True
        canonical = _CANONICAL_HEADER.match(self._buffer)
        if canonical is not None:
            length: int | None = int(canonical[1])
            del self._buffer[: canonical.end()]
        else:
            end = self._buffer.find(_HEADER_END)
            if end < 0:
                if len(self._buffer) > MAX_HEADER_BYTES:
                    out.append(
                        FrameError("header too long; skipped", "maxHeaderBytes", MAX_HEADER_BYTES)
                    )
                    del self._buffer[: -len(_HEADER_END)]
                return False
            block = bytes(self._buffer[:end])
            del self._buffer[: end + len(_HEADER_END)]
            length, problem = _parse_header_block(block)
            if problem:
                out.append(FrameError(problem))
        if length is None:
            return True
        if length > self.max_body:
            shown = f"{length}" if length < 10**_MAX_LENGTH_DIGITS else "a huge number of"
            reason = f"Content-Length of {shown} bytes is over the {self.max_body}-byte limit"
            out.append(FrameError(reason, "maxFrameBytes", self.max_body))
        self._length, self._scanned, self._cut = length, 0, False
        return True

    def _read_body(self, out: list[Frame | FrameError]) -> bool:
        """The same for every body: it ends at its length or where the next header starts."""
        assert self._length is not None
        window = min(len(self._buffer), self._length)
        scan_from = max(0, self._scanned - _EMBEDDED_HEADER_MAX)
        end = _find_embedded_header(self._buffer, scan_from, window)
        if end < 0 and len(self._buffer) >= self._length:
            if _header_may_start_before(self._buffer, self._length):
                return False  # a header line may be arriving: wait to see if it cuts the body
            end = self._length
        if end >= 0:
            self._hand_on(end, out)
            return True
        self._scanned = window
        if window > self.max_body:  # only a length over the limit gets here: drop, keep a tail
            dropped = window - _EMBEDDED_HEADER_MAX
            del self._buffer[:dropped]
            self._length -= dropped
            self._scanned -= dropped
            self._cut = True
        return False

    def _hand_on(self, end: int, out: list[Frame | FrameError]) -> None:
        """The body is the first ``end`` bytes: hand it on, unless it is over the limit."""
        if self._cut or end > self.max_body:
            del self._buffer[:end]
        elif end >= len(self._buffer) - end:  # a big body: copy what follows it, not the body
            rest = self._buffer[end:]
            del self._buffer[end:]
            out.append(Frame(self._buffer))
            self._buffer = rest
        else:
            out.append(Frame(bytes(memoryview(self._buffer)[:end])))
            del self._buffer[:end]
        self._length = None


def _take_canonical_frames(
    data: bytes | bytearray, max_body: int, out: list[Frame | FrameError]
) -> int:
    """The fast path: whole frames with the one header every client sends, straight from ``data``
    (what was read, or the buffer once a frame split across reads is complete).

    Returns how far it got; anything else (other headers, a partial frame, a body with a raw CR LF
    that needs checking) is left to the general decoder.
    """
    position = 0
    while match := _CANONICAL_HEADER.match(data, position):
        start, length = match.end(), int(match[1])
        end = start + length
        if (
            length > max_body or end > len(data) or data.find(b"\r", start, end) >= 0
        ):  # one byte: memchr-fast
            break
        if end < len(data) and not data.startswith(b"Content-Length: ", end):
            break  # what follows is no clean header: maybe this body is cut short
        if end == len(data) and _header_may_start_before(data, end):
            break
        out.append(Frame(data[start:end]))
        position = end
    return position


def _header_may_start_before(buffer: bytes | bytearray, end: int) -> bool:
    """Whether ``buffer`` ends in the first bytes of a header line that starts before ``end``.

    A body that reaches its length so may yet be cut by that header, once the rest of its line
    arrives. Valid JSON never ends that way (it ends in ``}``, ``]``, ``"``, a digit, a letter of
    ``true``, ``false`` or ``null``, or white space), so no valid frame ever waits for this.
    """
    if len(buffer) - end >= _EMBEDDED_HEADER_MAX or not buffer or buffer[-1] not in _PREFIX_ENDS:
        return False  # (the last two: no such prefix ends in this byte; the search is ~1 µs)
    match = _HEADER_PREFIX.search(buffer, max(0, end - _EMBEDDED_HEADER_MAX))
    return match is not None and match.start() < end


def _find_embedded_header(buffer: bytearray, start: int, end: int) -> int:
    """Where a header line starting before ``end`` begins, or -1."""
    stop = min(len(buffer), end + _EMBEDDED_HEADER_MAX)
    if buffer.find(b"\r", start, stop) < 0:  # the cheap test first (a one-byte find is memchr)
        return -1
    match = _EMBEDDED_HEADER.search(buffer, start, stop)
    if match is None or match.start() >= end:
        return -1
    return match.start()


def _parse_header_block(block: bytes) -> tuple[int | None, str | None]:
    """The Content-Length of a header block, and what was wrong with it, if anything.

    The last Content-Length line counts: lines before it are junk that ran into the header (a
    cut frame's ``Content-Length: {`` followed by the next frame's header, say).
    """
    value: bytes | None = None
    problem: str | None = None
    for line in block.split(b"\r\n"):
        match = _LENGTH_LINE.search(line)
        if match is not None:
            if match.start() > 0 or value is not None:
                problem = "junk before a header; skipped"  # e.g. a body sent without its header
            value = match[1]
            continue
        name, colon, _ = line.partition(b":")
        if not colon or not _TOKEN.match(name.strip()):
            problem = "malformed header line; skipped"
    if value is None:
        return None, problem or "header without Content-Length; skipped"
    if not value.isdigit():
        return None, f"invalid Content-Length {value[:32]!r}"
    digits = value.lstrip(b"0") or b"0"
    return 10**_MAX_LENGTH_DIGITS if len(digits) > _MAX_LENGTH_DIGITS else int(digits), problem
