"""How a request method is called: its params validated into a model (absent params count as
``{}``), its result handed on as a model or encoded a slice at a time when it holds a long list
(:class:`Encoded`). Light on purpose: the wire needs it for the handshake, before the session
methods (:mod:`tether.rpc.handlers`) and their models are imported."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from tether.protocol.limits import DEFAULT_LIMITS, Limits
from tether.rpc.errors import invalid_params

P = TypeVar("P", bound=BaseModel)
Handler = Callable[[dict[str, Any] | None], Coroutine[Any, Any, Any]]
"""A request method: ``async def``, so the wire can start it eagerly (:mod:`tether.rpc.eager`)."""
LimitsOf = Callable[[], Limits]

SLICE = 250
"""Items validated or encoded between two turns of the event loop (a few ms of work)."""


class Encoded:
    """A result already encoded as JSON, in pieces that are written one after the other.

    With ``length`` (the size of them all), ``parts`` is an iterator that encodes each piece only
    when the output can take it: a big answer is never held whole."""

    __slots__ = ("length", "parts")

    def __init__(self, parts: Iterable[bytes], length: int | None = None) -> None:
        self.parts = parts
        self.length = length


def validate_params(
    params_model: type[P], params: dict[str, Any] | None, limits: Limits = DEFAULT_LIMITS
) -> P:
    """The params as a model (absent params count as ``{}``); InvalidParams naming the fields."""
    try:
        return params_model.model_validate(params or {}, context={"limits": limits})
    except ValidationError as exc:
        raise invalid_params(exc) from None


def handler(
    params_model: type[P],
    call: Callable[[P], Awaitable[BaseModel]],
    limits: LimitsOf = lambda: DEFAULT_LIMITS,
) -> Handler:
    """A pygls handler: plain-dict params in (absent params count as ``{}``), a model out."""

    validate: Callable[..., P] | None = None  # the model's own, built on first use
    context: dict[str, Limits] = {"limits": DEFAULT_LIMITS}

    async def handle(params: dict[str, Any] | None) -> Any:
        nonlocal context, validate
        if context["limits"] is not (current := limits()):  # the configuration's, once loaded
            context = {"limits": current}
        if validate is None:  # not before: building it is ~5 ms the handshake need not wait for
            validate = params_model.__pydantic_validator__.validate_python
        try:
            valid: P = validate(params or {}, context=context)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        result = await call(valid)
        del valid
        return await encode_in_slices(result)

    handle.__name__ = handle.__qualname__ = f"handle_{params_model.__name__}"
    return handle


async def encode_in_slices(result: BaseModel) -> BaseModel | Encoded:
    """``result`` as it is, or encoded a slice at a time when one of its fields is a long list
    of models. That list is consumed: each slice is let go once encoded, so the models and their
    JSON are not both held whole."""
    fields = result.__dict__
    long = [
        name
        for name in _list_fields(type(result))
        if len(value := fields[name] or []) > SLICE and isinstance(value[0], BaseModel)
    ]
    if not long:
        return result
    name = long[0]
    items: list[BaseModel] = getattr(result, name)
    rest = result.model_dump(by_alias=True, exclude_none=True, exclude={name})
    parts = [orjson.dumps(rest, option=orjson.OPT_UTC_Z)[:-1]]  # the object without its "}"
    alias = type(result).model_fields[name].alias or name
    parts.append(b'%s"%s":[' % (b"," if rest else b"", alias.encode()))
    for start in range(0, len(items), SLICE):
        await asyncio.sleep(0)
        window = slice(start, start + SLICE)
        dumped = [m.model_dump(by_alias=True, exclude_none=True) for m in items[window]]
        items[window] = [None] * len(dumped)  # type: ignore[list-item]
        parts.append(orjson.dumps(dumped, option=orjson.OPT_UTC_Z)[1:-1])
        parts.append(b",")
    parts[-1] = b"]}"
    return Encoded(parts)


_LIST_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {}


def _list_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of ``model`` that may hold a list, found once per model."""
    found = _LIST_FIELDS.get(model)
    if found is None:
        found = _LIST_FIELDS[model] = tuple(
            name
            for name, field in model.model_fields.items()
            if "list[" in repr(field.annotation).lower()
        )
    return found
