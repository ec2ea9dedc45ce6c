"""Tools whose arguments are a pydantic model: one source for the JSON Schema and the validation.

A :class:`TypedTool` publishes ``spec.parameters`` generated from its arguments model and, when
run, validates the arguments object into that model before calling :meth:`TypedTool.call`. A
validation failure is a :class:`ToolError` listing each failing field, so the model can fix its
call.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import core_schema

from tether.protocol.tools import ToolKind, ToolSpec
from tether.tools.base import Tool, ToolContext, ToolError, ToolResult


class ToolArguments(BaseModel):
    """Base of a tool's arguments: camelCase for the model (snake_case accepted), no extras."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


ArgsT = TypeVar("ArgsT", bound=ToolArguments)


class _ToolSchema(GenerateJsonSchema):
    """JSON Schema without the noise: no titles, optional fields not spelled as nullable."""

    def generate(self, schema: core_schema.CoreSchema, mode: JsonSchemaMode = "validation") -> Any:
        generated = super().generate(schema, mode)
        generated.pop("title", None)
        return generated

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        generated = super().default_schema(schema)
        if generated.get("default", ...) is None:
            del generated["default"]
        return generated


def arguments_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of ``model`` as a tool's ``parameters`` (camelCase property names): a
    copy the caller owns, made through JSON (several times faster than ``copy.deepcopy``; the
    built-in tools are made for every run)."""
    copied: dict[str, Any] = orjson.loads(_cached_schema_json(model))
    return copied


@functools.cache
def _cached_schema_json(model: type[BaseModel]) -> bytes:
    return orjson.dumps(_cached_schema(model))


@functools.cache
def _cached_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema(by_alias=True, schema_generator=_ToolSchema)
    return schema


def describe_validation_error(tool: str, exc: ValidationError, schema: dict[str, Any]) -> str:
    """A message for the model: each failing field, then the parameters the tool takes."""
    lines = [f"invalid arguments for {tool}:"]
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        lines.append(f"- {where}: {error['msg']}")
    required = set(schema.get("required", []))
    params = [f"{name}{' (required)' if name in required else ''}" for name in schema["properties"]]
    lines.append(f"parameters: {', '.join(params) or 'none'}")
    return "\n".join(lines)


class TypedTool(Tool, Generic[ArgsT]):
    """A tool whose arguments are validated into ``arguments_model`` before :meth:`call`."""

    def __init__(
        self, *, name: str, description: str, kind: ToolKind, arguments_model: type[ArgsT]
    ) -> None:
        self.arguments_model = arguments_model
        self.spec = ToolSpec(
            name=name,
            description=description,
            parameters=arguments_schema(arguments_model),
            kind=kind,
        )

    def parse(self, arguments: dict[str, Any]) -> ArgsT:
        """``arguments`` validated, or a :class:`ToolError` naming each failing field."""
        try:
            return self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            message = describe_validation_error(self.spec.name, exc, self.spec.parameters)
            raise ToolError(message) from None

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await self.call(self.parse(arguments), context)

    @abstractmethod
    async def call(self, args: ArgsT, context: ToolContext) -> ToolResult:
        """Do the work on validated arguments."""
