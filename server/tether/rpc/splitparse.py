"""Parsing a big frame whose bulk is one array of objects (``"messages":[...]``) in pieces.

``orjson.loads`` holds a copy of its whole input, and an index of its values, while it builds the
Python objects: a 38 MB ``session/append`` peaks at the frame, that copy and the objects (~3.9x the
frame). Parsed a ~1 MB piece of the array at a time, the peak is the frame and the objects.

The result is what ``orjson.loads`` of the whole body gives, or the body is parsed whole:

- ``"messages":[`` can only occur in valid JSON as a key whose value is an array (the quote after
  ``messages`` is not escaped, so it ends a string, and ``:`` only follows a key);
- a piece ends at a ``},{`` (or, the last one, at ``}]``) and is parsed as ``[piece]``: it parses
  only if it is whole values from where the array's elements start (a cut inside a string or a
  nested array leaves it open), so each piece starts where an element starts;
- the body with the array's elements replaced by a random token must parse, with the token alone
  at ``params.messages``: the pieces were that array's elements, and the rest is valid.

Anything else (whitespace between the elements, a cut that fails more than a few times) falls back
to parsing the body whole, which also gives the same errors for invalid JSON.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

SPLIT_FROM = 8 * 1024 * 1024
"""Bodies from this size are parsed in pieces when they can be."""

PIECE = 1024 * 1024
_KEY = b'"messages":['
_TRIES = 8


def loads(body: bytes | bytearray) -> Any:
    """``orjson.loads(body)``, in pieces for a big body with a ``messages`` array."""
    if len(body) >= SPLIT_FROM:
        with memoryview(body) as view:
            parsed = _loads_split(body, view)
        if parsed is not None:
            return parsed
    return orjson.loads(body)


def _loads_split(body: bytes | bytearray, view: memoryview) -> Any:
    """The parsed body, or None when it cannot be parsed in pieces."""
    key = body.find(_KEY)
    if key < 0:
        return None
    first = begin = key + len(_KEY)
    items: list[Any] = []
    tries = _TRIES
    search, close_from = begin + PIECE, begin
    while True:
        cut = body.find(b"},{", search)
        closing = cut < 0
        if closing:
            cut = body.find(b"}]", close_from)
            if cut < 0 or cut - begin > 2 * PIECE:
                return None
        try:
            items += orjson.loads(b"".join((b"[", view[begin : cut + 1], b"]")))
        except orjson.JSONDecodeError:
            tries -= 1
            if not tries:
                return None
            search = close_from = cut + 1
            continue
        if closing:
            break
        begin = close_from = cut + 2
        search = begin + PIECE
    token = f"tether-split-{uuid.uuid4().hex}"
    try:
        skeleton = orjson.loads(b"".join((view[:first], orjson.dumps(token), view[cut + 1 :])))
    except orjson.JSONDecodeError:
        return None
    params = skeleton.get("params") if isinstance(skeleton, dict) else None
    if not isinstance(params, dict) or params.get("messages") != [token]:
        return None
    params["messages"] = items
    return skeleton
