"""The id of a request too deep to decode: found in every shape JSON allows, and only for a
JSON-RPC 2.0 request that is too deep. Through the real servers: ``tests/e2e/test_wire.py``,
``tests/acp/test_wire.py`` and the wire fuzzer."""

from __future__ import annotations

import orjson
import pytest

from tether.protocol.deep_requests import deep_request_id
from tether.protocol.limits import MAX_REQUEST_DEPTH

HEAD = b'"jsonrpc":"2.0","id":7,"method":"session/get"'


def body(value: bytes, *, head: bytes = HEAD, head_first: bool = True) -> bytes:
    params = b'"params":{"x":' + value + b"}"
    return b"{" + (head + b"," + params if head_first else params + b"," + head) + b"}"


def arrays(levels: int, inside: bytes = b"", space: bytes = b"") -> bytes:
    return (b"[" + space) * levels + inside + (space + b"]") * levels


TOO_DEEP = arrays(MAX_REQUEST_DEPTH)  # with its object and params: 2 levels over the limit


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(TOO_DEEP, id="arrays"),
        pytest.param(arrays(100_000), id="very-deep"),
        pytest.param(b'{"a":' * 1100 + b"1" + b"}" * 1100, id="objects"),
        pytest.param(arrays(1100, space=b" \n\t\r"), id="white-space"),
        pytest.param(
            arrays(1100, b'"]]]}}\\"[{", 1, {"]": [2, "\\\\"]}'), id="brackets-in-strings"
        ),
        pytest.param(b"[1, [2, {}], " + TOO_DEEP + b', "x", [[3]]]', id="beside-others"),
    ],
)
@pytest.mark.parametrize("head_first", [True, False], ids=["id-first", "id-last"])
def test_the_id_of_a_request_too_deep_is_found(value: bytes, head_first: bool) -> None:
    request = body(value, head_first=head_first)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(request)
    assert deep_request_id(request) == 7
    assert deep_request_id(bytearray(request)) == 7  # a big frame's body, as the decoder gives it


def test_the_limit_is_the_decoders() -> None:
    deepest = body(arrays(MAX_REQUEST_DEPTH - 2))
    orjson.loads(deepest)
    assert deep_request_id(deepest) is None
    assert deep_request_id(body(arrays(MAX_REQUEST_DEPTH - 1))) == 7


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b'"jsonrpc":"2.0","id":"a-b","method":"m"', id="string-id"),
        pytest.param(b'"jsonrpc" : "2.0" , "\\u0069d" : "a-b" , "method" : "m"', id="escaped-key"),
        pytest.param(b'"jsonrpc":"2.0","id":1,"method":"m","id":"a-b"', id="the-last-id"),
    ],
)
def test_the_id_is_read_as_json_reads_it(head: bytes) -> None:
    assert deep_request_id(body(TOO_DEEP, head=head)) == "a-b"


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(body(TOO_DEEP, head=b'"jsonrpc":"2.0","method":"m"'), id="notification"),
        pytest.param(body(TOO_DEEP, head=b'"id":7,"method":"m"'), id="not-2.0"),
        pytest.param(body(TOO_DEEP, head=b'"jsonrpc":"2.0","id":7'), id="no-method"),
        pytest.param(body(TOO_DEEP, head=b'"jsonrpc":"2.0","id":true,"method":"m"'), id="bool-id"),
        pytest.param(body(TOO_DEEP, head=b'"jsonrpc":"2.0","id":1.5,"method":"m"'), id="float-id"),
        pytest.param(body(TOO_DEEP, head=b'"jsonrpc":"2.0","id":[7],"method":"m"'), id="list-id"),
        pytest.param(body(TOO_DEEP)[:-3], id="cut-short"),
        pytest.param(body(TOO_DEEP + b"]"), id="a-bracket-too-many"),
        pytest.param(body(TOO_DEEP) + b"{}", id="more-after-it"),
        pytest.param(b"[" + body(TOO_DEEP) + b"]", id="a-batch"),
        pytest.param(body(b'[1, 2}, "x"'), id="not-deep-but-broken"),
        pytest.param(body(b'"unterminated'), id="an-open-string"),
        pytest.param(b"{}", id="empty"),
        pytest.param(b"", id="nothing"),
    ],
)
def test_anything_but_a_request_too_deep_has_no_id(request_: bytes) -> None:
    assert deep_request_id(request_) is None


def test_a_body_of_millions_of_small_arrays_is_given_up_on() -> None:
    """The scan's steps are bounded: this body is answered as a parse error (id null)."""
    many = b"[" + b"[]," * 2_000_000 + TOO_DEEP + b"]"
    assert deep_request_id(body(many, head_first=False)) is None
