"""The registry: every bad call becomes an error result; only cancellation propagates."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from pydantic import Field

from tether.protocol.tools import ToolKind, ToolSpec
from tether.tools import (
    BUILTIN_TOOL_NAMES,
    Tool,
    ToolArguments,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    TypedTool,
    builtin_registry,
)
from tether.tools.typed import arguments_schema


class EchoArguments(ToolArguments):
    text: str = Field(description="what to say")
    times: int = Field(default=1, ge=1, le=3)
    loud: bool | None = None


class Echo(TypedTool[EchoArguments]):
    def __init__(self, name: str = "echo") -> None:
        super().__init__(
            name=name, description="Echo.", kind=ToolKind.OTHER, arguments_model=EchoArguments
        )
        self.calls: list[EchoArguments] = []

    async def call(self, args: EchoArguments, context: ToolContext) -> ToolResult:
        self.calls.append(args)
        text = " ".join([args.text] * args.times)
        return ToolResult(text.upper() if args.loud else text)


class Raw(Tool):
    """A tool without an arguments model: it gets the JSON object as it came."""

    spec = ToolSpec(name="raw", description="Raw.", parameters={"type": "object"})

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.seen.append(arguments)
        return ToolResult("ok")


class Failing(Tool):
    def __init__(self, name: str, error: Exception) -> None:
        self.spec = ToolSpec(name=name, description="Fails.", parameters={"type": "object"})
        self.error = error

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raise self.error


class Blocking(Tool):
    spec = ToolSpec(name="blocking", description="Waits forever.", parameters={"type": "object"})

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.started.set()
        await asyncio.Event().wait()
        raise AssertionError("not reached")


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def tools(echo: Echo) -> ToolRegistry:
    return ToolRegistry([echo, Raw()])


async def test_a_valid_call_runs_the_tool_on_its_validated_arguments(
    tools: ToolRegistry, echo: Echo, context: ToolContext
) -> None:
    result = await tools.execute("echo", '{"text": "hi", "times": 2}', context)
    assert result == ToolResult("hi hi")
    assert echo.calls == [EchoArguments(text="hi", times=2)]


async def test_snake_case_argument_names_are_accepted_too(context: ToolContext) -> None:
    result = await builtin_registry().execute("search_text", '{"pattern": "x"}', context)
    assert not result.is_error
    result = await builtin_registry().execute(
        "search_text", '{"pattern": "x", "ignore_case": true}', context
    )
    assert not result.is_error


async def test_an_unknown_tool_is_an_error_result_naming_the_available_ones(
    tools: ToolRegistry, context: ToolContext
) -> None:
    result = await tools.execute("ecko", "{}", context)
    assert result.is_error
    assert "echo" in result.content and "raw" in result.content


@pytest.mark.parametrize("arguments", ["{not json", '{"text": "a"', "'single'", "NaN]"])
async def test_arguments_that_are_not_json_are_an_error_result(
    tools: ToolRegistry, echo: Echo, context: ToolContext, arguments: str
) -> None:
    result = await tools.execute("echo", arguments, context)
    assert result.is_error
    assert "JSON" in result.content
    assert echo.calls == []


@pytest.mark.parametrize("arguments", ["[]", '"text"', "3", "null", "true"])
async def test_arguments_that_are_not_an_object_are_an_error_result(
    tools: ToolRegistry, echo: Echo, context: ToolContext, arguments: str
) -> None:
    result = await tools.execute("echo", arguments, context)
    assert result.is_error
    assert "object" in result.content
    assert echo.calls == []


async def test_empty_arguments_count_as_an_empty_object(
    tools: ToolRegistry, context: ToolContext
) -> None:
    result = await tools.execute("raw", "  ", context)
    assert result == ToolResult("ok")


async def test_every_failing_field_is_listed_in_one_error_result(
    tools: ToolRegistry, echo: Echo, context: ToolContext
) -> None:
    result = await tools.execute("echo", '{"times": 9, "volume": 11, "loud": "maybe"}', context)
    assert result.is_error
    assert echo.calls == []
    lines = result.content.splitlines()
    for field in ("text", "times", "volume", "loud"):
        assert any(line.startswith(f"- {field}:") for line in lines), field


async def test_a_tool_without_an_arguments_model_gets_the_object_as_sent(
    context: ToolContext,
) -> None:
    raw = Raw()
    result = await ToolRegistry([raw]).execute("raw", '{"any": [1, 2]}', context)
    assert not result.is_error
    assert raw.seen == [{"any": [1, 2]}]


async def test_a_tool_error_becomes_an_error_result_with_its_message(
    context: ToolContext,
) -> None:
    tools = ToolRegistry([Failing("fails", ToolError("no such thing"))])
    result = await tools.execute("fails", "{}", context)
    assert result == ToolResult("no such thing", is_error=True)


async def test_any_other_exception_becomes_an_internal_error_result_and_is_logged(
    context: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    tools = ToolRegistry([Failing("boom", KeyError("k"))])
    with caplog.at_level(logging.ERROR, logger="tether.tools.registry"):
        result = await tools.execute("boom", "{}", context)
    assert result.is_error
    assert "boom" in result.content and "KeyError" in result.content
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is KeyError


async def test_cancellation_propagates_out_of_execute(context: ToolContext) -> None:
    blocking = Blocking()
    task = asyncio.create_task(ToolRegistry([blocking]).execute("blocking", "{}", context))
    await asyncio.wait_for(blocking.started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_raised_inside_a_tool_is_not_turned_into_a_result(
    context: ToolContext,
) -> None:
    tools = ToolRegistry([Failing("cancelled", asyncio.CancelledError())])
    with pytest.raises(asyncio.CancelledError):
        await tools.execute("cancelled", "{}", context)


def test_registering_two_tools_with_one_name_is_refused(echo: Echo) -> None:
    tools = ToolRegistry([echo])
    with pytest.raises(ValueError, match="echo"):
        tools.register(Echo())


def test_list_gives_the_specs_in_registration_order(tools: ToolRegistry) -> None:
    assert [spec.name for spec in tools.list()] == ["echo", "raw"]
    assert [spec.name for spec in tools.list(["raw", "nothing"])] == ["raw"]


async def test_a_restricted_registry_offers_and_runs_only_allowed_tools(
    tools: ToolRegistry, context: ToolContext
) -> None:
    only_raw = tools.restricted(["raw", "echo"], None, ["raw", "unknown"])
    assert [spec.name for spec in only_raw.list()] == ["raw"]
    refused = await only_raw.execute("echo", '{"text": "x"}', context)
    assert refused.is_error
    assert [spec.name for spec in tools.list()] == ["echo", "raw"]  # the original is unchanged


async def test_a_tool_registered_after_the_restriction_obeys_it(context: ToolContext) -> None:
    tools = ToolRegistry().restricted(["late"])
    tools.register(Echo("other"))
    tools.register(Echo("late"))
    assert tools.names() == ["late"]
    assert tools.get("other") is None


def test_an_empty_allow_list_offers_nothing(tools: ToolRegistry) -> None:
    assert tools.restricted([]).list() == []


def test_the_builtin_registry_offers_the_read_only_tools_first_then_edits_and_commands() -> None:
    specs = builtin_registry().list()
    assert tuple(spec.name for spec in specs) == BUILTIN_TOOL_NAMES
    kinds = {spec.name: spec.kind for spec in specs}
    assert kinds == {
        "read_file": ToolKind.READ,
        "list_files": ToolKind.SEARCH,
        "search_text": ToolKind.SEARCH,
        "write_file": ToolKind.EDIT,
        "edit_file": ToolKind.EDIT,
        "run_command": ToolKind.EXECUTE,
        "state_get": ToolKind.READ,
        "state_set": ToolKind.EDIT,
        "update_plan": ToolKind.OTHER,
    }
    assert all(spec.description and "\n" not in spec.description for spec in specs)


def test_the_builtin_registry_honours_tools_enabled() -> None:
    assert builtin_registry(["search_text", "nope"]).names() == ["search_text"]
    assert builtin_registry([]).names() == []


def test_parameters_are_the_arguments_models_json_schema_without_titles() -> None:
    schema = arguments_schema(EchoArguments)
    assert schema == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "what to say"},
            "times": {"type": "integer", "default": 1, "minimum": 1, "maximum": 3},
            "loud": {"type": "boolean"},
        },
        "required": ["text"],
        "additionalProperties": False,
    }


def test_builtin_schemas_use_camel_case_and_have_no_titles() -> None:
    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {key for item in value.values() for key in keys(item)}
        if isinstance(value, list):
            return {key for item in value for key in keys(item)}
        return set()

    for spec in builtin_registry().list():
        assert spec.parameters["type"] == "object"
        assert "title" not in keys(spec.parameters) - set(spec.parameters["properties"])
        assert all("_" not in name for name in spec.parameters["properties"])
