"""The one exception -> error map, with each face's code table."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel, ValidationError

from tether.acp.wire import ACP_ERRORS
from tether.jsonrpc.errors import RpcError
from tether.protocol import ErrorCode, InvalidRequest, SessionNotFound
from tether.rpc.errors import TETHER_ERRORS


class Needs(BaseModel):
    count: int


def validation_error() -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        Needs.model_validate({"count": "many"})
    return raised.value


def test_an_unknown_session_has_its_own_code_per_face() -> None:
    data = {"sessionId": "s1"}
    assert TETHER_ERRORS.error_of(SessionNotFound("s1")) == {
        "code": int(ErrorCode.SESSION_NOT_FOUND),
        "message": "session not found: s1",
        "data": data,
    }
    assert ACP_ERRORS.error_of(SessionNotFound("s1"))["code"] == -32002
    assert int(ErrorCode.SESSION_NOT_FOUND) != -32002


def test_the_other_contract_errors_keep_their_code_on_both_faces() -> None:
    for table in (TETHER_ERRORS, ACP_ERRORS):
        assert table.error_of(InvalidRequest("no")) == {"code": -32600, "message": "no"}
        assert table.error_of(RpcError(-32099, "refused", [1])) == {
            "code": -32099,
            "message": "refused",
            "data": [1],
        }
        assert table.error_of(asyncio.CancelledError())["code"] == -32800


def test_a_validation_error_is_invalid_params_on_acp_and_a_bug_on_tethers_protocol() -> None:
    acp = ACP_ERRORS.error_of(validation_error())
    assert acp["code"] == -32602 and acp["data"]["fields"][0]["field"] == "count"
    tether = TETHER_ERRORS.error_of(validation_error())
    assert tether == {"code": -32603, "message": "internal error: ValidationError"}


def test_a_bug_never_shows_its_text() -> None:
    for table in (TETHER_ERRORS, ACP_ERRORS):
        error = table.error_of(RuntimeError("a secret"))
        assert error["code"] == -32603 and "secret" not in error["message"]


def test_both_faces_raise_the_one_client_error() -> None:
    from tether.acp import wire as acp_wire
    from tether.jsonrpc.errors import ClientError
    from tether.rpc import errors as rpc_errors

    assert acp_wire.ClientError is ClientError and rpc_errors.ClientError is ClientError
    error = ClientError("no", -32000)
    assert (error.message, error.code) == ("no", -32000)
