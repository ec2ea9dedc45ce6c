"""Why a turn stopped, from each kind of provider's own finish reason on a real loopback
endpoint, through the real ``tether acp`` to the official SDK client: a cut-off answer says
``max_tokens`` and a refused one ``refusal``, never ``end_turn``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from acp import text_block

from tests.fakes.model_server import ModelServer, Reply

from .conftest import Setup

KEY = "sk-acp-stop-0123456789"
URLS = {
    "openai": lambda server: server.openai_url,
    "anthropic": lambda server: server.anthropic_url,
    "gemini": lambda server: server.gemini_url,
}


@pytest.fixture
def endpoint() -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        yield server


def configure(setup: Setup, kind: str, endpoint: ModelServer) -> None:
    config = setup.home / "config" / "tether" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"[provider]\ntype = {json.dumps(kind)}\nbaseUrl = {json.dumps(URLS[kind](endpoint))}\n"
        'model = "test-model"\nmaxRetries = 1\n'
    )
    setup.env |= {"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, "GEMINI_API_KEY": KEY}


@pytest.mark.parametrize(
    ("kind", "finish", "stop_reason"),
    [
        ("openai", "length", "max_tokens"),
        ("openai", "content_filter", "refusal"),
        ("openai", None, "end_turn"),
        ("anthropic", "max_tokens", "max_tokens"),
        ("anthropic", "refusal", "refusal"),
        ("gemini", "MAX_TOKENS", "max_tokens"),
        ("gemini", "SAFETY", "refusal"),
        ("gemini", "RECITATION", "refusal"),
    ],
)
async def test_the_turn_stops_for_the_reason_the_provider_gave(
    setup: Setup, endpoint: ModelServer, kind: str, finish: str | None, stop_reason: str
) -> None:
    configure(setup, kind, endpoint)
    endpoint.push(Reply(text="The answer is cut", finish_reason=finish))
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(setup.project), mcp_servers=[])
        answer = await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("q")])
        updates = agent.wire.updates(session.session_id)
    assert answer.stop_reason == stop_reason
    text = "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text == "The answer is cut"  # what came before the cut is shown, and only that
