"""An MCP server's prompts, resources and changing tools, through a real ``tether serve`` whose
model is a turn function (the server in tests/fakes/mcp_server.py, built with the official SDK)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tether.client import InvalidParamsError, TetherClient
from tether.protocol.commands import CommandInfo
from tether.providers import ModelRequest
from tether.testing import tool_call

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "mcp_server.py"
SERVERS = [{"name": "fake", "command": sys.executable, "args": [str(FAKE)]}]


def last_words(request: ModelRequest) -> str:
    """Answers with the text of the last message the model got (the prompt a command made)."""
    content = request.messages[-1].content
    if isinstance(content, str):
        return content
    return "\n".join(getattr(block, "text", f"<{block.type}>") for block in content or [])


def grow_then_list(request: ModelRequest) -> dict[str, Any] | str:
    """Calls fake__grow first; then says which fake__ tools the model call offered."""
    names = sorted(tool.name for tool in request.tools if tool.name.startswith("fake__gr"))
    if request.messages[-1].role == "user":
        return {"text": " ".join(names), "toolCalls": [tool_call("fake__grow")]}
    return " ".join(names)


@pytest.fixture
def tether_options(tether_options: dict[str, Any]) -> dict[str, Any]:
    return {**tether_options, "tools": {"approval": "auto"}}


@pytest.mark.parametrize("tether_function", [last_words])
async def test_the_prompts_of_a_server_are_slash_commands(tether_client: TetherClient):
    session = await tether_client.create_session(mcp_servers=SERVERS)
    listed = {c.name: c for c in (await tether_client.commands(session.session_id)).commands}

    assert listed["mcp__fake__review"] == CommandInfo(
        name="mcp__fake__review",
        description="Review a file",
        argument_hint="<path> [focus]",
        source="mcp",
    )
    assert listed["mcp__fake__greet"].argument_hint is None


@pytest.mark.parametrize("tether_function", [last_words])
async def test_a_prompt_command_sends_the_servers_prompt_with_the_typed_arguments(
    tether_client: TetherClient,
):
    sid = (await tether_client.create_session(mcp_servers=SERVERS)).session_id
    positional = await tether_client.run(sid, "/mcp__fake__review app.py speed")
    named = await tether_client.run(sid, "/mcp__fake__review focus=typos path='my notes.md'")
    defaults = await tether_client.run(sid, "/mcp__fake__review app.py")

    assert (
        positional.response
        == "Review app.py, looking for speed.\n\n[assistant] I will read it first."
    )
    assert named.response.startswith("Review my notes.md, looking for typos.")
    assert defaults.response.startswith("Review app.py, looking for bugs.")
    stored = (await tether_client.messages(sid)).messages[0]
    assert stored.metadata == {
        "command": {"name": "mcp__fake__review", "arguments": "app.py speed", "source": "mcp"}
    }


@pytest.mark.parametrize("tether_function", [last_words])
async def test_a_prompt_command_without_its_required_argument_is_refused(
    tether_client: TetherClient,
):
    sid = (await tether_client.create_session(mcp_servers=SERVERS)).session_id
    with pytest.raises(InvalidParamsError) as refused:
        await tether_client.run(sid, "/mcp__fake__review")
    assert "needs path (usage: /mcp__fake__review <path> [focus])" in refused.value.message
    with pytest.raises(InvalidParamsError):
        await tether_client.run(sid, "/mcp__fake__greet extra words")


@pytest.mark.parametrize("tether_function", [last_words])
async def test_a_resource_link_to_a_servers_resource_is_read_into_the_prompt(
    tether_client: TetherClient,
):
    sid = (await tether_client.create_session(mcp_servers=SERVERS)).session_id
    prompt = [
        {"type": "text", "text": "What do the notes say?"},
        {"type": "resource_link", "uri": "notes://today"},
        {"type": "resource_link", "uri": "notes://unknown"},
    ]
    result = await tether_client.run(sid, prompt)

    assert result.response == (
        "What do the notes say?\n<resource_link>\n"
        "[resource notes://today, from MCP server 'fake']\nShip on Friday.\n<resource_link>"
    )


@pytest.mark.parametrize("tether_function", [grow_then_list])
async def test_a_tool_list_changed_mid_run_is_seen_by_the_next_model_call(
    tether_client: TetherClient,
):
    sid = (await tether_client.create_session(mcp_servers=SERVERS)).session_id
    result = await tether_client.run(sid, "grow")

    assert [call.name for call in result.tool_calls] == ["fake__grow"]
    assert result.response == "fake__grow fake__grown"  # the first call offered fake__grow only
    assert (await tether_client.run(sid, "again")).tool_calls[0].name == "fake__grow"
