"""The id of a request nested too deep to be decoded, so that it can still be answered.

orjson, which decodes every message of both faces, refuses JSON nested deeper than
:data:`MAX_REQUEST_DEPTH` levels of objects and arrays. Such a body would be answered ``-32700``
with ``id: null``, and the client that sent it with an id would wait for its answer forever.
When orjson refuses a body, :func:`deep_request_id` reads its top-level members without decoding
their nested values: the keys, and the scalar values of ``jsonrpc``, ``id`` and ``method``; an
object or array value is skipped by the depth of its brackets, strings (and their escapes) being
jumped over whole. The id is given only for a JSON-RPC 2.0 request object that nests deeper than
the limit; anything else (a body that is not an object, broken where the scan looks, a
notification) gets None and is answered as before.

The scan makes few steps per bracket: a run of opening brackets, strings and scalars is one
regular-expression match, a run of closing brackets another. A body that needs more than
:data:`_MAX_STEPS` of them (millions of small arrays one after another) is given up on.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from tether.protocol.limits import MAX_REQUEST_DEPTH

_MAX_STEPS = 1_000_000
_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[-+.0-9A-Za-z]+")
# Inside a nested value: all up to the next closing bracket outside a string (opening ones
# included); then the run of closing brackets there.
_DOWN = re.compile(rb'[^"\]}]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"\]}]*)*', re.DOTALL)
_UP = re.compile(rb"[\]}][\]} \t\r\n]*")
_CHUNK = 64 * 1024
_MEMBERS = frozenset({"jsonrpc", "id", "method"})


DEEP_REQUEST = f"request nested deeper than {MAX_REQUEST_DEPTH} levels of objects and arrays"
"""The message of the ``InvalidRequest`` error such a request is answered with; its ``data``:
:data:`DEEP_REQUEST_DATA`."""
DEEP_REQUEST_DATA = {"limit": "maxRequestDepth", "value": MAX_REQUEST_DEPTH}


class _GaveUp(Exception):
    """The body is not what the scan reads (or too costly to read)."""


def deep_request_id(body: bytes | bytearray) -> str | int | None:
    """The id of the request ``body`` is, when it is a JSON-RPC 2.0 request object nested deeper
    than :data:`MAX_REQUEST_DEPTH` (its object counted); else None. For a body orjson refused."""
    scan = _Scan(body)
    try:
        members, deepest = scan.top_level()
    except _GaveUp:
        return None
    request_id = members.get("id")
    if (
        deepest + 1 <= MAX_REQUEST_DEPTH
        or members.get("jsonrpc") != "2.0"
        or not isinstance(members.get("method"), str)
        or not isinstance(request_id, str | int)
        or isinstance(request_id, bool)
    ):
        return None
    return request_id


class _Scan:
    def __init__(self, body: bytes | bytearray) -> None:
        self.body = body
        self.steps = _MAX_STEPS

    def top_level(self) -> tuple[dict[str, Any], int]:
        """The values of the members named in ``_MEMBERS`` (the last one of a name counts, as
        in orjson), and how deep the deepest member value nests."""
        body = self.body
        position = self.space(0)
        if body[position : position + 1] != b"{":
            raise _GaveUp
        position = self.space(position + 1)
        members: dict[str, Any] = {}
        deepest = 0
        if body[position : position + 1] == b"}":
            return members, deepest
        while True:
            key, position = self.scalar(position, _STRING)
            position = self.space(position)
            if body[position : position + 1] != b":":
                raise _GaveUp
            value, position, depth = self.value(self.space(position + 1))
            deepest = max(deepest, depth)
            if key in _MEMBERS:
                members[key] = value
            position = self.space(position)
            separator = body[position : position + 1]
            position = self.space(position + 1)
            if separator == b"}":
                if position != len(body):
                    raise _GaveUp
                return members, deepest
            if separator != b",":
                raise _GaveUp

    def value(self, position: int) -> tuple[Any, int, int]:
        """The member value at ``position``: its decoded value (None for an object or an
        array), where it ends, how deep it nests."""
        first = self.body[position : position + 1]
        if first in (b"[", b"{"):
            end, depth = self.skip_nested(position)
            return None, end, depth
        value, end = self.scalar(position, _STRING if first == b'"' else _SCALAR)
        return value, end, 0

    def scalar(self, position: int, pattern: re.Pattern[bytes]) -> tuple[Any, int]:
        """The string, number or literal at ``position``, decoded, and where it ends."""
        token = pattern.match(self.body, position)
        if token is None:
            raise _GaveUp
        try:
            return orjson.loads(token[0]), token.end()
        except orjson.JSONDecodeError:
            raise _GaveUp from None

    def skip_nested(self, position: int) -> tuple[int, int]:
        """Where the object or array at ``position`` ends, and how many levels it nests."""
        body = self.body
        depth = deepest = 0
        while self.steps > 0:
            self.steps -= 1
            down = _DOWN.match(body, position)
            assert down is not None  # it matches the empty string
            depth += _opening_brackets(down[0])
            deepest = max(deepest, depth)
            up = _UP.match(body, down.end())
            if up is None:
                raise _GaveUp  # the body ends inside the value
            closing = up[0].count(b"]") + up[0].count(b"}")
            if closing < depth:
                depth -= closing
                position = up.end()
                continue
            return up.start() + _closing_end(up[0], depth), deepest
        raise _GaveUp

    def space(self, position: int) -> int:
        match = _WS.match(self.body, position)
        assert match is not None
        return match.end()


def _opening_brackets(run: bytes | bytearray) -> int:
    """Opening brackets in ``run``, outside its strings."""
    count = run.count(b"[") + run.count(b"{")
    if count and b'"' in run:
        strings = b"".join(_STRING.findall(run))
        count -= strings.count(b"[") + strings.count(b"{")
    return count


def _closing_end(run: bytes | bytearray, count: int) -> int:
    """Where the ``count``-th closing bracket of ``run`` (closing brackets and white space)
    ends: counted a chunk at a time, then a byte at a time in the chunk where it is."""
    if len(run) == count or not run.strip(b"]}"):  # no white space (the usual case)
        return count
    for start in range(0, len(run), _CHUNK):
        chunk = run[start : start + _CHUNK]
        closing = chunk.count(b"]") + chunk.count(b"}")
        if closing < count:
            count -= closing
            continue
        for offset, byte in enumerate(chunk):
            if byte in b"]}":
                count -= 1
                if not count:
                    return start + offset + 1
    raise _GaveUp
