"""The scripted provider: plays a script back, records what it was sent, fails loudly."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.providers.streams import cancel_after_first_piece
from tether.config import ProviderConfig
from tether.protocol import ConfigError, ErrorCode, Message, ProviderError, Role
from tether.protocol.tools import ToolSpec
from tether.providers import (
    Completion,
    FunctionProvider,
    ModelRequest,
    ScriptedProvider,
    ScriptExhausted,
    ScriptNotUsedUp,
    TextDelta,
    make_provider,
)


def ask(text: str) -> ModelRequest:
    message = Message(id=text, role=Role.USER, content=text, created_at=datetime.now(UTC))
    return ModelRequest(model="scripted", messages=[message])


async def events_of(
    provider: ScriptedProvider, request: ModelRequest
) -> list[TextDelta | Completion]:
    async with asyncio.timeout(5):
        return [event async for event in provider.stream(request)]


async def test_text_streams_in_word_pieces_then_one_completion() -> None:
    provider = ScriptedProvider([{"text": "Hello there, world."}])
    events = await events_of(provider, ask("hi"))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello ", "there, ", "world."]
    done = events[-1]
    assert isinstance(done, Completion)
    assert done.content == "Hello there, world."
    assert done.finish_reason == "stop"


async def test_tool_calls_come_back_with_their_ids_and_arguments_as_json_text() -> None:
    provider = ScriptedProvider(
        [
            {
                "toolCalls": [
                    {"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}},
                    {"name": "list_files", "arguments": '{"glob": "*"}'},
                ]
            }
        ]
    )
    done = await provider.request(ask("go"))
    assert [(c.id, c.name, c.arguments) for c in done.tool_calls] == [
        ("c1", "read_file", '{"path":"a.py"}'),
        ("call_1_2", "list_files", '{"glob": "*"}'),
    ]
    assert done.content is None
    assert done.finish_reason == "tool_calls"


async def test_every_request_is_recorded_as_it_was_sent() -> None:
    provider = ScriptedProvider([{"text": "one"}, {"text": "two"}])
    history = [*ask("first").messages]
    await provider.request(ModelRequest(model="m", system="sys", messages=history))
    history.append(ask("second").messages[0])  # the caller reuses its list
    await provider.request(ModelRequest(model="m", messages=history))
    assert [len(r.messages) for r in provider.requests] == [1, 2]
    assert provider.requests[0].system == "sys"


async def test_a_request_past_the_end_of_the_script_fails_loudly() -> None:
    provider = ScriptedProvider([{"text": "only"}])
    await provider.request(ask("one"))
    with pytest.raises(ScriptExhausted) as caught:
        await provider.request(ask("two"))
    assert isinstance(caught.value, ProviderError)
    assert caught.value.code == ErrorCode.PROVIDER_ERROR
    assert caught.value.data == {"provider": "scripted"}
    assert len(provider.requests) == 2


async def test_unused_turns_are_detected() -> None:
    provider = ScriptedProvider([{"text": "one"}, {"text": "two"}])
    await provider.request(ask("one"))
    assert provider.remaining == 1
    with pytest.raises(ScriptNotUsedUp):
        provider.assert_used_up()
    await provider.request(ask("two"))
    provider.assert_used_up()


async def test_an_error_turn_fails_that_request_with_a_provider_error() -> None:
    provider = ScriptedProvider([{"error": "rate limited", "status": 429}, {"text": "ok"}])
    with pytest.raises(ProviderError) as caught:
        await provider.request(ask("one"))
    assert caught.value.data == {"provider": "scripted", "status": 429}
    assert (await provider.request(ask("two"))).content == "ok"


async def test_usage_from_the_script_is_reported() -> None:
    provider = ScriptedProvider([{"text": "x", "usage": {"inputTokens": 10, "outputTokens": 2}}])
    usage = (await provider.request(ask("q"))).usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (10, 2)


async def test_a_delay_holds_the_turn_after_its_first_piece_so_it_can_be_cancelled() -> None:
    provider = ScriptedProvider([{"text": "slow answer here", "delay": 30}])
    seen = await cancel_after_first_piece(provider, ask("q"))
    assert [event.text for event in seen if isinstance(event, TextDelta)] == ["slow "]


async def test_the_delay_uses_the_injected_sleep() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    provider = ScriptedProvider([{"delay": 0.25, "text": ""}], sleep=sleep)
    await provider.request(ask("q"))
    assert waits == [0.25]


def test_a_script_file_is_read_as_a_list_or_under_turns(tmp_path: Path) -> None:
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps([{"text": "a"}, {"text": "b"}]))
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text(json.dumps({"turns": [{"text": "a"}]}))
    assert ScriptedProvider.from_file(listed).remaining == 2
    assert ScriptedProvider.from_file(wrapped).remaining == 1


@pytest.mark.parametrize(
    "content",
    ["not json", json.dumps({"text": "not a list"}), json.dumps([{"txet": "typo"}])],
)
def test_an_invalid_script_file_is_a_config_error_naming_provider_script(
    tmp_path: Path, content: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(content)
    with pytest.raises(ConfigError) as caught:
        ScriptedProvider.from_file(script)
    assert caught.value.code == ErrorCode.CONFIG_ERROR
    assert caught.value.data == {"key": "provider.script"}


def test_a_missing_script_file_is_a_config_error_naming_provider_script(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        ScriptedProvider.from_file(tmp_path / "nowhere.json")
    assert caught.value.data == {"key": "provider.script"}
    assert "nowhere.json" in caught.value.message


async def test_a_provider_made_from_the_configuration_keeps_no_requests(tmp_path: Path) -> None:
    """A server's scripted provider records nothing: each recorded request holds the whole
    history, so a long session would grow with the square of its length."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "one"}, {"text": "two"}]))
    provider = make_provider(ProviderConfig(type="scripted", script=str(script)))
    assert isinstance(provider, ScriptedProvider)
    await events_of(provider, ask("a"))
    await events_of(provider, ask("b"))
    assert provider.requests == [] and provider.remaining == 0


# --- a function deciding each turn ---------------------------------------------------------------


def echo(request: ModelRequest) -> str:
    """A turn function (also loaded by name in test_make_provider)."""
    return f"you said {request.messages[-1].content}"


async def test_a_function_decides_each_turn_from_the_request_it_gets() -> None:
    seen: list[list[str]] = []

    def decide(request: ModelRequest) -> dict[str, object]:
        seen.append([tool.name for tool in request.tools])
        return {"text": "Looking.", "toolCalls": [{"name": "read_file", "arguments": {"p": 1}}]}

    provider = FunctionProvider(decide)
    request = ModelRequest(
        model="m",
        messages=ask("hi").messages,
        tools=[ToolSpec(name="read_file", description="reads", parameters={})],
    )
    events = await events_of(provider, request)  # type: ignore[arg-type]
    done = events[-1]
    assert isinstance(done, Completion)
    assert done.content == "Looking."
    assert [(c.id, c.name, c.arguments) for c in done.tool_calls] == [
        ("call_1_1", "read_file", '{"p":1}')
    ]
    assert seen == [["read_file"]]
    assert [r.tools for r in provider.requests] == [tuple(request.tools)]
    assert provider.calls == 1


async def test_an_async_function_and_a_plain_string_make_a_text_turn() -> None:
    async def decide(request: ModelRequest) -> str:
        await asyncio.sleep(0)
        return echo(request)

    events = await events_of(FunctionProvider(decide), ask("hello"))  # type: ignore[arg-type]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "you said hello"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (42, "returned no valid turn: expected a ScriptTurn, a mapping or a string, got int"),
        ({"txt": "typo"}, "returned no valid turn"),
    ],
)
async def test_a_function_that_returns_no_turn_fails_with_a_provider_error(
    reply: object, reason: str
) -> None:
    provider = FunctionProvider(lambda request: reply)  # type: ignore[arg-type,return-value]
    with pytest.raises(ProviderError) as raised:
        await events_of(provider, ask("hi"))  # type: ignore[arg-type]
    assert reason in raised.value.message
    assert raised.value.code == ErrorCode.PROVIDER_ERROR


async def test_a_turn_with_an_error_from_a_function_fails_like_a_scripted_one() -> None:
    provider = FunctionProvider(lambda request: {"error": "overloaded", "status": 529})
    with pytest.raises(ProviderError) as raised:
        await events_of(provider, ask("hi"))  # type: ignore[arg-type]
    assert raised.value.data == {"provider": "scripted", "status": 529}
