"""Error responses raise the exception class of their code, with what their data says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tether.client import (
    ERRORS,
    ConfigInvalidError,
    Connection,
    InvalidParamsError,
    InvalidRequestError,
    PromptRefusedError,
    ProviderFailedError,
    RequestCancelledError,
    RpcError,
    ServerNotInitializedError,
    SessionBusyError,
    SessionNotFoundError,
    StoreFailedError,
    TetherClient,
    TetherClientError,
    WorkspaceInvalidError,
    error_from,
)
from tether.protocol import ErrorCode
from tether.protocol.kernel import RunFinished, StopReason

from .conftest import script


def test_every_error_code_of_the_contract_has_its_class_and_others_get_the_base():
    assert set(ERRORS) == {int(code) for code in ErrorCode}
    for code, cls in ERRORS.items():
        error = error_from(code, "m", {"x": 1})
        assert type(error) is cls and isinstance(error, TetherClientError)
        assert (error.code, error.message, error.data) == (code, "m", {"x": 1})
    other = error_from(-32099, "odd")
    assert type(other) is TetherClientError and other.code == -32099
    assert RpcError is TetherClientError


def test_the_data_of_an_error_is_read_defensively():
    assert RequestCancelledError("cancelled", {"not": "a result"}).partial is None
    assert RequestCancelledError("cancelled").partial is None
    assert InvalidParamsError("bad", {"fields": [{"field": "a.b"}, "junk"]}).fields == ["a.b"]
    assert InvalidParamsError("bad", "junk").fields == []
    assert SessionNotFoundError("gone", {"sessionId": "s"}).session_id == "s"
    assert ConfigInvalidError("bad", None).key is None
    assert StoreFailedError("full", {"reason": "disk-full"}).reason == "disk-full"
    assert StoreFailedError("full", ["junk"]).reason is None
    refused = PromptRefusedError("refused", {"hook": "gate", "reason": "no"})
    assert (refused.hook, refused.reason) == ("gate", "no")
    assert PromptRefusedError("refused", "junk").hook is None


async def test_session_errors_by_code(project: Path, tmp_path: Path):
    async with TetherClient.spawn(workspace=project) as client:
        with pytest.raises(SessionNotFoundError) as not_found:
            await client.messages("no-such-session")
        sid = (await client.create_session()).session_id
        with pytest.raises(InvalidParamsError) as bad_append:
            await client.append(sid, [{"role": "tool", "toolCallId": "nope", "content": "x"}])
        with pytest.raises(InvalidParamsError) as bad_limit:
            await client.list_sessions(limit=0)
        with pytest.raises(WorkspaceInvalidError):
            await client.create_session(workspace=tmp_path / "missing")
        with pytest.raises(InvalidRequestError):
            await client.request("initialize", {})  # a second initialize

    assert not_found.value.code == -32010 and not_found.value.session_id == "no-such-session"
    assert bad_append.value.fields == ["messages.0.toolCallId"]
    assert bad_limit.value.fields == ["limit"]


async def test_an_invalid_configuration_fails_spawn_with_the_key_and_stops_the_server(
    project: Path,
):
    with pytest.raises(ConfigInvalidError) as raised:
        await TetherClient.spawn(workspace=project, options={"kernel": {"max_iterations": "ten"}})
    assert raised.value.key == "kernel.max_iterations"


async def test_a_provider_failure_ends_the_events_then_raises(project: Path, tmp_path: Path):
    turns = [{"error": "the endpoint is down", "status": 503}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "hi")
        events = []
        with pytest.raises(ProviderFailedError) as from_iterator:
            async for progress in run:
                events.append(progress)
        with pytest.raises(ProviderFailedError):
            await run
        exhausted = client.run(sid, "again")  # the script has no turn left
        with pytest.raises(ProviderFailedError):
            await exhausted

    assert from_iterator.value.data == {"provider": "scripted", "status": 503}
    last = events[-1].event
    assert isinstance(last, RunFinished) and last.stop_reason is StopReason.ERROR


async def test_a_busy_session_refuses_changes_while_its_run_goes_on(project: Path, tmp_path: Path):
    turns = [{"text": "slow " * 10, "delay": 30}]
    async with TetherClient.spawn(workspace=project, options=script(tmp_path, turns)) as client:
        sid = (await client.create_session()).session_id
        run = client.run(sid, "go")
        await anext(run)
        for change in (
            client.append(sid, [{"role": "user", "content": "x"}]),
            client.clear(sid),
            client.delete(sid),
        ):
            with pytest.raises(SessionBusyError) as raised:
                await change
            assert raised.value.session_id == sid
            assert (raised.value.run_id, raised.value.holder) == (run.run_id, "this-process")
            assert raised.value.lease_lost is False
        run.cancel()
        with pytest.raises(RequestCancelledError):
            await run


async def test_the_raw_connection_raises_the_same_typed_errors():
    connection = await Connection.spawn([sys.executable, "-m", "tether", "serve"])
    try:
        with pytest.raises(ServerNotInitializedError) as raised:
            await connection.request("session/list", {})
    finally:
        await connection.close()
    assert isinstance(raised.value, RpcError) and raised.value.code == -32002


def test_a_run_that_lost_its_lease_is_told_apart_from_a_refused_one():
    lost = error_from(-32011, "lost", {"sessionId": "s", "runId": "r", "leaseLost": True})
    assert isinstance(lost, SessionBusyError)
    assert (lost.session_id, lost.run_id, lost.holder, lost.lease_lost) == ("s", "r", None, True)
