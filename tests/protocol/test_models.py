"""The wire models: camelCase out, both spellings in, unset optionals omitted, input rules."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from tether.protocol import (
    ContentBlock,
    ImageBlock,
    Message,
    MessageInput,
    ResourceLinkBlock,
    Role,
    Session,
    TextBlock,
    ToolCall,
)
from tether.protocol.kernel import (
    IterationFinished,
    IterationStarted,
    MessageDelta,
    ProgressParams,
    RunFinished,
    RunResult,
    RunStarted,
    StopReason,
    ToolCallRecord,
    ToolCallStarted,
    ToolCallStatus,
    ToolCallUpdate,
    Usage,
)
from tether.protocol.limits import MAX_JSON_DEPTH
from tether.protocol.sessions import MAX_STATE_BYTES, ConfigureSessionParams

NOW = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
content_blocks = TypeAdapter(list[ContentBlock])


def roundtrip(model: Any) -> Any:
    """The model read back from its own wire form, through real JSON text."""
    return type(model).model_validate(json.loads(json.dumps(model.to_wire())))


def a_message(**fields: Any) -> Message:
    return Message(**{"id": "m1", "role": "user", "content": "hi", "created_at": NOW, **fields})


def a_session(**fields: Any) -> Session:
    defaults = {"session_id": "s1", "workspace": "file:///w", "created_at": NOW, "updated_at": NOW}
    return Session(**{**defaults, **fields})


# --- Message ----------------------------------------------------------------------------------


def test_a_message_without_tool_fields_serializes_to_exactly_id_role_content_created_at() -> None:
    assert set(a_message().to_wire()) == {"id", "role", "content", "createdAt"}


def test_unset_optionals_are_omitted_from_the_wire_never_null() -> None:
    wire = a_message().to_wire()
    assert None not in wire.values()
    assert b"null" not in orjson.dumps(a_message().to_wire())


def test_a_message_with_every_field_round_trips_through_the_wire() -> None:
    message = a_message(
        role="assistant",
        content=[TextBlock(text="see"), ResourceLinkBlock(uri="file:///a.py", name="a.py")],
        tool_calls=[ToolCall(id="c1", name="read", arguments='{"path":"a.py"}')],
        name="bot",
        author="me",
        run_id="r1",
        metadata={"k": [1, None, {"x": True}]},
    )
    assert roundtrip(message) == message


def test_a_message_uses_camel_case_names_on_the_wire() -> None:
    wire = a_message(role="tool", tool_call_id="c1", run_id="r1", content="ok").to_wire()
    assert {"toolCallId", "runId", "createdAt"} <= set(wire)
    assert not {"tool_call_id", "run_id", "created_at"} & set(wire)


@pytest.mark.parametrize(
    "spelling",
    [
        {"toolCallId": "c1", "runId": "r1", "createdAt": "2025-03-04T05:06:07Z"},
        {"tool_call_id": "c1", "run_id": "r1", "created_at": "2025-03-04T05:06:07Z"},
    ],
    ids=["camelCase", "snake_case"],
)
def test_a_message_accepts_camel_case_and_snake_case_names_on_input(
    spelling: dict[str, str],
) -> None:
    message = Message.model_validate({"id": "m", "role": "tool", "content": "ok", **spelling})
    assert (message.tool_call_id, message.run_id) == ("c1", "r1")
    assert message.created_at == datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def test_created_at_goes_on_the_wire_as_rfc3339_utc_ending_in_z() -> None:
    created_at = a_message().to_wire()["createdAt"]
    assert created_at == "2025-03-04T05:06:07.890123Z"
    assert datetime.fromisoformat(created_at) == NOW


def test_created_at_given_with_another_offset_still_goes_on_the_wire_in_utc() -> None:
    plus_two = datetime(2025, 3, 4, 7, 6, 7, tzinfo=timezone(timedelta(hours=2)))
    assert a_message(created_at=plus_two).to_wire()["createdAt"] == "2025-03-04T05:06:07Z"


@pytest.mark.parametrize(("alias", "role"), [("model", Role.ASSISTANT), ("function", Role.TOOL)])
def test_provider_role_names_are_accepted_on_input_as_their_canonical_role(
    alias: str, role: Role
) -> None:
    fields = {"toolCallId": "c1"} if role is Role.TOOL else {}
    message_input = MessageInput.model_validate({"role": alias, "content": "x", **fields})
    message = Message.model_validate({"id": "m", "role": alias, "content": "x", "createdAt": NOW})
    assert message_input.role is role
    assert message.role is role
    assert message.to_wire()["role"] == role.value


def test_an_unknown_role_is_rejected() -> None:
    with pytest.raises(ValidationError):
        MessageInput.model_validate({"role": "robot", "content": "x"})


def test_null_values_inside_metadata_are_kept_on_the_wire() -> None:
    message = a_message(metadata={"a": None, "b": [None]})
    assert message.to_wire()["metadata"] == {"a": None, "b": [None]}


@given(st.text())
def test_any_text_content_round_trips_through_the_wire(text: str) -> None:
    message = a_message(content=text)
    assert roundtrip(message) == message
    assert Message.model_validate_json(orjson.dumps(message.to_wire())) == message


# --- ToolCall ---------------------------------------------------------------------------------


def test_a_tool_call_in_nested_provider_form_gives_the_flat_form() -> None:
    nested = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    flat = {"id": "c1", "name": "read", "arguments": "{}"}
    assert ToolCall.model_validate(nested) == ToolCall.model_validate(flat)
    assert ToolCall.model_validate(nested).to_wire() == flat


def test_tool_call_arguments_given_as_an_object_are_encoded_to_a_json_string() -> None:
    call = ToolCall.model_validate({"id": "c1", "name": "read", "arguments": {"path": "a.py"}})
    assert isinstance(call.arguments, str)
    assert json.loads(call.arguments) == {"path": "a.py"}


def test_nested_tool_call_arguments_given_as_an_object_are_encoded_too() -> None:
    nested = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"n": 1}}}
    assert json.loads(ToolCall.model_validate(nested).arguments) == {"n": 1}


@pytest.mark.parametrize(
    "data",
    [
        {"name": "f", "arguments": "{}"},
        {"id": "", "name": "f", "arguments": "{}"},
        {"id": "c", "name": "", "arguments": "{}"},
        {"id": "c", "name": "f"},
        {"id": "c", "name": "f", "arguments": 3},
        {"type": "function", "function": {"name": "f", "arguments": "{}"}},
    ],
)
def test_an_incomplete_tool_call_is_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ToolCall.model_validate(data)


def test_tool_call_arguments_that_cannot_be_encoded_raise_a_validation_error() -> None:
    # A provider response parsed with the standard json module keeps big integers as int.
    with pytest.raises(ValidationError):
        ToolCall.model_validate({"id": "c", "name": "f", "arguments": {"n": 2**64}})


json_objects = st.dictionaries(
    st.text(max_size=10),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=10),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=5), children, max_size=3)
        ),
        max_leaves=6,
    ),
    max_size=4,
)
ids_and_names = st.text(min_size=1, max_size=20)


@given(
    call_id=ids_and_names,
    name=ids_and_names,
    arguments=json_objects.map(json.dumps) | st.text(),
)
def test_any_tool_call_in_nested_form_equals_its_flat_form(
    call_id: str, name: str, arguments: str
) -> None:
    nested = ToolCall.model_validate(
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    )
    flat = ToolCall.model_validate({"id": call_id, "name": name, "arguments": arguments})
    assert nested == flat
    assert flat.to_wire() == {"id": call_id, "name": name, "arguments": arguments}


@given(arguments=json_objects)
def test_any_object_arguments_encode_to_json_text_of_the_same_object(
    arguments: dict[str, Any],
) -> None:
    call = ToolCall.model_validate({"id": "c", "name": "f", "arguments": arguments})
    assert json.loads(call.arguments) == arguments


# --- content blocks ---------------------------------------------------------------------------


def test_content_blocks_are_told_apart_by_their_type() -> None:
    blocks = content_blocks.validate_python(
        [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "aGk="},
            {"type": "resource_link", "uri": "file:///a.py"},
        ]
    )
    assert [type(block) for block in blocks] == [TextBlock, ImageBlock, ResourceLinkBlock]


def test_content_blocks_round_trip_with_camel_case_names() -> None:
    blocks = [
        TextBlock(text="hello"),
        ImageBlock(mime_type="image/svg+xml", data="PHN2Zy8+"),
        ResourceLinkBlock(uri="file:///a.py", name="a.py"),
        ResourceLinkBlock(uri="https://example.com/x"),
    ]
    wire = content_blocks.dump_python(blocks, mode="json", by_alias=True, exclude_none=True)
    assert wire[1] == {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zy8+"}
    assert wire[3] == {"type": "resource_link", "uri": "https://example.com/x"}
    assert content_blocks.validate_python(wire) == blocks


def test_an_image_block_accepts_snake_case_mime_type_on_input() -> None:
    block = content_blocks.validate_python(
        [{"type": "image", "mime_type": "image/png", "data": ""}]
    )
    assert block == [ImageBlock(mime_type="image/png", data="")]


@pytest.mark.parametrize(
    "block",
    [
        {"type": "video", "uri": "file:///a.mp4"},
        {"text": "no type"},
        {"type": "text"},
        {"type": "resource_link", "uri": ""},
    ],
)
def test_an_unknown_or_incomplete_content_block_is_rejected(block: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        content_blocks.validate_python([block])


@pytest.mark.parametrize("data", ["aGk", "a GK=", "aGk=\n", "====", "not base64!"])
def test_an_image_block_with_invalid_base64_is_rejected(data: str) -> None:
    with pytest.raises(ValidationError):
        ImageBlock(mime_type="image/png", data=data)


@pytest.mark.parametrize("mime_type", ["text/plain", "image/", "image", "image/png; x=1", ""])
def test_an_image_block_with_a_non_image_mime_type_is_rejected(mime_type: str) -> None:
    with pytest.raises(ValidationError):
        ImageBlock(mime_type=mime_type, data="aGk=")


@given(st.binary())
def test_an_image_block_accepts_any_bytes_in_standard_base64(raw: bytes) -> None:
    data = base64.b64encode(raw).decode()
    assert ImageBlock(mime_type="image/png", data=data).data == data


# --- MessageInput rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "tool", "content": "out"},
        {"role": "tool", "content": "out", "toolCallId": ""},
        {"role": "user", "content": "x", "toolCallId": "c1"},
        {"role": "assistant", "content": "x", "toolCallId": "c1"},
        {"role": "user", "content": "x", "toolCalls": [{"id": "c", "name": "f", "arguments": ""}]},
        {
            "role": "tool",
            "toolCallId": "c",
            "toolCalls": [{"id": "c", "name": "f", "arguments": ""}],
        },
        {"role": "user"},
        {"role": "system"},
        {"role": "assistant"},
        {"role": "assistant", "toolCalls": []},
        {"role": "tool", "toolCallId": "c1"},
    ],
    ids=[
        "tool-without-toolCallId",
        "tool-with-empty-toolCallId",
        "toolCallId-on-user",
        "toolCallId-on-assistant",
        "toolCalls-on-user",
        "toolCalls-on-tool",
        "user-without-content",
        "system-without-content",
        "assistant-without-content-or-calls",
        "assistant-with-empty-calls-and-no-content",
        "tool-without-content",
    ],
)
def test_a_message_input_breaking_a_role_rule_is_rejected(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MessageInput.model_validate(fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "tool", "content": "out", "toolCallId": "c1"},
        {"role": "function", "content": "out", "tool_call_id": "c1"},
        {"role": "assistant", "toolCalls": [{"id": "c", "name": "f", "arguments": "{}"}]},
        {
            "role": "model",
            "content": None,
            "tool_calls": [{"id": "c", "name": "f", "arguments": {}}],
        },
    ],
)
def test_a_message_input_following_the_role_rules_is_accepted(fields: dict[str, Any]) -> None:
    assert isinstance(MessageInput.model_validate(fields), MessageInput)


def test_an_assistant_input_with_only_tool_calls_serializes_without_content() -> None:
    message_input = MessageInput.model_validate(
        {"role": "assistant", "toolCalls": [{"id": "c", "name": "f", "arguments": "{}"}]}
    )
    assert message_input.to_wire() == {
        "role": "assistant",
        "toolCalls": [{"id": "c", "name": "f", "arguments": "{}"}],
    }


def test_a_message_input_round_trips_through_the_wire() -> None:
    message_input = MessageInput(
        role=Role.ASSISTANT,
        content=[TextBlock(text="calling")],
        tool_calls=[ToolCall(id="c", name="f", arguments="{}")],
        metadata={"source": "test"},
    )
    assert roundtrip(message_input) == message_input


# --- Session ----------------------------------------------------------------------------------


def test_a_session_round_trips_through_the_wire() -> None:
    session = a_session(
        title="t",
        agent_id="a",
        model="m",
        system_prompt="be brief",
        settings={"thinkingLevel": "high", "nested": {"x": None}},
        metadata={"tags": ["a"]},
        tools=["read"],
        parent_session_id="p",
        forked_from_message_id="m9",
        message_count=3,
        running=True,
    )
    assert roundtrip(session) == session


def test_a_minimal_session_omits_its_unset_optionals_and_keeps_its_defaults() -> None:
    assert a_session().to_wire() == {
        "sessionId": "s1",
        "workspace": "file:///w",
        "settings": {},
        "metadata": {},
        "state": {},
        "mode": "ask",
        "permissions": {"allowAlways": [], "rejectAlways": []},
        "messageCount": 0,
        "usage": {"inputTokens": 0, "outputTokens": 0},
        "createdAt": "2025-03-04T05:06:07.890123Z",
        "updatedAt": "2025-03-04T05:06:07.890123Z",
        "running": False,
    }


def test_a_session_accepts_snake_case_names_on_input() -> None:
    session = Session.model_validate(
        {
            "session_id": "s1",
            "workspace": "file:///w",
            "system_prompt": "p",
            "message_count": 2,
            "created_at": NOW,
            "updated_at": NOW,
        }
    )
    assert session == a_session(system_prompt="p", message_count=2)


# --- RunResult and progress -------------------------------------------------------------------


def test_a_run_result_round_trips_through_the_wire_with_camel_case_names() -> None:
    result = RunResult(
        run_id="r",
        session_id="s",
        stop_reason=StopReason.MAX_ITERATIONS,
        response="done",
        iterations=2,
        tool_calls=[
            ToolCallRecord(iteration=1, id="c", name="f", arguments="{}", result="x", is_error=True)
        ],
        usage=Usage(input_tokens=10, output_tokens=5),
    )
    wire = result.to_wire()
    assert wire["stopReason"] == "max_iterations"
    assert wire["toolCalls"][0]["isError"] is True
    assert wire["usage"] == {"inputTokens": 10, "outputTokens": 5}
    assert roundtrip(result) == result


def test_a_run_result_without_usage_omits_it() -> None:
    result = RunResult(run_id="r", session_id="s", stop_reason=StopReason.END_TURN, iterations=1)
    assert result.to_wire() == {
        "runId": "r",
        "sessionId": "s",
        "stopReason": "end_turn",
        "response": "",
        "iterations": 1,
        "toolCalls": [],
    }


def test_a_run_result_rejects_an_unknown_stop_reason() -> None:
    with pytest.raises(ValidationError):
        RunResult.model_validate(
            {"runId": "r", "sessionId": "s", "stopReason": "bored", "iterations": 1}
        )


PROGRESS_EVENTS = [
    RunStarted(max_iterations=8, user_message_id="m1"),
    IterationStarted(iteration=1),
    MessageDelta(message_id="m2", text="Hel"),
    ToolCallStarted(tool_call_id="c1", name="read", arguments='{"path":"a"}'),
    ToolCallUpdate(tool_call_id="c1", status=ToolCallStatus.IN_PROGRESS),
    ToolCallUpdate(tool_call_id="c1", status=ToolCallStatus.COMPLETED, result="text"),
    ToolCallUpdate(tool_call_id="c1", status=ToolCallStatus.FAILED, error="boom"),
    IterationFinished(iteration=1, tool_calls=1),
    RunFinished(stop_reason=StopReason.CANCELLED, iterations=1),
]


@pytest.mark.parametrize("event", PROGRESS_EVENTS, ids=lambda event: event.kind)
def test_each_progress_event_kind_round_trips_through_the_discriminator(event: Any) -> None:
    params = ProgressParams(session_id="s", run_id="r", seq=1, event=event)
    wire = params.to_wire()
    assert wire["event"]["kind"] == event.kind
    back = ProgressParams.model_validate(json.loads(json.dumps(wire)))
    assert type(back.event) is type(event)
    assert back == params


def test_progress_events_use_camel_case_names_and_omit_unset_optionals() -> None:
    started = ProgressParams(session_id="s", run_id="r", seq=2, event=PROGRESS_EVENTS[0])
    update = ProgressParams(session_id="s", run_id="r", seq=3, event=PROGRESS_EVENTS[4])
    assert started.to_wire() == {
        "sessionId": "s",
        "runId": "r",
        "seq": 2,
        "event": {"kind": "run_started", "maxIterations": 8, "userMessageId": "m1"},
    }
    assert update.to_wire()["event"] == {
        "kind": "tool_call_update",
        "toolCallId": "c1",
        "status": "in_progress",
    }


def test_a_tool_call_event_is_always_pending() -> None:
    event = {"kind": "tool_call", "toolCallId": "c", "name": "f", "arguments": "{}"}
    params = ProgressParams.model_validate(
        {"sessionId": "s", "runId": "r", "seq": 1, "event": event}
    )
    assert params.to_wire()["event"]["status"] == "pending"
    with pytest.raises(ValidationError):
        ProgressParams.model_validate(
            {"sessionId": "s", "runId": "r", "seq": 1, "event": {**event, "status": "completed"}}
        )


@pytest.mark.parametrize(
    "event",
    [{"kind": "run_exploded"}, {"iteration": 1}, {"kind": "iteration_started"}],
)
def test_an_unknown_or_incomplete_progress_event_is_rejected(event: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ProgressParams.model_validate({"sessionId": "s", "runId": "r", "seq": 1, "event": event})


def test_a_progress_sequence_number_starts_at_one() -> None:
    with pytest.raises(ValidationError):
        ProgressParams(session_id="s", run_id="r", seq=0, event=IterationStarted(iteration=1))


def test_a_session_state_over_its_cap_is_refused_naming_the_field() -> None:
    ConfigureSessionParams(session_id="s", state={"k": "x" * (MAX_STATE_BYTES - 100)})
    with pytest.raises(ValidationError) as raised:
        ConfigureSessionParams(session_id="s", state={"k": "x" * MAX_STATE_BYTES})
    assert [error["loc"] for error in raised.value.errors()] == [("state",)]


def nested(levels: int, leaf: Any = 1) -> Any:
    """A value ``levels`` objects and arrays deep (alternating)."""
    value = leaf
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (MessageInput, "metadata"),
        (MessageInput, "output"),
        (MessageInput, "content"),
        (ConfigureSessionParams, "settings"),
        (ConfigureSessionParams, "metadata"),
        (ConfigureSessionParams, "state"),
    ],
)
def test_a_kept_json_value_may_nest_max_json_depth_levels_and_no_more(
    model: type[Any], field: str
) -> None:
    base: dict[str, Any] = (
        {"role": "tool", "toolCallId": "c", "content": "x"}
        if model is MessageInput
        else {"sessionId": "s"}
    )
    levels = MAX_JSON_DEPTH if field in ("output", "content") else MAX_JSON_DEPTH - 1
    top = (lambda v: v) if field in ("output", "content") else (lambda v: {"top": v})
    model.model_validate({**base, field: top(nested(levels))})
    with pytest.raises(ValidationError) as caught:
        model.model_validate({**base, field: top(nested(levels + 1))})
    [error] = caught.value.errors()
    assert error["type"] == "limit_exceeded"
    assert error["ctx"] == {"limit": "maxJsonDepth", "value": MAX_JSON_DEPTH}
    assert error["loc"][0] == field


def test_a_value_as_deep_as_the_json_decoder_allows_is_refused_without_recursion() -> None:
    deepest = orjson.loads("[" * 1024 + "]" * 1024)
    with pytest.raises(ValidationError):
        MessageInput.model_validate({"role": "user", "content": "x", "metadata": {"d": deepest}})
