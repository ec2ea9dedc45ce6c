"""``plain_append``: the usual ``session/append`` params checked without pydantic.

Whatever it accepts must be exactly what :class:`AppendParams` makes of the same params; whatever
else it is given (valid or not) it must leave to pydantic, so every error is still pydantic's.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tether.protocol import MessageInput
from tether.protocol.limits import DEFAULT_LIMITS, Limits
from tether.protocol.sessions import AppendParams, GetSessionParams, plain_append, plain_session_id

MOST = 250


def validated(params: Any, limits: Limits = DEFAULT_LIMITS) -> AppendParams:
    AppendParams.model_rebuild()
    return AppendParams.model_validate(params, context={"limits": limits})


def assert_same(plain: tuple[str, list[MessageInput]], params: Any, limits: Limits) -> None:
    """Same session id, and messages pydantic could not tell from its own."""
    session_id, messages = plain
    valid = validated(params, limits)
    assert session_id == valid.session_id
    assert len(messages) == len(valid.messages)
    for fast, slow in zip(messages, valid.messages, strict=True):
        assert type(fast) is type(slow) is MessageInput
        assert fast == slow
        assert list(fast.__dict__.items()) == list(slow.__dict__.items())
        assert fast.role is slow.role
        assert fast.content is slow.content  # the decoded string itself, never a copy
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.__pydantic_extra__ == slow.__pydantic_extra__
        assert fast.__pydantic_private__ == slow.__pydantic_private__
        assert fast.model_dump(by_alias=True, exclude_none=True) == slow.model_dump(
            by_alias=True, exclude_none=True
        )


def params(*messages: Any, session_id: Any = "s-1") -> dict[str, Any]:
    return {"sessionId": session_id, "messages": list(messages)}


PLAIN = [
    params({"role": "user", "content": "hello"}),
    params({"role": "assistant", "content": ""}),
    params({"role": "system", "content": 'be brief\n\t"quoted" é 😀'}),
    params(*({"role": "user", "content": str(n)} for n in range(MOST))),
    params({"content": "order does not matter", "role": "user"}),
]


@pytest.mark.parametrize("given_params", PLAIN)
def test_plain_params_are_taken_and_are_what_pydantic_makes_of_them(given_params: Any) -> None:
    plain = plain_append(given_params, DEFAULT_LIMITS, MOST)
    assert plain is not None, "the usual append must take the fast path"
    assert_same(plain, given_params, DEFAULT_LIMITS)


NOT_PLAIN = [
    None,
    [],
    {},
    params(),  # no messages: pydantic says at least one
    params({"role": "user", "content": "x"}, session_id=""),
    params({"role": "user", "content": "x"}, session_id=5),
    params({"role": "user", "content": "x"}, session_id="\ud800"),
    {"session_id": "s-1", "messages": [{"role": "user", "content": "x"}]},  # snake case
    {**params({"role": "user", "content": "x"}), "extra": 1},
    {"sessionId": "s-1", "messages": {"role": "user", "content": "x"}},
    params({"role": "user"}),
    params({"role": "user", "content": None}),
    params({"role": "user", "content": ["not", "text"]}),
    params({"role": "user", "content": [{"type": "text", "text": "a block"}]}),
    params({"role": "user", "content": "x", "metadata": {}}),
    params({"role": "tool", "content": "x"}),
    params({"role": "tool", "content": "x", "toolCallId": "c1"}),
    params({"role": "model", "content": "an alias pydantic maps"}),
    params({"role": "USER", "content": "x"}),
    params({"role": "nobody", "content": "x"}),
    params({"role": 1, "content": "x"}),
    params({"role": [], "content": "x"}),  # unhashable: no lookup may raise
    params({"role": {"user": 1}, "content": "x"}),
    params({"role": "user", "content": "x"}, "not a message"),
    params(*({"role": "user", "content": str(n)} for n in range(MOST + 1))),
]


@pytest.mark.parametrize("given_params", NOT_PLAIN)
def test_any_other_shape_is_left_to_pydantic(given_params: Any) -> None:
    assert plain_append(given_params, DEFAULT_LIMITS, MOST) is None


def test_the_limits_are_kept_and_what_goes_over_them_is_left_to_pydantic() -> None:
    limits = Limits(max_append_messages=2, max_message_bytes=4)
    fits = params({"role": "user", "content": "ab"}, {"role": "user", "content": "é€"[:1] * 2})
    assert_same(plain_append(fits, limits, MOST) or pytest.fail("not taken"), fits, limits)
    for over in (
        params(*[{"role": "user", "content": "a"}] * 3),  # 3 messages, 2 allowed
        params({"role": "user", "content": "abcde"}),  # 5 bytes
        params({"role": "user", "content": "ééé"}),  # 3 characters, 6 bytes of UTF-8
    ):
        assert plain_append(over, limits, MOST) is None
        with pytest.raises(ValidationError, match="limit"):
            validated(over, limits)


any_text = st.text(st.characters(exclude_categories=[]), max_size=5)  # lone surrogates too
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)
message_keys = st.sampled_from(["role", "content", "toolCallId", "metadata", "name", "x"])
roles = st.sampled_from(["user", "assistant", "system", "tool", "model", "", "User"])
messages = st.one_of(
    st.fixed_dictionaries({"role": roles, "content": st.text(max_size=20) | json_values}),
    st.dictionaries(message_keys, roles | json_values, max_size=4),
    json_values,
)
any_params = st.one_of(
    st.fixed_dictionaries(
        {
            "sessionId": st.text(max_size=4) | any_text | json_values,
            "messages": st.lists(messages, max_size=4),
        }
    ),
    st.dictionaries(st.sampled_from(["sessionId", "messages", "session_id", "x"]), json_values),
    json_values,
)


@settings(max_examples=400, deadline=None)
@given(any_params)
def test_whatever_the_fast_path_takes_pydantic_takes_the_same_way(given_params: Any) -> None:
    limits = Limits(max_append_messages=3, max_message_bytes=12)
    plain = plain_append(given_params, limits, MOST)
    if plain is not None:
        assert_same(plain, given_params, limits)


@pytest.mark.parametrize(
    ("given_params", "expected"),
    [
        ({"sessionId": "s-1"}, "s-1"),
        ({"sessionId": "a b.c:d"}, "a b.c:d"),  # any non-empty string, as SessionRef takes it
        ({"sessionId": "é"}, None),  # not ASCII: left to pydantic, which takes it
        ({"sessionId": "\ud800"}, None),  # which pydantic refuses
        ({"sessionId": ""}, None),
        ({"sessionId": 1}, None),
        ({"sessionId": None}, None),
        ({"sessionId": "s-1", "x": 1}, None),
        ({"session_id": "s-1"}, None),
        ({}, None),
        (None, None),
        ([], None),
    ],
)
def test_plain_session_id_takes_only_exactly_a_session_id(
    given_params: Any, expected: str | None
) -> None:
    assert plain_session_id(given_params) == expected
    if expected is not None:
        GetSessionParams.model_rebuild()
        assert GetSessionParams.model_validate(given_params).session_id == expected


def test_a_session_id_pydantic_refuses_is_never_taken() -> None:
    with pytest.raises(ValidationError):
        GetSessionParams.model_validate({"sessionId": "\ud800"})
    with pytest.raises(ValidationError):
        validated(params({"role": "user", "content": "x"}, session_id="\ud800"))


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["sessionId", "session_id", "x"]), json_values) | json_values
)
def test_whatever_session_id_the_fast_path_takes_pydantic_takes(given_params: Any) -> None:
    session_id = plain_session_id(given_params)
    if session_id is not None:
        assert GetSessionParams.model_validate(given_params).session_id == session_id
