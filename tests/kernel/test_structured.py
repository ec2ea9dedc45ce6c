"""Structured output with a provider that has no native mechanism (the scripted one): the schema
goes in the system prompt, and the answer is validated like any other."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.kernel.structured import output_check
from tether.protocol import ErrorCode, InvalidParams, Role
from tether.protocol.kernel import StopReason

from .support import KernelHarness

SCHEMA = {"type": "array", "items": {"type": "integer"}, "minItems": 2}


async def test_the_schema_is_in_the_system_prompt_and_a_fenced_answer_is_parsed(
    tmp_path: Path,
) -> None:
    harness = KernelHarness(tmp_path, [{"text": "```json\n[1, 2, 3]\n```"}])
    sid = await harness.session(system_prompt="Be brief.")
    result = await harness.run(sid, "numbers", output_schema=SCHEMA)
    assert (result.stop_reason, result.output) == (StopReason.END_TURN, [1, 2, 3])
    [request] = harness.provider.requests
    assert request.output is None  # not native: told in the prompt
    assert request.system is not None and request.system.startswith("Be brief.")
    assert '{"type":"array","items":{"type":"integer"},"minItems":2}' in request.system


async def test_each_invalid_answer_is_followed_by_a_user_message_naming_its_errors(
    tmp_path: Path,
) -> None:
    harness = KernelHarness(tmp_path, [{"text": "three"}, {"text": "[1]"}, {"text": "[1, 2]"}])
    sid = await harness.session()
    result = await harness.run(sid, "numbers", output_schema=SCHEMA)
    assert (result.stop_reason, result.output, result.iterations) == (
        StopReason.END_TURN,
        [1, 2],
        3,
    )
    history = await harness.store.history(sid)
    retries = [m for m in history if m.role is Role.USER][1:]
    assert "the answer is not JSON" in str(retries[0].content)
    assert "the answer: [1] is too short" in str(retries[1].content)


async def test_no_retries_left_ends_the_run_output_invalid(tmp_path: Path) -> None:
    harness = KernelHarness(tmp_path, [{"text": "[1]"}])
    sid = await harness.session()
    result = await harness.run(sid, "numbers", output_schema=SCHEMA, output_retries=0)
    assert result.stop_reason is StopReason.OUTPUT_INVALID
    assert result.output is None and result.output_errors == ["the answer: [1] is too short"]
    assert result.to_wire()["stopReason"] == "output_invalid"


@pytest.mark.parametrize(
    "schema", [{"type": 12}, {"minItems": -1}, {"properties": []}, {"required": "x"}]
)
def test_an_invalid_schema_is_invalid_params_naming_output_schema(
    schema: dict[str, object],
) -> None:
    with pytest.raises(InvalidParams) as raised:
        output_check(schema, None)
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    assert raised.value.data == {
        "fields": [{"field": "outputSchema", "message": raised.value.message.split(": ", 1)[1]}]
    }


async def test_a_run_without_a_schema_has_no_output(tmp_path: Path) -> None:
    harness = KernelHarness(tmp_path, [{"text": "[1, 2]"}])
    sid = await harness.session()
    result = await harness.run(sid, "numbers")
    assert result.output is None and "output" not in result.to_wire()
