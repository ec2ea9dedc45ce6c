"""The preparation rules, one by one, and a provider that declares it lacks tools and system
messages, as the loopback endpoint receives its requests."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.fakes import ModelServer, Reply
from tether.protocol import ImageBlock, Message, Role, TextBlock, ToolCall
from tether.providers import ModelRequest, RetryPolicy
from tether.providers.anthropic import anthropic_messages
from tether.providers.base import Capabilities
from tether.providers.openai import OpenAIProvider, openai_messages
from tether.providers.prepare import (
    embed_system,
    fold_tool_results,
    merge_consecutive,
    merge_runs,
    prepare,
)

from .test_wire_formats import PNG, READ, collect

_ids = itertools.count(1)


def message(role: Role, content: Any = None, **fields: Any) -> Message:
    return Message(
        id=f"p{next(_ids)}", role=role, content=content, created_at=datetime.now(UTC), **fields
    )


def shape(messages: list[Message]) -> list[tuple[str, Any]]:
    return [(m.role.value, m.content) for m in messages]


CALL = ToolCall(id="c1", name="read_file", arguments='{"path": "a.py"}')
EXCHANGE = [
    message(Role.USER, "What is in a.py?"),
    message(Role.ASSISTANT, "Reading.", tool_calls=[CALL]),
    message(Role.TOOL, "print('a')", tool_call_id="c1", name="read_file"),
    message(Role.USER, "And?"),
]


# --- tool results folded ----------------------------------------------------------------------


def test_tool_calls_become_assistant_text_and_results_go_in_front_of_the_next_user_message():
    folded = fold_tool_results(EXCHANGE)
    assert shape(folded) == [
        ("user", "What is in a.py?"),
        ("assistant", 'Reading.\n\n[called tool read_file with {"path": "a.py"}]'),
        ("user", "[tool read_file returned:]\nprint('a')\n\nAnd?"),
    ]
    assert all(m.tool_calls is None and m.role is not Role.TOOL for m in folded)


def test_results_followed_by_an_assistant_turn_get_a_user_message_of_their_own():
    calls = [CALL, ToolCall(id="c2", name="list_files", arguments="")]
    history = [
        message(Role.USER, "Look."),
        message(Role.ASSISTANT, tool_calls=calls),
        message(Role.TOOL, "print('a')", tool_call_id="c1"),  # no name: found from the call
        message(Role.TOOL, "denied", tool_call_id="c2", is_error=True),
        message(Role.ASSISTANT, "Done."),
    ]
    assert shape(fold_tool_results(history)) == [
        ("user", "Look."),
        (
            "assistant",
            '[called tool read_file with {"path": "a.py"}]\n[called tool list_files with {}]',
        ),
        ("user", "[tool read_file returned:]\nprint('a')\n\n[tool list_files failed:]\ndenied"),
        ("assistant", "Done."),
    ]


def test_results_at_the_end_of_the_history_become_the_last_user_message():
    folded = fold_tool_results(EXCHANGE[:3])
    assert shape(folded)[-1] == ("user", "[tool read_file returned:]\nprint('a')")


def test_a_result_folded_into_a_user_message_with_blocks_keeps_the_blocks():
    image = ImageBlock(mime_type="image/png", data=PNG)
    history = [*EXCHANGE[:3], message(Role.USER, [TextBlock(text="See this."), image])]
    last = fold_tool_results(history)[-1]
    assert last.content == [
        TextBlock(text="[tool read_file returned:]\nprint('a')"),
        TextBlock(text="See this."),
        image,
    ]


def test_json_content_of_a_result_is_folded_as_its_json_text():
    history = [*EXCHANGE[:2], message(Role.TOOL, {"lines": 1}, tool_call_id="c1")]
    assert fold_tool_results(history)[-1].content == '[tool read_file returned:]\n{"lines":1}'


# --- system embedded --------------------------------------------------------------------------


def test_the_system_prompt_goes_in_front_of_the_first_user_message():
    history = [
        message(Role.USER, "Hi."),
        message(Role.ASSISTANT, "Hello."),
        message(Role.USER, "Q"),
    ]
    assert shape(embed_system("Be terse.", history)) == [
        ("user", "Be terse.\n\nHi."),
        ("assistant", "Hello."),
        ("user", "Q"),
    ]


def test_system_messages_of_the_history_join_the_prompt_and_leave_their_place():
    history = [
        message(Role.ASSISTANT, "Welcome."),
        message(Role.SYSTEM, "Project rules."),
        message(Role.USER, "Hi."),
    ]
    assert shape(embed_system("Base.", history)) == [
        ("assistant", "Welcome."),
        ("user", "Base.\n\nProject rules.\n\nHi."),
    ]


def test_without_a_user_message_the_system_prompt_is_a_user_message_of_its_own():
    assert shape(embed_system("Base.", [message(Role.ASSISTANT, "Hi.")])) == [
        ("user", "Base."),
        ("assistant", "Hi."),
    ]
    assert shape(embed_system("Base.", [])) == [("user", "Base.")]
    history = [message(Role.USER, "Hi.")]
    assert embed_system(None, history) == history


# --- consecutive turns merged -----------------------------------------------------------------


def test_consecutive_messages_of_one_role_are_merged_and_tool_results_never():
    other = ToolCall(id="c2", name="list_files", arguments="{}")
    history = [
        message(Role.USER, "one"),
        message(Role.USER, "two"),
        message(Role.ASSISTANT, "Reading.", tool_calls=[CALL]),
        message(Role.ASSISTANT, None, tool_calls=[other]),
        message(Role.TOOL, "a", tool_call_id="c1"),
        message(Role.TOOL, "b", tool_call_id="c2"),
        message(Role.USER, [TextBlock(text="three")]),
        message(Role.USER, "four"),
    ]
    merged = merge_consecutive(history)
    assert shape(merged) == [
        ("user", "one\n\ntwo"),
        ("assistant", "Reading."),
        ("tool", "a"),
        ("tool", "b"),
        ("user", [TextBlock(text="three"), TextBlock(text="four")]),
    ]
    assert merged[1].tool_calls == [CALL, other]


def test_merge_runs_merges_only_neighbours_with_one_key():
    merged = merge_runs([1, 3, 2, 4, 5, 6], lambda n: n % 2 or None, lambda a, b: a * 10 + b)
    assert merged == [13, 2, 4, 5, 6]


def test_the_anthropic_mapping_merges_its_wire_turns_with_the_same_rule():
    _, turns = anthropic_messages(None, [*EXCHANGE, message(Role.USER, "More?")])
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert [block["type"] for block in turns[-1]["content"]] == ["tool_result", "text", "text"]


# --- capabilities -----------------------------------------------------------------------------


def test_a_provider_that_takes_everything_gets_the_request_unchanged():
    request = ModelRequest(model="m", system="S", messages=EXCHANGE, tools=[READ])
    assert prepare(request, Capabilities()) is request


def test_rules_apply_together_in_order_tools_system_then_merging():
    request = ModelRequest(model="m", system="S", messages=EXCHANGE, tools=[READ])
    prepared = prepare(request, Capabilities(tools=False, system=False, alternating=True))
    assert prepared.system is None and prepared.tools == ()
    assert [m.role for m in prepared.messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert prepared.messages[0].content == "S\n\nWhat is in a.py?"
    assert request.messages is EXCHANGE  # the session's history is not changed


class PlainCompletions(OpenAIProvider):
    """An OpenAI-compatible endpoint serving a model without tools or a system role."""

    capabilities = Capabilities(tools=False, system=False, alternating=True)


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer() as server:
        yield server


async def test_a_provider_without_tools_or_system_receives_neither(server: ModelServer):
    async with httpx.AsyncClient() as client:
        provider = PlainCompletions(
            base_url=server.openai_url, client=client, retry=RetryPolicy(max_retries=0)
        )
        server.push(Reply(text="ok"))
        request = ModelRequest(model="m", system="Be terse.", messages=EXCHANGE, tools=[READ])
        await collect(provider, request)
    body = server.requests[0].body
    assert "tools" not in body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == "Be terse.\n\nWhat is in a.py?"
    assert "tool_calls" not in body["messages"][1]
    assert body["messages"][2]["content"] == "[tool read_file returned:]\nprint('a')\n\nAnd?"
    # the same history, to a provider that takes it all, keeps its tool turns
    assert [m["role"] for m in openai_messages("S", EXCHANGE)] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
    ]


@pytest.mark.parametrize("content", [{"order": 7, "rush": False}, 12.5, [1, "a"], True])
def test_content_that_is_not_text_is_sent_as_its_json_text(content: Any):
    history = [
        message(Role.USER, content),
        message(Role.ASSISTANT, tool_calls=[CALL]),
        message(Role.TOOL, content, tool_call_id="c1"),
    ]
    text = json.dumps(content, separators=(",", ":"))
    wire = openai_messages(None, history)
    assert (wire[0]["content"], wire[2]["content"]) == (text, text)
    _, turns = anthropic_messages(None, history)
    assert turns[0]["content"] == [{"type": "text", "text": text}]
    assert turns[2]["content"][0]["content"] == text
