"""Helpers the wire mappings share: canonical content as plain text, settings, error marks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Literal, cast

import orjson
from pydantic.alias_generators import to_camel

from tether.protocol import (
    ImageBlock,
    Message,
    MessageContent,
    ResourceLinkBlock,
    TextBlock,
    is_blocks,
)
from tether.protocol.limits import MAX_JSON_DEPTH, clipped_json, nested_deeper_than


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments (JSON text) as the object the Anthropic and Gemini formats need.

    Arguments that are not a JSON object (the model produced broken JSON), or nest deeper than a
    session keeps (the call was refused; the request could not always be encoded), are kept as
    text under ``invalid_json``, so the model sees what it sent next to the error result it got.
    """
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"invalid_json": arguments}
    if not isinstance(value, dict) or nested_deeper_than(value, MAX_JSON_DEPTH):
        return {"invalid_json": arguments}
    return value


def arguments_json(value: Any) -> str:
    """Arguments an endpoint sent as a JSON value (not as text) as the JSON text a tool call
    holds. A value nested deeper than orjson encodes (255 levels; far deeper than a session
    keeps: the call is refused) is cut at :data:`ENCODED_DEPTH` levels."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return orjson.dumps(clipped_json(value)).decode()


def resource_text(block: ResourceLinkBlock) -> str:
    """A resource link as the model reads it: its name (when given) and its URI."""
    return f"[resource {block.name}: {block.uri}]" if block.name else f"[resource: {block.uri}]"


def image_placeholder(block: ImageBlock) -> str:
    """What stands for an image where the wire format takes text only."""
    return f"[image: {block.mime_type}]"


def json_text(value: object) -> str:
    """Content that is neither text nor blocks (an object, a number...) as the model reads it:
    its JSON text."""
    return orjson.dumps(value).decode()


def flatten_text(content: MessageContent | None) -> str:
    """Content as one string; blocks are joined by newlines, images become a placeholder, any
    other JSON value is its JSON text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not is_blocks(content):
        return json_text(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceLinkBlock):
            parts.append(resource_text(block))
        else:
            parts.append(image_placeholder(block))
    return "\n".join(parts)


def is_error_result(message: Message) -> bool:
    """Whether a tool message reports a failure (``isError``)."""
    return bool(message.is_error)


@cache
def _camel(name: str) -> str:
    """``to_camel(name)``, worked out once per name (three regular expressions each time)."""
    return to_camel(name)


def pick_settings(settings: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The settings a wire format understands, under their snake_case names.

    Settings hold what a session was configured with (``thinkingLevel``, ...); only the names
    listed are passed on, given in snake_case or camelCase.
    """
    picked: dict[str, Any] = {}
    for name in names:
        for key in (name, _camel(name)):
            if key in settings and settings[key] is not None:
                picked[name] = settings[key]
                break
    return picked


def token_count(value: Any) -> int:
    """A token count as an endpoint reported it; anything odd (a string, a float) counts as 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


ThinkingLevel = Literal["off", "low", "medium", "high"]
THINKING_BUDGETS: Mapping[str, int] = {"low": 2048, "medium": 8192, "high": 24576}
"""Tokens of reasoning per level, for the wire formats that take a budget (Anthropic, Gemini)."""


def thinking_level(settings: Mapping[str, Any]) -> ThinkingLevel | None:
    """``settings.thinkingLevel`` (validated when the session was configured); None when unset."""
    level = settings.get("thinkingLevel", settings.get("thinking_level"))
    if level in ("off", "low", "medium", "high"):
        return cast("ThinkingLevel", level)
    return None


def optional_count(value: Any) -> int | None:
    """A token count the endpoint may leave out: None when it did, else :func:`token_count`."""
    return None if value is None else token_count(value)
