"""The mode, the model and the thinking level as ACP session config options: offered by
``session/new`` and ``session/load``, set with ``session/set_config_option``, kept in the
store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from tests.acp.conftest import Setup
from tether.acp.config_options import config_options, configure
from tether.protocol import InvalidParams, Session


@pytest.fixture
def durable(setup: Setup, tmp_path: Path) -> Setup:
    setup.env["TETHER_SESSIONS_STORE"] = "sqlite"
    setup.env["TETHER_SESSIONS_PATH"] = str(tmp_path / "sessions.db")
    return setup


def _current(options: list[dict[str, Any]]) -> dict[str, str]:
    return {option["id"]: option["currentValue"] for option in options}


async def test_new_session_offers_the_mode_model_and_thinking_level(
    setup: Setup, project: Path
) -> None:
    setup.script([], model="scripted-large")
    async with setup.agent() as agent:
        answer = await agent.request("session/new", {"cwd": str(project), "mcpServers": []})
    mode, model, thinking = answer["configOptions"]
    assert mode["id"] == "mode" and mode["category"] == "mode" and mode["currentValue"] == "ask"
    assert [value["value"] for value in mode["options"]] == ["ask", "accept_edits", "read_only"]
    assert answer["modes"]["currentModeId"] == "ask"
    assert model["id"] == "model" and model["type"] == "select" and model["category"] == "model"
    assert model["currentValue"] == "scripted-large"
    assert [value["value"] for value in model["options"]] == ["scripted-large"]
    assert thinking["id"] == "thinkingLevel" and thinking["category"] == "thought_level"
    assert thinking["currentValue"] == "off"
    assert [value["value"] for value in thinking["options"]] == ["off", "low", "medium", "high"]


async def test_a_set_thinking_level_is_kept_in_the_store_and_loaded_by_another_process(
    durable: Setup, project: Path
) -> None:
    durable.script([], model="scripted-large")
    async with durable.agent() as first:
        session = await first.request("session/new", {"cwd": str(project), "mcpServers": []})
        answer = await first.request(
            "session/set_config_option",
            {"sessionId": session["sessionId"], "configId": "thinkingLevel", "value": "high"},
        )
    assert _current(answer["configOptions"]) == {
        "mode": "ask",
        "model": "scripted-large",
        "thinkingLevel": "high",
    }
    async with durable.agent() as second:
        params = {"sessionId": session["sessionId"], "cwd": str(project), "mcpServers": []}
        loaded = await second.request("session/load", params)
    assert _current(loaded["configOptions"])["thinkingLevel"] == "high"


async def test_unknown_options_and_values_are_refused_naming_the_field(
    setup: Setup, project: Path
) -> None:
    setup.script([], model="scripted-large")
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        with pytest.raises(RequestError) as option:
            await agent.conn.set_config_option(
                session_id=session.session_id, config_id="temperature", value="1"
            )
        with pytest.raises(RequestError) as value:
            await agent.conn.set_config_option(
                session_id=session.session_id, config_id="thinkingLevel", value="extreme"
            )
        with pytest.raises(RequestError) as model:
            await agent.conn.set_config_option(
                session_id=session.session_id, config_id="model", value="someone-elses"
            )
    assert option.value.code == value.value.code == model.value.code == -32602
    assert option.value.data["fields"][0]["field"] == "configId"
    assert value.value.data["fields"][0]["field"] == "value"
    assert model.value.data["fields"][0]["field"] == "value"


async def test_a_change_made_by_another_process_is_sent_before_the_next_turn(
    durable: Setup, project: Path
) -> None:
    durable.script([{"text": "Hello."}], model="scripted-large")
    async with durable.agent() as first, durable.agent() as second:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
        await second.conn.load_session(cwd=str(project), session_id=session.session_id)
        await second.conn.set_config_option(
            session_id=session.session_id, config_id="thinkingLevel", value="medium"
        )
        await first.conn.prompt(session_id=session.session_id, prompt=[text_block("hi")])
        updates = first.wire.updates(session.session_id)
    kinds = [update["sessionUpdate"] for update in updates]
    assert kinds[0] == "config_option_update"
    assert _current(updates[0]["configOptions"])["thinkingLevel"] == "medium"
    assert kinds.count("config_option_update") == 1


def _session(**fields: Any) -> Session:
    now = datetime.now(UTC)
    return Session(session_id="s1", workspace="file:///w", created_at=now, updated_at=now, **fields)


def test_the_model_choices_are_the_sessions_allowed_models() -> None:
    session = _session(allowed_models=["small", "large"], model="large")
    [_, model, _] = config_options(session, "small")
    assert model.current_value == "large"
    assert [value.value for value in model.options] == ["small", "large"]
    change = configure(session, "small", "model", "small")
    assert change.model == "small" and change.settings is None
    with pytest.raises(InvalidParams):
        configure(session, "small", "model", "medium")


def test_a_model_outside_the_allowed_ones_is_shown_as_current_but_cannot_be_chosen() -> None:
    session = _session(allowed_models=["small"])
    [_, model, _] = config_options(session, "configured")
    assert model.current_value == "configured"
    assert [value.value for value in model.options] == ["configured", "small"]
    with pytest.raises(InvalidParams):
        configure(session, "configured", "model", "configured")


def test_without_any_model_only_the_mode_and_thinking_level_are_offered() -> None:
    [mode, thinking] = config_options(_session(), None)
    assert (mode.id, thinking.id) == ("mode", "thinkingLevel")


def test_setting_the_thinking_level_keeps_the_other_settings() -> None:
    session = _session(settings={"temperature": 0.2, "thinkingLevel": "low"})
    change = configure(session, None, "thinkingLevel", "high")
    assert change.settings == {"temperature": 0.2, "thinkingLevel": "high"}
    assert change.model is None


async def test_the_mode_set_as_a_config_option_is_the_mode_and_is_announced(
    setup: Setup, project: Path
) -> None:
    setup.script([])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        answer = await agent.request(
            "session/set_config_option",
            {"sessionId": session.session_id, "configId": "mode", "value": "read_only"},
        )
        with pytest.raises(RequestError) as bad:
            await agent.conn.set_config_option(
                session_id=session.session_id, config_id="mode", value="yolo"
            )
        loaded = await agent.request(
            "session/resume", {"sessionId": session.session_id, "cwd": str(project)}
        )
        updates = agent.wire.updates(session.session_id)
    assert _current(answer["configOptions"])["mode"] == "read_only"
    assert updates == [{"sessionUpdate": "current_mode_update", "currentModeId": "read_only"}]
    assert loaded["modes"]["currentModeId"] == "read_only"
    assert bad.value.code == -32602 and "'yolo'" in bad.value.data["fields"][0]["message"]


async def test_set_mode_is_the_mode_config_option_too(setup: Setup, project: Path) -> None:
    setup.script([])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        await agent.conn.set_session_mode(session_id=session.session_id, mode_id="accept_edits")
        with pytest.raises(RequestError) as bad:
            await agent.conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
        updates = agent.wire.updates(session.session_id)
    kinds = [update["sessionUpdate"] for update in updates]
    assert kinds == ["current_mode_update", "config_option_update"]
    assert updates[0]["currentModeId"] == "accept_edits"
    assert _current(updates[1]["configOptions"])["mode"] == "accept_edits"
    assert bad.value.code == -32602 and bad.value.data["fields"][0]["field"] == "modeId"


async def test_a_mode_set_in_one_process_is_the_mode_in_another(
    durable: Setup, project: Path
) -> None:
    durable.script([{"text": "Hello."}])
    async with durable.agent() as first, durable.agent() as second:
        session = await first.conn.new_session(cwd=str(project), mcp_servers=[])
        loaded = await second.conn.load_session(cwd=str(project), session_id=session.session_id)
        await first.conn.set_session_mode(session_id=session.session_id, mode_id="read_only")
        await second.conn.prompt(session_id=session.session_id, prompt=[text_block("hi")])
        updates = second.wire.updates(session.session_id)
    assert loaded.modes is not None and loaded.modes.current_mode_id == "ask"
    kinds = [update["sessionUpdate"] for update in updates]
    assert kinds[:2] == ["config_option_update", "current_mode_update"]
    assert updates[1]["currentModeId"] == "read_only"


async def test_the_python_sdk_client_sees_the_mode_config_option(
    setup: Setup, project: Path
) -> None:
    setup.script([])
    async with setup.agent() as agent:
        session = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
    options = [getattr(option, "root", option) for option in session.config_options or []]
    [mode] = [option for option in options if option.category == "mode"]
    assert (mode.id, mode.current_value) == ("mode", "ask")
    assert session.modes is not None and session.modes.current_mode_id == "ask"


def _profile(project: Path, name: str, description: str) -> None:
    folder = project / ".tether" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.md").write_text(f"---\ndescription: {description}\n---\nYou {name}.\n")


async def test_the_agent_profiles_are_an_option_whose_choice_is_kept_in_the_store(
    durable: Setup, project: Path
) -> None:
    _profile(project, "reviewer", "Reviews, never edits")
    _profile(project, "writer", "Writes the docs")
    durable.script([])
    async with durable.agent() as first:
        session = await first.request("session/new", {"cwd": str(project), "mcpServers": []})
        agent = session["configOptions"][-1]
        chosen = await first.request(
            "session/set_config_option",
            {"sessionId": session["sessionId"], "configId": "agent", "value": "reviewer"},
        )
    assert agent["id"] == "agent" and agent["currentValue"] == "_none"
    assert [(value["value"], value.get("description")) for value in agent["options"]] == [
        ("_none", "tether's own prompt"),
        ("reviewer", "Reviews, never edits"),
        ("writer", "Writes the docs"),
    ]
    assert _current(chosen["configOptions"])["agent"] == "reviewer"
    async with durable.agent() as second:
        params = {"sessionId": session["sessionId"], "cwd": str(project), "mcpServers": []}
        loaded = await second.request("session/load", params)
        shown = await second.conn.prompt(
            session_id=session["sessionId"], prompt=[text_block("/agent")]
        )
        cleared = await second.request(
            "session/set_config_option",
            {"sessionId": session["sessionId"], "configId": "agent", "value": "_none"},
        )
        chunks = [
            update["content"]["text"]
            for update in second.wire.updates(session["sessionId"])
            if update["sessionUpdate"] == "agent_message_chunk"
        ]
    assert _current(loaded["configOptions"])["agent"] == "reviewer"
    assert shown.stop_reason == "end_turn"
    assert chunks[-1].startswith("The session runs under reviewer.")
    assert _current(cleared["configOptions"])["agent"] == "_none"


async def test_a_profile_added_or_chosen_by_a_command_is_announced_to_the_client(
    setup: Setup, project: Path
) -> None:
    setup.script([])
    async with setup.agent() as agent:
        session = await agent.request("session/new", {"cwd": str(project), "mcpServers": []})
        sid = session["sessionId"]
        _profile(project, "reviewer", "Reviews")
        await agent.conn.prompt(session_id=sid, prompt=[text_block("/agent reviewer")])
        updates = agent.wire.updates(sid)
        with pytest.raises(RequestError) as unknown:
            await agent.conn.set_config_option(session_id=sid, config_id="agent", value="nobody")
    assert [option["id"] for option in session["configOptions"]] == ["mode", "thinkingLevel"]
    offered, chosen = [u for u in updates if u["sessionUpdate"] == "config_option_update"]
    assert _current(offered["configOptions"])["agent"] == "_none"  # offered before the turn
    assert _current(chosen["configOptions"])["agent"] == "reviewer"  # chosen by it
    assert unknown.value.code == -32602
    assert unknown.value.data["fields"][0]["field"] == "value"


def test_a_session_s_missing_profile_is_shown_as_it_is() -> None:
    [*_, agent] = config_options(_session(agent="gone"), None, [("reviewer", None)])
    assert agent.current_value == "gone"
    assert [value.value for value in agent.options] == ["_none", "reviewer", "gone"]
