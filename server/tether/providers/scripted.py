"""The scripted provider: plays back a script of turns, for tests and the headless harness.

A script is a JSON list of turns (or ``{"turns": [...]}``)::

    [{"text": "Let me look.", "toolCalls": [{"id": "c1", "name": "read_file",
                                            "arguments": {"path": "README.md"}}]},
     {"text": "It is a README.", "delay": 0.5}]

Each request takes the next turn. Its ``text`` streams as word-sized :class:`TextDelta` pieces,
then one :class:`Completion` carries the text and the tool calls (``id`` defaults to
``call_<turn>_<n>``; ``arguments`` is an object or its JSON text). ``delay`` seconds are waited
after the first piece (before the completion when there is no text), so a test can cancel in the
middle of a turn. ``usage`` and ``finishReason`` are passed on when given; a turn with ``error``
fails with a ProviderError instead.

A compaction's summary request (:mod:`tether.kernel.compaction`) takes the next turn like any
other, so a script plays a summary as the turn whose ``text`` is the summary; the recorded
request tells it apart (its ``system`` is the summarizing prompt, and it offers no tools).

Every request is recorded in ``requests`` (``record=True``, the default, for tests that hold the
provider; a server's own provider, which nobody can read, records none: a copy of each request's
history would make a long session's memory grow with the square of its length). A request past
the end of the script raises :class:`ScriptExhausted`; :meth:`ScriptedProvider.assert_used_up`
raises when turns are left.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from tether.protocol import ConfigError, ProviderError, ToolCall
from tether.protocol.usage import Usage
from tether.providers.base import Completion, ModelRequest, Provider, TextDelta
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

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TextDelta | Completion, None]:
        request = prepare(request, self.capabilities)
        if self.record:
            self.requests.append(
                replace(
                    request,
                    messages=tuple(request.messages),
                    tools=tuple(request.tools),
                    settings=dict(request.settings),
                )
            )
        if self._next >= len(self.turns):
            raise ScriptExhausted(len(self.turns))
        number = self._next
        turn = self.turns[number]
        self._next += 1
        if turn.error is not None:
            data: dict[str, Any] = {"provider": self.name}
            if turn.status is not None:
                data["status"] = turn.status
            raise ProviderError(f"scripted: {turn.error}", data)
        pieces = text_pieces(turn.text)
        for index, piece in enumerate(pieces):
            yield TextDelta(text=piece)
            if index == 0 and turn.delay:
                await self._sleep(turn.delay)
        if not pieces and turn.delay:
            await self._sleep(turn.delay)
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
    )
