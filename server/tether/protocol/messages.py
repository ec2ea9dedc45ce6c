"""The canonical message model: one shape for the wire, the stores and the providers."""

from __future__ import annotations

import binascii
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeGuard

import orjson
from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    field_validator,
    model_validator,
)

from tether.protocol.base import UtcDatetime, WireModel
from tether.protocol.limits import shallow_json

# The message metadata the kernel writes, for the faces to replay a session as it was seen:
TOOL_KINDS_KEY = "toolKinds"  # an assistant message: the kind of each tool it called, by call id
USAGE_KEY = "usage"  # an assistant message: the tokens its model call used (a Usage)
CANCELLED_KEY = (
    "cancelled"  # an assistant message: true, the text an answer streamed until cancelled
)
STOP_REASON_KEY = "stopReason"  # an answer the model cut short: max_tokens or refusal
DIFF_KEY = "diff"  # a tool message: the unified diff of what an edit changed
HOOK_KEY = "hook"  # a message a hook's answer added: the event ("stop", "user_prompt_submit"...)
REASONING_KEY = "reasoning"  # an assistant message: the reasoning the model streamed before it
MAX_REASONING_CHARS = 100_000
"""The most reasoning kept on one message: longer reasoning keeps its start and its end, with a
line saying how much was left out between them."""


def kept_reasoning(text: str) -> str:
    """``text`` as an assistant message's ``metadata.reasoning`` keeps it (within
    :data:`MAX_REASONING_CHARS`)."""
    if len(text) <= MAX_REASONING_CHARS:
        return text
    half = MAX_REASONING_CHARS // 2
    left_out = len(text) - 2 * half
    gap = f"\n\n[... {left_out} characters of reasoning left out ...]\n\n"
    return f"{text[:half]}{gap}{text[-half:]}"


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


_ROLE_ALIASES = {"model": Role.ASSISTANT, "function": Role.TOOL}


def _accept_role_alias(value: Any) -> Any:
    return _ROLE_ALIASES.get(value, value) if isinstance(value, str) else value


RoleField = Annotated[Role, BeforeValidator(_accept_role_alias)]


class TextBlock(WireModel):
    type: Literal["text"] = "text"
    text: str


class ImageBlock(WireModel):
    type: Literal["image"] = "image"
    mime_type: str = Field(pattern=r"^image/[\w.+-]+$")
    data: str = Field(description="base64-encoded image bytes")

    @field_validator("data")
    @classmethod
    def _must_be_base64(cls, value: str) -> str:
        try:
            binascii.a2b_base64(value, strict_mode=True)
        except binascii.Error as exc:
            raise ValueError(f"not valid base64: {exc}") from None
        return value


class ResourceLinkBlock(WireModel):
    type: Literal["resource_link"] = "resource_link"
    uri: str = Field(min_length=1)
    name: str | None = None


ContentBlock = Annotated[TextBlock | ImageBlock | ResourceLinkBlock, Field(discriminator="type")]
Content = str | list[ContentBlock]
"""What a prompt holds: text, or content blocks."""

_BLOCK_TYPES = frozenset({"text", "image", "resource_link"})
_BLOCK_MODELS = (TextBlock, ImageBlock, ResourceLinkBlock)


def _content_kind(value: Any) -> str:
    """Which reading of a message's content applies: ``text`` (a string), ``blocks`` (a list
    whose every item is, or claims to be, a content block: validated as blocks, so a broken block
    is an error, not JSON), else ``json`` (any other JSON value, kept as it is)."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, list) and all(_claims_block(item) for item in value):
        return "blocks"
    return "json"


def _claims_block(item: Any) -> bool:
    if isinstance(item, _BLOCK_MODELS):
        return True
    return isinstance(item, dict) and item.get("type") in _BLOCK_TYPES


MessageContent = Annotated[
    Annotated[str, Tag("text")]
    | Annotated[list[ContentBlock], Tag("blocks")]
    | Annotated[JsonValue, BeforeValidator(shallow_json), Tag("json")],
    Discriminator(_content_kind),
]
"""What a message holds: text, content blocks, or any other JSON value (an object, a number, a
list...; within ``maxJsonDepth``), which is kept as it is and sent to models as its JSON text."""


def is_blocks(content: object) -> TypeGuard[list[TextBlock | ImageBlock | ResourceLinkBlock]]:
    """Whether validated content is a list of content blocks (an empty list counts)."""
    return isinstance(content, list) and all(isinstance(item, _BLOCK_MODELS) for item in content)


class ToolCall(WireModel):
    """A tool call as the model asked for it, in the flat canonical form.

    The nested provider form ``{id, type: "function", function: {name, arguments}}`` is accepted on
    input, and ``arguments`` may be given as an object, which is encoded to the JSON string form.
    """

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str = Field(description="the JSON text of the arguments, as the model produced it")

    @model_validator(mode="before")
    @classmethod
    def _flatten_provider_form(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("function"), dict):
            function = data["function"]
            return {"id": data.get("id"), **function}
        return data

    @field_validator("arguments", mode="before")
    @classmethod
    def _encode_object_arguments(cls, value: Any) -> Any:
        if isinstance(value, dict):
            try:
                return orjson.dumps(value).decode()
            except TypeError as exc:
                raise ValueError(f"arguments cannot be encoded as JSON: {exc}") from None
        return value


def _no_calls_is_none(value: Any) -> Any:
    return None if value == [] else value


class CompactedRange(WireModel):
    """The messages a compaction summary stands for: the session's history from ``firstId`` to
    ``lastId`` (in the order the model sees it), ``count`` messages."""

    first_id: str = Field(min_length=1)
    last_id: str = Field(min_length=1)
    count: int = Field(ge=1)


class _MessageFields(WireModel):
    role: RoleField
    content: MessageContent | None = None
    tool_calls: Annotated[list[ToolCall] | None, BeforeValidator(_no_calls_is_none)] = None
    tool_call_id: str | None = None
    is_error: bool | None = Field(default=None, description="a tool message: the call failed")
    name: str | None = Field(default=None, description="a tool message: the tool's name")
    author: str | None = Field(default=None, description="the agent that wrote it (agentId)")
    metadata: Annotated[dict[str, Any] | None, BeforeValidator(shallow_json)] = Field(
        default=None,
        description=(
            "free-form; on the messages a run writes, what a client needs to show it again "
            "(an assistant message's reasoning, toolKinds, usage, cancelled, stopReason; a tool "
            "message's diff) and a provider's own keys (thinking, thoughtSignatures)"
        ),
    )
    kind: Literal["compaction"] | None = Field(
        default=None,
        description="compaction: a summary sent to the model in place of the messages it replaces",
    )
    replaces: CompactedRange | None = Field(
        default=None, description="a compaction: the messages its summary stands for"
    )
    output: Annotated[JsonValue | None, BeforeValidator(shallow_json)] = Field(
        default=None, description="a tool message: the structured result beside its text"
    )


class MessageInput(_MessageFields):
    """A message as a client appends it; the server fills in ``id`` and ``createdAt``."""

    @model_validator(mode="after")
    def _check_role_fields(self) -> MessageInput:
        if self.role is Role.TOOL and not self.tool_call_id:
            raise ValueError("a tool message needs toolCallId (the call it answers)")
        if self.role is not Role.TOOL and self.tool_call_id is not None:
            raise ValueError("only a tool message carries toolCallId")
        if self.tool_calls and self.role is not Role.ASSISTANT:
            raise ValueError("only an assistant message carries toolCalls")
        if self.output is not None and self.role is not Role.TOOL:
            raise ValueError("only a tool message carries output")
        if self.content is None and not self.tool_calls:
            raise ValueError("content is required unless an assistant message calls tools")
        if (self.kind == "compaction") != (self.replaces is not None):
            raise ValueError("a compaction message (kind) and its range (replaces) go together")
        if self.kind == "compaction" and self.role is not Role.USER:
            raise ValueError("a compaction message has the role user")
        return self


class Message(_MessageFields):
    """A message in a session."""

    id: str
    run_id: str | None = None
    created_at: UtcDatetime
