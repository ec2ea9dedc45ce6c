"""A big body parsed in pieces gives what parsing it whole gives, or is parsed whole."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from tether.rpc import splitparse


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(splitparse, "SPLIT_FROM", 0)
    monkeypatch.setattr(splitparse, "PIECE", 1000)


def parsed(body: bytes) -> Any:
    try:
        return splitparse.loads(body)
    except orjson.JSONDecodeError:
        return "invalid"


def whole(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return "invalid"


def request(params: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/append", "params": params})


TRICKY = [
    {"role": "user", "content": 'x"},{"role":"user","content":"y'},
    {"role": "user", "content": [{"type": "text", "text": "}]"}, {"type": "text", "text": "},{"}]},
    {"role": "user", "content": "\\\\"},
    {"role": "user", "content": '"messages":['},
] * 40


def test_a_big_append_is_parsed_in_pieces_into_the_same_request():
    body = request(
        {"sessionId": "s", "messages": [{"role": "user", "content": "m" * n} for n in range(300)]}
    )
    with memoryview(body) as view:
        assert splitparse._loads_split(body, view) == orjson.loads(body)


@pytest.mark.parametrize(
    "params",
    [
        {"sessionId": "s", "messages": TRICKY},
        {"messages": TRICKY, "sessionId": "s"},
        {"x": {"messages": [{"a": 1}, {"b": 2}] * 300}, "messages": TRICKY},
        {"messages": [], "text": "},{" * 1000},
        {"messages": [{}] * 1000},
    ],
)
def test_bodies_cut_inside_strings_or_nested_arrays_or_broken_parse_as_they_would_whole(
    params: dict[str, Any],
):
    body = request(params)
    assert parsed(body) == whole(body)
    rng = random.Random(20261123)
    for _ in range(200):
        broken = bytearray(body)
        broken[rng.randrange(len(broken))] = rng.choice(b'{}[],"\\: a')
        assert parsed(bytes(broken)) == whole(bytes(broken))
        cut = body[: rng.randrange(len(body))]
        assert parsed(cut) == whole(cut)
