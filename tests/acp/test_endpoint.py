"""``tether acp`` against a real loopback model endpoint, configured through the environment
and the user file as an editor would leave it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from acp import RequestError, text_block

from tests.acp.conftest import Setup
from tests.fakes.model_server import Call, ModelServer, Reply, Status

KEY = "sk-acp-secret-key-0123456789"


@pytest.fixture
def endpoint(setup: Setup) -> Iterator[ModelServer]:
    with ModelServer.in_thread() as server:
        setup.env.update(
            {
                "TETHER_PROVIDER": "openai",
                "TETHER_BASE_URL": server.openai_url,
                "TETHER_MODEL": "test-model",
                "OPENAI_API_KEY": KEY,
            }
        )
        config = setup.home / "config" / "tether" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text("[provider]\nmax_retries = 0\n")
        yield server


async def test_a_turn_streams_from_a_real_endpoint(
    setup: Setup, endpoint: ModelServer, project: Path
) -> None:
    endpoint.push(
        Reply(text="Reading it.", tool_calls=[Call("read_file", {"path": "README.md"}, id="t1")]),
        Reply(text="It is a demo."),
    )
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("?")])
        updates = agent.wire.updates(session.session_id)
    assert answer.stop_reason == "end_turn"
    text = "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text == "Reading it.It is a demo."
    first = endpoint.requests[0]
    assert first.headers["authorization"].endswith(KEY)
    assert first.body["model"] == "test-model"


async def test_an_endpoint_that_fails_answers_the_prompt_with_a_provider_error(
    setup: Setup, endpoint: ModelServer, project: Path
) -> None:
    endpoint.push(Status(500))
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        with pytest.raises(RequestError) as error:
            await agent.conn.prompt(session_id=session.session_id, prompt=[text_block("?")])
        again = await agent.conn.list_sessions()
    assert error.value.code == -32012
    assert KEY not in str(error.value.data)
    assert [info.session_id for info in again.sessions] == [session.session_id]


async def test_a_thinking_level_set_in_the_editor_streams_gemini_thoughts_as_thought_chunks(
    setup: Setup, project: Path
) -> None:
    with ModelServer.in_thread() as server:
        setup.env.update(
            {
                "TETHER_PROVIDER": "gemini",
                "TETHER_BASE_URL": server.gemini_url,
                "TETHER_MODEL": "gemini-test",
                "GEMINI_API_KEY": KEY,
            }
        )
        server.push(Reply(thinking="A demo, surely.", text="It is a demo."))
        async with setup.agent() as agent:
            session = await agent.request("session/new", {"cwd": str(project), "mcpServers": []})
            sid = session["sessionId"]
            await agent.request(
                "session/set_config_option",
                {"sessionId": sid, "configId": "thinkingLevel", "value": "medium"},
            )
            answer = await agent.conn.prompt(session_id=sid, prompt=[text_block("?")])
            updates = agent.wire.updates(sid)
        (request,) = server.requests
    assert answer.stop_reason == "end_turn"
    chunks = {
        kind: "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)
        for kind in ("agent_thought_chunk", "agent_message_chunk")
    }
    assert chunks == {
        "agent_thought_chunk": "A demo, surely.",
        "agent_message_chunk": "It is a demo.",
    }
    assert request.body["generationConfig"]["thinkingConfig"] == {
        "thinkingBudget": 8192,
        "includeThoughts": True,
    }
    assert request.headers["x-goog-api-key"] == KEY
