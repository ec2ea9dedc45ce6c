"""Structured output: a run's final answer validated against a JSON Schema (``outputSchema``).

The schema is checked as a schema before the run records anything (InvalidParams on
``outputSchema``). A provider that declares :attr:`Provider.native_output` is given the schema
in the request (:class:`OutputSpec`: OpenAI ``response_format``, Anthropic a final tool); any
other is told in the system prompt to answer with JSON only. Either way the final answer's text
is parsed (a Markdown code fence around it is tolerated) and validated with ``jsonschema``; an
answer nested deeper than a session keeps (``maxJsonDepth``) is invalid whatever the schema. An
invalid answer is answered with a user message listing what is wrong, up to ``outputRetries``
times (default 2), after which the run ends with ``stopReason: "output_invalid"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from tether.protocol import InvalidParams
from tether.protocol.limits import MAX_JSON_DEPTH, NESTED_TOO_DEEP, nested_deeper_than
from tether.providers.base import OutputSpec

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

DEFAULT_RETRIES = 2
MAX_ERRORS = 10  # validation errors told to the model (and kept in the result)
_FENCE = re.compile(r"^```[\w-]*\s*\n(.*)\n```$", re.DOTALL)
_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


@dataclass
class OutputCheck:
    """The schema of one run, and the re-asks it has left."""

    schema: dict[str, Any]
    retries: int
    validator: Any = field(repr=False)

    @property
    def spec(self) -> OutputSpec:
        return OutputSpec(name=_name(self.schema), schema=self.schema)

    def parse(self, text: str) -> tuple[Any, list[str]]:
        """The answer's value and, when it is not valid, what is wrong with it."""
        stripped = text.strip()
        fenced = _FENCE.match(stripped)
        if fenced:
            stripped = fenced.group(1).strip()
        try:
            value = orjson.loads(stripped)
        except orjson.JSONDecodeError as exc:
            return None, [f"the answer is not JSON: {exc}"]
        if nested_deeper_than(value, MAX_JSON_DEPTH):  # it could be neither kept nor sent
            return None, [f"the answer is {NESTED_TOO_DEEP}"]
        errors = sorted(self.validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return value, [_describe(error) for error in errors[:MAX_ERRORS]]


def output_check(schema: Mapping[str, Any] | None, retries: int | None) -> OutputCheck | None:
    """The check of ``kernel/run {outputSchema, outputRetries}``; InvalidParams naming
    ``outputSchema`` when it is not a valid JSON Schema."""
    if schema is None:
        return None
    # jsonschema (with attrs and referencing, ~80 ms) is imported by the first run that asks
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators

    plain = dict(schema)
    cls = validators.validator_for(plain, default=validators.Draft202012Validator)
    try:
        cls.check_schema(plain)
    except schema_errors.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path) or "the schema"
        raise InvalidParams.field(
            "outputSchema", f"not a valid JSON Schema ({where}: {exc.message})"
        ) from None
    return OutputCheck(
        schema=plain,
        retries=DEFAULT_RETRIES if retries is None else retries,
        validator=cls(plain),
    )


def instruction(check: OutputCheck) -> str:
    """What a provider without a native mechanism is told in the system prompt."""
    schema = orjson.dumps(check.schema).decode()
    return (
        "When you give your final answer, answer with a single JSON value and nothing else (no "
        f"prose, no code fence) that is valid against this JSON Schema:\n{schema}"
    )


def system_prompt(system: str | None, check: OutputCheck | None, native: bool) -> str | None:
    """The system prompt of a request: ``system``, with the instruction when it is needed."""
    if check is None or native:
        return system
    return "\n\n".join(part for part in (system, instruction(check)) if part)


def retry_prompt(errors: list[str]) -> str:
    listed = "\n".join(f"- {error}" for error in errors)
    return (
        "Your answer does not match the required JSON Schema:\n"
        f"{listed}\nAnswer again, with JSON that matches the schema."
    )


def _describe(error: ValidationError) -> str:
    path = "/".join(str(part) for part in error.absolute_path)
    return f"{'/' + path if path else 'the answer'}: {error.message}"


def _name(schema: Mapping[str, Any]) -> str:
    """A name for the schema as the providers want one (letters, digits, ``_``, ``-``)."""
    title = schema.get("title")
    name = _NAME.sub("_", title).strip("_")[:64] if isinstance(title, str) else ""
    return name or "output"
