"""The pytest plugin as a harness author uses it: fixtures by name, overridden or parametrized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.client import ProviderFailedError, TetherClient
from tether.protocol.kernel import StopReason
from tether.testing import tool_call

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
