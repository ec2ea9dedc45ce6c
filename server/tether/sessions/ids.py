"""UUIDv7 ids (time-ordered, RFC 9562) and UTC timestamps.

Ids must be unique and sort in creation order; they are not secrets, so the random bits come from
``random`` (seeded from the OS at start) rather than a system call per id.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

_last_ms = 0
_counter = 0


def uuid7() -> str:
    """A UUIDv7 string; ids made in one process sort in creation order, even in one millisecond."""
    global _last_ms, _counter
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        _last_ms, _counter = ms, random.getrandbits(10)
    else:
        ms = _last_ms
        _counter += 1
        if _counter > 0xFFF:  # the 12-bit sequence ran out: borrow the next millisecond
            _last_ms = ms = ms + 1
            _counter = 0
    value = (
        (ms & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76
        | _counter << 64
        | 0b10 << 62
        | random.getrandbits(62)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def utcnow() -> datetime:
    return datetime.now(UTC)
