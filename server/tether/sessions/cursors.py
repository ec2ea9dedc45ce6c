"""Opaque pagination cursors: a kind tag and a few strings, base64url-encoded.

The kind tag keeps a cursor from one method from being accepted by another.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from tether.protocol import InvalidParams


def encode_cursor(kind: str, *parts: str) -> str:
    raw = orjson.dumps([kind, *parts])
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(kind: str, cursor: str, arity: int) -> list[str]:
    """The parts of a cursor made by :func:`encode_cursor` with the same kind, or InvalidParams."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        value = None
    if (
        not isinstance(value, list)
        or len(value) != arity + 1
        or value[0] != kind
        or not all(isinstance(part, str) for part in value)
    ):
        raise InvalidParams.field("cursor", "not a cursor this method returned")
    return value[1:]
