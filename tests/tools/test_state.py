"""state_get and state_set over a session state handle."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from tether.tools import ToolContext
from tether.tools.state import MAX_STATE_BYTES

from .conftest import Call


class DictState:
    """A state handle over a dict; ``get`` gives way to other tasks between reading and
    answering, as a store that does I/O would."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.state = state or {}
        self.sets = 0

    async def get(self) -> dict[str, Any]:
        copy = json.loads(json.dumps(self.state))
        await asyncio.sleep(0)
        return copy

    async def set(self, state: dict[str, Any]) -> None:
        self.sets += 1
        self.state = json.loads(json.dumps(state))


@pytest.fixture
def state() -> DictState:
    return DictState({"plan": ["read", "fix"], "done": False})


@pytest.fixture
def with_state(call: Call, context: ToolContext, state: DictState) -> Call:
    return Call(call.registry, dataclasses.replace(context, state=state))


async def test_state_get_answers_the_whole_object_or_one_key_as_json(with_state: Call):
    whole = await with_state("state_get")
    assert not whole.is_error and json.loads(whole.content) == {
        "plan": ["read", "fix"],
        "done": False,
    }
    one = await with_state("state_get", {"key": "plan"})
    assert json.loads(one.content) == ["read", "fix"]


async def test_state_get_of_a_missing_key_is_an_error_naming_the_keys(with_state: Call):
    result = await with_state("state_get", {"key": "nope"})
    assert result.is_error and "plan" in result.content and "done" in result.content


async def test_state_set_stores_any_json_value_and_delete_removes_it(
    with_state: Call, state: DictState
):
    for value in [{"a": [1, 2.5, None]}, None, "text", 3]:
        result = await with_state("state_set", {"key": "k", "value": value})
        assert not result.is_error, result.content
        assert state.state["k"] == value
    deleted = await with_state("state_set", {"key": "k", "delete": True})
    assert not deleted.is_error and "k" not in state.state
    again = await with_state("state_set", {"key": "k", "delete": True})
    assert not again.is_error and "nothing to delete" in again.content


@pytest.mark.parametrize(
    "arguments",
    [{"key": "k"}, {"key": "k", "value": 1, "delete": True}, {"key": "", "value": 1}, {}],
)
async def test_state_set_needs_a_key_and_either_a_value_or_delete(
    with_state: Call, state: DictState, arguments: dict[str, Any]
):
    result = await with_state("state_set", arguments)
    assert result.is_error
    assert state.sets == 0


async def test_a_state_over_the_cap_is_refused_and_nothing_changes(
    with_state: Call, state: DictState
):
    before = dict(state.state)
    result = await with_state("state_set", {"key": "big", "value": "x" * MAX_STATE_BYTES})
    assert result.is_error and "256 KiB" in result.content
    assert state.state == before and state.sets == 0
    fits = await with_state("state_set", {"key": "big", "value": "x" * (MAX_STATE_BYTES // 2)})
    assert not fits.is_error


async def test_concurrent_sets_of_one_turn_both_take_effect(with_state: Call, state: DictState):
    first, second = await asyncio.gather(
        with_state("state_set", {"key": "a", "value": 1}),
        with_state("state_set", {"key": "b", "value": 2}),
    )
    assert not first.is_error and not second.is_error
    assert state.state["a"] == 1 and state.state["b"] == 2


async def test_without_a_session_state_the_tools_say_so(call: Call):
    result = await call("state_get")
    assert result.is_error and "no session state" in result.content
