"""The pytest plugin as a harness author uses it: fixtures by name, overridden or parametrized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.client import InvalidParamsError, PermissionHandler, ProviderFailedError, TetherClient
from tether.protocol.kernel import StopReason
from tether.providers import ModelRequest
from tether.testing import function_spec, rewind, tool_call

from .conftest import uri_of


@pytest.fixture
def tether_workspace(tmp_path: Path) -> Path:
    """A workspace with a file in it, for the tests of this module."""
    workspace = tmp_path / "notes"
    workspace.mkdir()
    (workspace / "todo.txt").write_text("buy milk\n")
    return workspace


@pytest.mark.parametrize(
    "tether_script",
    [
        [
            {"text": "Reading.", "toolCalls": [tool_call("read_file", path="todo.txt")]},
            {"text": "You need to buy milk."},
        ]
    ],
)
async def test_a_harness_drives_a_scripted_run(tether_client: TetherClient, tether_workspace: Path):
    session = await tether_client.create_session()
    run = tether_client.run(session.session_id, "What is on my list?")
    kinds = [progress.event.kind async for progress in run]
    result = await run

    assert session.workspace == uri_of(tether_workspace)
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert result.stop_reason is StopReason.END_TURN
    assert result.response == "You need to buy milk."
    assert "buy milk" in result.tool_calls[0].result


async def test_the_default_script_is_empty(tether_client: TetherClient, tether_options: Any):
    session = await tether_client.create_session()
    with pytest.raises(ProviderFailedError):
        await tether_client.run(session.session_id, "hi")
    assert tether_options["provider"]["type"] == "scripted"


class TestAnOverriddenScript:
    @pytest.fixture
    def tether_script(self) -> list[dict[str, Any]]:
        return [{"text": "first"}, {"text": "second"}]

    async def test_turns_go_on_from_run_to_run(self, tether_client: TetherClient):
        sid = (await tether_client.create_session()).session_id
        answers = [(await tether_client.run(sid, prompt)).response for prompt in ("a", "b")]
        assert answers == ["first", "second"]


def test_the_plugin_is_registered_by_its_entry_point(pytestconfig: pytest.Config):
    import tether.testing

    assert pytestconfig.pluginmanager.get_plugin("tether") is tether.testing


class TestRewindBetweenCases:
    """``tether.testing.rewind``: a harness puts the workspace back between cases."""

    @pytest.fixture
    def tether_script(self) -> list[dict[str, Any]]:
        change = {
            "toolCalls": [
                tool_call("write_file", "w1", path="done.txt", content="milk\n"),
                tool_call(
                    "edit_file", "e1", path="todo.txt", old_string="buy", new_string="bought"
                ),
            ]
        }
        return [change, {"text": "Done."}]

    @pytest.fixture
    def tether_on_permission(self) -> PermissionHandler:
        return lambda params: "allow"

    async def test_the_files_a_case_changed_are_put_back(
        self, tether_client: TetherClient, tether_workspace: Path
    ):
        sid = (await tether_client.create_session()).session_id
        await tether_client.run(sid, "Mark the milk as bought")
        assert (tether_workspace / "todo.txt").read_text() == "bought milk\n"

        result = await rewind(tether_client, sid)

        assert result is not None
        assert (result.restored, result.removed, result.messages_removed) == (
            ["todo.txt"],
            ["done.txt"],
            0,
        )
        assert (tether_workspace / "todo.txt").read_text() == "buy milk\n"
        assert not (tether_workspace / "done.txt").exists()
        assert await rewind(tether_client, sid) is not None  # the checkpoint stays: idempotent

    async def test_with_history_the_turns_leave_the_session(self, tether_client: TetherClient):
        sid = (await tether_client.create_session()).session_id
        await tether_client.run(sid, "Mark the milk as bought")

        result = await rewind(tether_client, sid, history=True)

        assert result is not None and result.messages_removed > 0
        assert (await tether_client.get_session(sid)).message_count == 0
        assert await rewind(tether_client, sid) is None  # no turn of the session changed files

    async def test_a_file_the_harness_changed_is_refused_unless_forced(
        self, tether_client: TetherClient, tether_workspace: Path
    ):
        sid = (await tether_client.create_session()).session_id
        await tether_client.run(sid, "Mark the milk as bought")
        (tether_workspace / "todo.txt").write_text("changed by hand\n")

        with pytest.raises(InvalidParamsError) as refused:
            await rewind(tether_client, sid)
        assert refused.value.data["paths"] == ["todo.txt"]
        assert (tether_workspace / "todo.txt").read_text() == "changed by hand\n"

        await rewind(tether_client, sid, force=True)
        assert (tether_workspace / "todo.txt").read_text() == "buy milk\n"

    async def test_a_session_that_changed_nothing_has_nothing_to_rewind(
        self, tether_client: TetherClient
    ):
        sid = (await tether_client.create_session()).session_id
        assert await rewind(tether_client, sid) is None


def read_then_answer(request: ModelRequest) -> dict[str, Any] | str:
    """A turn function: reads the list when the user asks, then answers from the tool's result."""
    last = request.messages[-1]
    if last.role == "user":
        return {"toolCalls": [tool_call("read_file", path="todo.txt")]}
    offered = "read_file" in [tool.name for tool in request.tools]
    return f"offered read_file: {offered}; the file says: {last.content}"


class TestATurnFunction:
    """``tether_function``: a function decides each turn from the request the model would get."""

    @pytest.fixture
    def tether_function(self) -> Any:
        return read_then_answer

    async def test_it_sees_the_request_and_its_turns_drive_the_run(
        self, tether_client: TetherClient
    ):
        session = await tether_client.create_session()
        result = await tether_client.run(session.session_id, "What is on my list?")

        assert [call.name for call in result.tool_calls] == ["read_file"]
        assert result.response.startswith("offered read_file: True; the file says: ")
        assert "buy milk" in result.response
        assert result.stop_reason is StopReason.END_TURN

    async def test_it_is_asked_again_on_every_run(self, tether_client: TetherClient):
        sid = (await tether_client.create_session()).session_id
        first = await tether_client.run(sid, "a")
        second = await tether_client.run(sid, "b")
        assert first.response == second.response != ""


def failing_turn(request: ModelRequest) -> str:
    raise LookupError("no turn for this")


@pytest.mark.parametrize("tether_function", [f"{__name__}:failing_turn"])
async def test_a_function_that_fails_fails_the_run_with_its_reason(tether_client: TetherClient):
    session = await tether_client.create_session()
    with pytest.raises(ProviderFailedError) as raised:
        await tether_client.run(session.session_id, "hi")
    assert "failing_turn failed: LookupError: no turn for this" in raised.value.message


def test_a_function_the_server_cannot_import_by_name_is_refused_at_once():
    def nested(request: ModelRequest) -> str:
        return "never"

    for function in (nested, lambda request: "never"):
        with pytest.raises(TypeError, match="cannot be imported by name"):
            function_spec(function)
    assert function_spec(read_then_answer) == f"{__name__}:read_then_answer"
