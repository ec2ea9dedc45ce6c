"""The request methods: each validates its params into a model and calls one service method.

Big requests do not hold the event loop: the messages of a ``session/append`` are validated a
slice at a time, and a result with a long list is encoded a slice at a time, with other requests
served between the slices.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import (
    AsyncIterator,
    Callable,
    Iterator,
    Sequence,
)
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from tether.protocol import (
    AppendParams,
    ClearSessionParams,
    ConfigureSessionParams,
    CreateSessionParams,
    DeleteSessionParams,
    ForkSessionParams,
    GetSessionParams,
    ListSessionsParams,
    Message,
    MessageInput,
    MessagesParams,
)
from tether.protocol.limits import DEFAULT_LIMITS, Limits
from tether.protocol.sessions import AppendedMessage, plain_append, plain_session_id
from tether.rpc.calls import (
    SLICE,
    Encoded,
    Handler,
    LimitsOf,
    encode_in_slices,
    handler,
    validate_params,
)
from tether.rpc.errors import invalid_params
from tether.sessions import SessionService

__all__ = [
    "SLICE",
    "Encoded",
    "Handler",
    "LimitsOf",
    "append_handler",
    "encode_in_slices",
    "encode_messages",
    "get_handler",
    "handler",
    "session_methods",
    "validate_params",
    "validated_slices",
]


@functools.cache
def _messages() -> TypeAdapter[list[AppendedMessage]]:
    """The validator of a slice of an append's messages: built on the first big append, not
    while the server starts (it is ~10% of the handshake's CPU)."""
    return TypeAdapter(list[AppendedMessage])


@functools.cache
def _append_params() -> Callable[..., AppendParams]:
    """The validator of ``session/append``'s params, built on the first append (the model's
    schema is completed then, not while the server starts)."""
    AppendParams.model_rebuild()
    return AppendParams.__pydantic_validator__.validate_python


def get_handler(sessions: SessionService, limits: LimitsOf) -> Handler:
    """``session/get``: the session comes encoded from the service (the memory store keeps the
    encoding of each session until it changes), and goes out as it is."""
    validate: Callable[..., GetSessionParams] | None = None  # built on first use, as handler's
    context: dict[str, Limits] = {"limits": DEFAULT_LIMITS}

    async def handle_get(params: dict[str, Any] | None) -> Any:
        nonlocal context, validate
        session_id = plain_session_id(params)  # the usual {"sessionId": "..."}: no pydantic
        if session_id is None:
            if context["limits"] is not (current := limits()):
                context = {"limits": current}
            if validate is None:
                validate = GetSessionParams.__pydantic_validator__.validate_python
            try:
                session_id = validate(params or {}, context=context).session_id
            except ValidationError as exc:
                raise invalid_params(exc) from None
        return Encoded((await sessions.session_json(session_id),))

    return handle_get


def append_handler(sessions: SessionService, limits: LimitsOf) -> Handler:
    """``session/append``. A big batch goes to the store a slice at a time, each slice validated
    and its decoded dicts let go just before the store packs it; the answer is encoded from the
    stored messages a slice at a time. No ``Message`` of the batch is alive all through."""

    context: dict[str, Limits] = {"limits": DEFAULT_LIMITS}

    async def handle_append(params: dict[str, Any] | None) -> Any:
        nonlocal context
        current = limits()
        plain = plain_append(params, current, SLICE)  # the usual text messages: no pydantic
        if plain is not None:
            session_id, batch = plain
        else:
            messages = params.get("messages") if params else None
            if (
                params is not None
                and isinstance(messages, list)
                and SLICE < len(messages) <= current.max_append_messages
            ):
                return await _append_big(sessions, params, messages, current)
            if context["limits"] is not current:
                context = {"limits": current}
            try:
                valid: AppendParams = _append_params()(params or {}, context=context)
            except ValidationError as exc:
                raise invalid_params(exc) from None
            session_id, batch = valid.session_id, valid.messages
            del valid
        answer = sessions.append_json(session_id, batch)  # the memory store: at once
        if answer is None:
            stored = await sessions.append_slices(session_id, _OneSlice(batch))
            answer = orjson.dumps({"messages": _dump_slice(stored, 0)}, option=orjson.OPT_UTC_Z)
        return Encoded((answer,))

    return handle_append


async def _append_big(
    sessions: SessionService, params: dict[str, Any], messages: list[Any], limits: Limits
) -> Encoded:
    """An append of more than :data:`SLICE` messages, validated, stored and encoded a slice at
    a time."""
    head = validate_params(AppendParams, {**params, "messages": messages[:SLICE]}, limits)
    session_id, slices = head.session_id, validated_slices(head.messages, messages, limits)
    del head, params
    return await encode_messages(await sessions.append_slices(session_id, slices))


class _OneSlice:
    """A batch of at most :data:`SLICE` messages, validated already, as the store takes
    slices (so it answers what it stored without building messages first). Not an async
    generator: those cost the event loop's bookkeeping of each one (~3 µs)."""

    __slots__ = ("_messages",)

    def __init__(self, messages: list[MessageInput]) -> None:
        self._messages: list[MessageInput] | None = messages

    def __aiter__(self) -> _OneSlice:
        return self

    async def __anext__(self) -> list[MessageInput]:
        messages, self._messages = self._messages, None
        if messages is None:
            raise StopAsyncIteration
        return messages


async def validated_slices(
    first: list[MessageInput], messages: list[Any], limits: Limits
) -> AsyncIterator[list[MessageInput]]:
    """The messages of an append validated a slice at a time (``first`` is the first slice,
    validated already); each slice's decoded dicts are let go once it is validated. An invalid
    message raises InvalidParams naming it."""
    messages[:SLICE] = [None] * SLICE
    yield first
    del first
    context = {"limits": limits}
    for start in range(SLICE, len(messages), SLICE):
        await asyncio.sleep(0)
        window = slice(start, start + SLICE)
        try:
            batch = _messages().validate_python(messages[window], context=context)
        except ValidationError as exc:
            raise invalid_params(exc, "messages", start) from None
        messages[window] = [None] * len(batch)  # the decoded dicts are done with
        yield batch
        del batch


async def encode_messages(messages: Sequence[Message]) -> Encoded:
    """``{"messages": [...]}``, encoded twice a slice at a time: once now, to learn its length
    (a frame's header comes first), and again as the output takes it, each slice of messages
    read, dumped and let go before the next. The two give the same bytes: the messages are
    stored ones, which nothing changes."""
    starts = range(0, len(messages), SLICE)
    length = len(_OPEN) + len(_CLOSE) + max(len(starts) - 1, 0)
    for start in starts:
        if start:
            await asyncio.sleep(0)
        length += len(_encode_slice(messages, start))

    def parts() -> Iterator[bytes]:
        yield _OPEN
        for start in starts:
            if start:
                yield b","
            yield _encode_slice(messages, start)
        yield _CLOSE

    return Encoded(parts(), length)


_OPEN, _CLOSE = b'{"messages":[', b"]}"


def _encode_slice(messages: Sequence[Message], start: int) -> bytes:
    """The messages from ``start`` (one slice) as JSON, without the brackets of their list."""
    return orjson.dumps(_dump_slice(messages, start), option=orjson.OPT_UTC_Z)[1:-1]


def _dump_slice(messages: Sequence[Message], start: int) -> list[dict[str, Any]]:
    """The messages from ``start`` (one slice) as ``model_dump(by_alias=True,
    exclude_none=True)`` gives them; from the stored values when the store can."""
    dump: Callable[[int, int], list[dict[str, Any]]] | None = getattr(messages, "dumped", None)
    if dump is not None:  # a DumpedMessages (isinstance of a runtime protocol costs ~8 µs)
        return dump(start, start + SLICE)
    return [m.model_dump(by_alias=True, exclude_none=True) for m in messages[start : start + SLICE]]


def session_methods(sessions: SessionService, limits: LimitsOf) -> dict[str, Handler]:
    return {
        "session/create": handler(CreateSessionParams, sessions.create, limits),
        "session/get": get_handler(sessions, limits),
        "session/list": handler(ListSessionsParams, sessions.list_sessions, limits),
        "session/messages": handler(MessagesParams, sessions.messages, limits),
        "session/append": append_handler(sessions, limits),
        "session/configure": handler(ConfigureSessionParams, sessions.configure, limits),
        "session/clear": handler(ClearSessionParams, sessions.clear, limits),
        "session/delete": handler(DeleteSessionParams, sessions.delete, limits),
        "session/fork": handler(ForkSessionParams, sessions.fork, limits),
    }
