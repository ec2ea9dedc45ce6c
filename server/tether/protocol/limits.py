"""The size limits of the wire, and how a request over one is refused.

Every limit is answered with an error whose ``data`` names it and gives its value
(``{"limit": "maxAppendMessages", "value": 100000}``), never with a stall. The defaults are what
:class:`Limits` holds; a server may run with other values (``limits.*`` in the configuration), which
reach the validators through pydantic's validation context (``context={"limits": ...}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_bytes: int = 64 * MiB
    """A frame's body: the most one request may weigh, and the most the decoder buffers."""
    max_append_messages: int = 100_000
    """Messages in one ``session/append``."""
    max_message_bytes: int = 16 * MiB
    """A message's content (UTF-8 bytes of its text, image data and links), in an append."""


DEFAULT_LIMITS = Limits()

LIMIT_EXCEEDED = "limit_exceeded"
"""The pydantic error type of a value over a limit; its context carries ``limit`` and ``value``."""


def limits_of(info: ValidationInfo) -> Limits:
    """The limits a validation runs under: the context's, else the defaults."""
    context = info.context
    limits = context.get("limits") if isinstance(context, dict) else None
    return limits if isinstance(limits, Limits) else DEFAULT_LIMITS


def over_limit(message: str, limit: str, value: int) -> PydanticCustomError:
    """A validation error naming the limit (``maxAppendMessages``) and its value."""
    return PydanticCustomError(LIMIT_EXCEEDED, message, {"limit": limit, "value": value})


MAX_REQUEST_DEPTH = 1024
"""How deep a message may nest objects and arrays, its own object counted (``maxRequestDepth``):
what orjson, the decoder of both faces, takes. Not configurable. A request nested deeper is
answered ``InvalidRequest`` with its id (:mod:`tether.protocol.deep_requests`)."""


MAX_JSON_DEPTH = 64
"""How deep a free-form JSON value that a store keeps (a message's metadata, output or JSON
content; a session's settings, metadata or state) may nest objects and arrays
(``maxJsonDepth``). Not configurable: a value much deeper could be stored but never encoded again
(orjson stops at 255 levels), and no session would hold it usefully."""


def shallow_json(value: Any) -> Any:
    """A validator (before the field's own) that refuses a value nested deeper than
    :data:`MAX_JSON_DEPTH`, so that nothing is stored that could not be read back."""
    if nested_deeper_than(value, MAX_JSON_DEPTH):
        raise over_limit(
            "JSON nested deeper than {value} levels ({limit})", "maxJsonDepth", MAX_JSON_DEPTH
        )
    return value


def nested_deeper_than(value: Any, most: int) -> bool:
    """Whether ``value`` nests more than ``most`` objects and arrays (without recursion: the
    value may be as deep as the JSON decoder allows)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth == most:
            return True
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return False


ENCODED_DEPTH = 200
"""How many levels of a value from outside (a model's tool-call arguments) are kept when it nests
deeper than orjson encodes (255 levels): the rest is cut (:func:`clipped_json`). That is still far
deeper than :data:`MAX_JSON_DEPTH`, so the value is refused wherever it is checked, also when a
part of it is taken out."""


def clipped_json(value: Any, levels: int = ENCODED_DEPTH) -> Any:
    """``value`` with its objects and arrays below ``levels`` levels replaced by ``null``."""
    if not isinstance(value, dict | list | tuple):
        return value
    if levels <= 0:
        return None
    if isinstance(value, dict):
        return {key: clipped_json(item, levels - 1) for key, item in value.items()}
    return [clipped_json(item, levels - 1) for item in value]


NESTED_TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels of objects and arrays (maxJsonDepth)"
"""How a value over :data:`MAX_JSON_DEPTH` is described where it is no request's (a tool call's
arguments, a structured answer): ``f"the answer is {NESTED_TOO_DEEP}"``."""


def utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8, without encoding it when it is ASCII (the usual case)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def content_size(content: Any) -> int:
    """The weight of a message's content: its text, image data and links, in UTF-8 bytes."""
    if content is None:
        return 0
    if isinstance(content, str):
        return utf8_size(content)
    from tether.protocol.messages import is_blocks  # messages imports this module

    if not is_blocks(content):
        return len(orjson.dumps(content))  # any other JSON value: its JSON text
    size = 0
    for block in content:
        for name in ("text", "data", "uri"):
            value = getattr(block, name, None)
            if isinstance(value, str):
                size += utf8_size(value)
    return size
