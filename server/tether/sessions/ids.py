"""UUIDv7 ids (time-ordered, RFC 9562) and UTC timestamps."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

_last_ms = 0
_counter = 0


def uuid7() -> str:
    """A UUIDv7 string; ids made in one process sort in creation order, even in one millisecond."""
    global _last_ms, _counter
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        _last_ms, _counter = ms, int.from_bytes(os.urandom(2), "big") & 0x3FF
    else:
        ms = _last_ms
        _counter += 1
        if _counter > 0xFFF:  # the 12-bit sequence ran out: borrow the next millisecond
            _last_ms = ms = ms + 1
            _counter = 0
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | _counter << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


def utcnow() -> datetime:
    return datetime.now(UTC)
