"""The scripted providers: a script of turns played back, or a Python function that decides each
turn, for tests, demos and the headless harness.

The script format (turn fields, defaults, errors) is documented in ``docs/testing.md``; in
short, a script is a JSON list of turns (or ``{"turns": [...]}``), each with ``text``,
``thinking``, ``toolCalls``, ``delay``, ``usage``, ``finishReason``, ``error`` and ``status``.
The thinking streams first as word-sized :class:`ThoughtDelta` pieces, the text as word-sized
:class:`TextDelta` pieces, then one :class:`Completion` carries the text, reasoning and calls.

:class:`ScriptedProvider` plays a list of turns; each request takes the next, and a request past
the end raises :class:`ScriptExhausted` (:meth:`ScriptedProvider.assert_used_up` raises when
turns are left). :class:`FunctionProvider` asks a function (pydantic-ai's ``FunctionModel``): it
gets each :class:`ModelRequest` (the messages and tools the model would see) and returns the
turn, as a :class:`ScriptTurn`, a mapping in the script's format, or a plain string of text. The
server loads one by name (``provider.function = "package.module:decide"``).

A compaction's summary request (:mod:`tether.kernel.compaction`) takes a turn like any other (its
``system`` is the summarizing prompt, and it offers no tools). Every request is recorded in
``requests`` (``record=True``, the default, for tests that hold the provider; a server's own
provider, which nobody can read, records none: a copy of each request's history would make a
long session's memory grow with the square of its length).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from tether.protocol import ConfigError, ProviderError, ToolCall
from tether.protocol.usage import Usage
from tether.providers.base import (
    Completion,
    ModelRequest,
    Provider,
    StreamEvent,
    TextDelta,
    ThoughtDelta,
)
from tether.providers.content import arguments_json
from tether.providers.errors import ScriptExhausted, ScriptNotUsedUp
from tether.providers.prepare import prepare
from tether.providers.retry import Sleep

_PIECE = re.compile(r"\s*\S+\s*")


class _ScriptModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ScriptCall(_ScriptModel):
    id: str | None = Field(default=None, min_length=1)
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"


class ScriptTurn(_ScriptModel):
    text: str = ""
    thinking: str = Field(default="", description="reasoning streamed before the text")
    tool_calls: list[ScriptCall] = Field(default_factory=list)
    delay: float | None = Field(default=None, ge=0)
    usage: Usage | None = None
    finish_reason: str | None = None
    error: str | None = Field(default=None, description="fail this request with this message")
    status: int | None = Field(default=None, description="the HTTP status an error pretends")


_SCRIPT = TypeAdapter(list[ScriptTurn])


def text_pieces(text: str) -> list[str]:
    """``text`` cut after each word (with the spaces that follow it); the pieces join to it."""
    return _PIECE.findall(text) or ([text] if text else [])


def load_script(path: str | Path) -> list[ScriptTurn]:
    """The turns of a script file; ConfigError naming ``provider.script`` when it is unusable."""
    try:
        data = orjson.loads(Path(path).read_bytes())
        if isinstance(data, dict) and "turns" in data:
            data = data["turns"]
        return _SCRIPT.validate_python(data)
    except OSError as exc:
        message = f"provider.script: cannot read {path}: {exc.strerror or exc}"
    except orjson.JSONDecodeError as exc:
        message = f"provider.script: {path} is not valid JSON: {exc}"
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'script'}: {error['msg']}"
            for error in exc.errors()
        )
        message = f"provider.script: {path} is not a valid script: {problems}"
    raise ConfigError(message, {"key": "provider.script"})


class ScriptedProvider(Provider):
    name = "scripted"

    def __init__(
        self,
        turns: Iterable[ScriptTurn | Mapping[str, Any]],
        *,
        model: str | None = None,
        sleep: Sleep = asyncio.sleep,
        record: bool = True,
    ) -> None:
        self.model = model
        self.record = record
        self.turns = [
            turn if isinstance(turn, ScriptTurn) else ScriptTurn.model_validate(turn)
            for turn in turns
        ]
        self.requests: list[ModelRequest] = []
        self._next = 0
        self._sleep = sleep

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        model: str | None = None,
        sleep: Sleep = asyncio.sleep,
        record: bool = True,
    ) -> ScriptedProvider:
        return cls(load_script(path), model=model, sleep=sleep, record=record)

    @property
    def remaining(self) -> int:
        """How many turns have not been played yet."""
        return len(self.turns) - self._next

    def assert_used_up(self) -> None:
        """Raise :class:`ScriptNotUsedUp` when turns of the script were never asked for."""
        if self.remaining:
            raise ScriptNotUsedUp(
                f"scripted provider: {self.remaining} of {len(self.turns)} turns were never used"
            )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        request = prepare(request, self.capabilities)
        if self.record:
            self.requests.append(_recorded(request))
        if self._next >= len(self.turns):
            raise ScriptExhausted(len(self.turns))
        number = self._next
        self._next += 1
        async for event in _play(self.turns[number], number, self._sleep):
            yield event


TurnReply = ScriptTurn | Mapping[str, Any] | str
"""What a turn function returns: a turn, a mapping in the script's format, or the text alone."""
TurnFunction = Callable[[ModelRequest], TurnReply | Awaitable[TurnReply]]
"""Decides the model's turn from the request (sync or async)."""


class FunctionProvider(Provider):
    """A scripted provider whose turns ``function`` decides, one call per request."""

    name = "scripted"

    def __init__(
        self,
        function: TurnFunction,
        *,
        model: str | None = None,
        sleep: Sleep = asyncio.sleep,
        record: bool = True,
    ) -> None:
        self.function = function
        self.model = model
        self.record = record
        self.requests: list[ModelRequest] = []
        self.calls = 0
        self._sleep = sleep

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        request = prepare(request, self.capabilities)
        if self.record:
            self.requests.append(_recorded(request))
        number = self.calls
        self.calls += 1
        turn = await self._decide(request)
        async for event in _play(turn, number, self._sleep):
            yield event

    async def _decide(self, request: ModelRequest) -> ScriptTurn:
        """The function's turn; ProviderError naming the function when it fails or returns
        something that is not a turn (the run then fails with -32012, the reason in it)."""
        name = getattr(self.function, "__qualname__", repr(self.function))
        try:
            reply = self.function(request)
            if inspect.isawaitable(reply):
                reply = await reply
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"scripted function {name} failed: {type(exc).__name__}: {exc}",
                {"provider": self.name},
            ) from exc
        try:
            return as_turn(reply)
        except (ValidationError, TypeError) as exc:
            raise ProviderError(
                f"scripted function {name} returned no valid turn: {exc}", {"provider": self.name}
            ) from exc


def as_turn(reply: object) -> ScriptTurn:
    """A turn function's reply as a :class:`ScriptTurn`."""
    if isinstance(reply, ScriptTurn):
        return reply
    if isinstance(reply, str):
        return ScriptTurn(text=reply)
    if isinstance(reply, Mapping):
        return ScriptTurn.model_validate(reply)
    raise TypeError(f"expected a ScriptTurn, a mapping or a string, got {type(reply).__name__}")


def load_function(spec: str) -> TurnFunction:
    """The turn function ``"package.module:name"`` names (``name`` may be dotted:
    ``module:Class.method``); ConfigError naming ``provider.function`` when there is none."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise _function_error(f"{spec!r} is not of the form package.module:function")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # the module's own code may fail in any way
        raise _function_error(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise _function_error(f"{module_name} has no {attribute}") from None
    if not callable(found):
        raise _function_error(f"{spec} is not callable")
    return cast(TurnFunction, found)


def _function_error(reason: str) -> ConfigError:
    return ConfigError(f"provider.function: {reason}", {"key": "provider.function"})


def _recorded(request: ModelRequest) -> ModelRequest:
    """A copy of ``request`` that later changes to the session's lists do not reach."""
    return replace(
        request,
        messages=tuple(request.messages),
        tools=tuple(request.tools),
        settings=dict(request.settings),
    )


async def _play(turn: ScriptTurn, number: int, sleep: Sleep) -> AsyncGenerator[StreamEvent, None]:
    """One turn as a stream: its thinking then its text piece by piece (``delay`` after the
    first piece of text), then the completion; a turn with ``error`` fails instead."""
    if turn.error is not None:
        data: dict[str, Any] = {"provider": "scripted"}
        if turn.status is not None:
            data["status"] = turn.status
        raise ProviderError(f"scripted: {turn.error}", data)
    for thought in text_pieces(turn.thinking):
        yield ThoughtDelta(text=thought)
    pieces = text_pieces(turn.text)
    for index, piece in enumerate(pieces):
        yield TextDelta(text=piece)
        if index == 0 and turn.delay:
            await sleep(turn.delay)
    if not pieces and turn.delay:
        await sleep(turn.delay)
    yield _completion(turn, number)


def _completion(turn: ScriptTurn, number: int) -> Completion:
    calls = [
        ToolCall(
            id=call.id or f"call_{number + 1}_{index + 1}",
            name=call.name,
            arguments=call.arguments
            if isinstance(call.arguments, str)
            else arguments_json(call.arguments),
        )
        for index, call in enumerate(turn.tool_calls)
    ]
    return Completion(
        content=turn.text or None,
        tool_calls=calls,
        usage=turn.usage,
        finish_reason=turn.finish_reason or ("tool_calls" if calls else "stop"),
        reasoning=turn.thinking or None,
    )
