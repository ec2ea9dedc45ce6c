"""The packed form of a stored message (a tuple of its values) and the fast paths around it.

The memory store keeps each message packed: a pydantic object with its field dicts takes about
four times the size of the message's JSON. Reading builds messages from the packed values
(:func:`unpack`, :func:`trusted_message`, which skip validating again what was validated when it
was appended) or dumps them straight to their wire JSON (:meth:`_Unpacked.dumped`). The SQL store
uses :func:`trusted_message` and :func:`new_message` too.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime
from typing import Any, overload

import orjson

from tether.protocol import (
    CompactedRange,
    Message,
    MessageInput,
    Role,
    ToolCall,
    is_blocks,
)

Packed = tuple[Any, ...]
"""A stored message: ``(id, role, content, tool_calls, tool_call_id, is_error, name, author,
metadata, output, run_id, kind, replaces, created_at)``, ``replaces`` as ``(first_id, last_id,
count)``, tool calls as ``(id, name, arguments)`` tuples, the role as its plain string: a tuple
of strings, numbers and times is one the collector stops tracking, so a big history costs its
full passes nothing."""

_ROLES = {role.value: role for role in Role}


def unpack(packed: Packed) -> Message:
    """A new message the caller owns, built from a packed one."""
    (
        id_,
        role,
        content,
        calls,
        call_id,
        is_error,
        name,
        author,
        metadata,
        output,
        run_id,
        kind,
        span,
        at,
    ) = packed
    return trusted_message(
        {
            "role": _ROLES[role],
            "content": _copy_content(content),
            "tool_calls": (
                None
                if calls is None
                else [ToolCall.model_construct(id=i, name=n, arguments=a) for i, n, a in calls]
            ),
            "tool_call_id": call_id,
            "is_error": is_error,
            "name": name,
            "author": author,
            "metadata": None if metadata is None else _copy_json(metadata),
            "kind": kind,
            "replaces": None if span is None else _range(span),
            "output": _copy_value(output),
            "id": id_,
            "run_id": run_id,
            "created_at": at,
        }
    )


_SET_ATTR = object.__setattr__


def _range(span: tuple[str, str, int]) -> CompactedRange:
    first, last, count = span
    return CompactedRange.model_construct(first_id=first, last_id=last, count=count)


def trusted_message(fields: dict[str, Any]) -> Message:
    """A message from values a store validated when they were appended (every field given).

    What ``Message.model_construct`` does, without its generic per-field work: reads build
    thousands of these, and that work was most of the cost of a page.
    """
    message = Message.__new__(Message)
    _SET_ATTR(message, "__dict__", fields)
    _SET_ATTR(message, "__pydantic_fields_set__", {k for k, v in fields.items() if v is not None})
    _SET_ATTR(message, "__pydantic_extra__", None)
    _SET_ATTR(message, "__pydantic_private__", None)
    return message


def new_message(
    source: MessageInput, message_id: str, now: datetime, run_id: str | None
) -> Message:
    fields = {name: getattr(source, name) for name in source.model_fields_set}
    fields.update(_copied_containers(source))
    return Message(id=message_id, created_at=now, run_id=run_id, **fields)


def pack_input(source: MessageInput, message_id: str, now: datetime, run_id: str | None) -> Packed:
    """A validated input as the store keeps it (its containers copied), without building a
    :class:`Message` first (a validated ``Message`` costs ~10x the packing)."""
    content = source.content
    calls = source.tool_calls
    metadata = source.metadata
    span = source.replaces
    output = source.output
    return (
        message_id,
        source.role.value,
        content if type(content) is str else _copy_content(content),  # text: immutable
        None if calls is None else tuple((c.id, c.name, c.arguments) for c in calls),
        source.tool_call_id,
        source.is_error,
        source.name,
        source.author,
        None if metadata is None else _copy_json(metadata),
        None if output is None else _copy_value(output),
        run_id,
        source.kind,
        None if span is None else (span.first_id, span.last_id, span.count),
        now,
    )


class _Unpacked(Sequence[Message]):
    """Packed messages read as messages the caller owns, each built when it is read."""

    __slots__ = ("_packed",)

    def __init__(self, packed: list[Packed]) -> None:
        self._packed = packed

    def __len__(self) -> int:
        return len(self._packed)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [unpack(m) for m in self._packed[index]]
        return unpack(self._packed[index])

    def dumped(self, start: int, end: int) -> list[dict[str, Any]]:
        """Messages ``start`` to ``end`` as ``model_dump(by_alias=True, exclude_none=True)``
        gives them, straight from the packed values (~10x cheaper than building them)."""
        return [_dumped(m) for m in self._packed[start:end]]


_WIRE_NAMES = tuple(
    Message.model_fields[name].alias or name
    for name in (
        "id",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "is_error",
        "name",
        "author",
        "metadata",
        "output",
        "run_id",
        "kind",
        "replaces",
        "created_at",
    )
)
_ORDER = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    11,
    12,
    9,
    0,
    10,
    13,
)  # the packed values in Message's field order


def _dumped(packed: Packed) -> dict[str, Any]:
    dumped: dict[str, Any] = {}
    for index in _ORDER:
        value = packed[index]
        if value is None:
            continue
        if index == 2 and is_blocks(value):
            value = [block.model_dump(by_alias=True, exclude_none=True) for block in value]
        elif index in (2, 9) and isinstance(value, list | dict):
            value = _copy_value(value)
        elif index == 3:
            value = [{"id": i, "name": n, "arguments": a} for i, n, a in value]
        elif index == 12:
            value = {"firstId": value[0], "lastId": value[1], "count": value[2]}
        dumped[_WIRE_NAMES[index]] = value
    return dumped


def _copy_json(value: dict[str, Any]) -> dict[str, Any]:
    if not value:
        return {}
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(value))  # JSON data: the fast deep copy
    except TypeError:
        copied = copy.deepcopy(value)
    return copied


def _copy_value(value: Any) -> Any:
    """A copy of a JSON value the caller owns (strings, numbers and None are immutable)."""
    if isinstance(value, list | dict):
        return orjson.loads(orjson.dumps(value))
    return value


def _copy_content(content: Any) -> Any:
    """A copy of a message's content: blocks copied as models, any other JSON value as JSON."""
    if is_blocks(content):
        return [block.model_copy() for block in content]
    return _copy_value(content)


def _copied_containers(message: MessageInput) -> dict[str, Any]:
    """Fresh copies of the mutable parts of a message: content blocks, tool calls, metadata."""
    copies: dict[str, Any] = {}
    if isinstance(message.content, list | dict):
        copies["content"] = _copy_content(message.content)
    if isinstance(message.output, list | dict):
        copies["output"] = _copy_value(message.output)
    if message.tool_calls is not None:
        copies["tool_calls"] = [call.model_copy() for call in message.tool_calls]
    if message.metadata is not None:
        copies["metadata"] = _copy_json(message.metadata)
    return copies
