"""Structured output through a final tool, for APIs without a JSON-schema answer mode.

The model is offered one more tool, :data:`OUTPUT_TOOL`, whose input schema is the output schema
(wrapped in ``{"value": ...}`` when it is not an object schema, as tool inputs are objects), and
must call a tool; its call to that tool is its final answer. :func:`answer_from_tool` turns that
call back into the completion's text (the JSON of the value), so the kernel sees an answer like
any other provider's.
"""

from __future__ import annotations

from typing import Any

import orjson

from tether.providers.base import Completion, OutputSpec
from tether.providers.content import arguments_json

OUTPUT_TOOL = "final_answer"
_WRAPPED = "value"


def wraps(spec: OutputSpec) -> bool:
    """Whether the schema is wrapped in an object to be a tool's input."""
    return spec.schema.get("type") != "object"


def tool_definition(spec: OutputSpec) -> tuple[str, str, dict[str, Any]]:
    """The final tool: name, description, input schema."""
    schema = dict(spec.schema)
    if wraps(spec):
        # definitions stay at the root, where the schema's "#/$defs/..." references point
        shared: dict[str, Any] = {
            key: schema.pop(key) for key in ("$defs", "definitions") if key in schema
        }
        schema = {
            "type": "object",
            "properties": {_WRAPPED: schema},
            "required": [_WRAPPED],
            **shared,
        }
    description = (
        f"Give your final answer ({spec.name}) by calling this tool: its input is the answer. "
        "Call it once you have everything you need, instead of answering in text."
    )
    return OUTPUT_TOOL, description, schema


def answer_from_tool(completion: Completion, spec: OutputSpec) -> Completion:
    """``completion`` with a call of the final tool turned into its text (the answer); the
    other calls are kept (the kernel then runs them, and the answer is asked for again)."""
    answers = [call for call in completion.tool_calls if call.name == OUTPUT_TOOL]
    if not answers:
        return completion
    arguments = answers[-1].arguments
    if wraps(spec):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            value = None
        if isinstance(value, dict) and _WRAPPED in value:
            arguments = arguments_json(value[_WRAPPED])
    others = [call for call in completion.tool_calls if call.name != OUTPUT_TOOL]
    return completion.model_copy(
        update={
            "content": arguments,
            "tool_calls": others,
            "finish_reason": "tool_calls" if others else "stop",
        }
    )
