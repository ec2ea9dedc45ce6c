"""Preparing a request for what a provider can take (the rules of ``prepare_messages_for_chat``).

A provider declares its capabilities (:class:`Capabilities`, a class attribute); before its
wire mapping runs, :func:`prepare` rewrites the canonical request so it holds nothing the
provider cannot take:

- **no tools**: no tool specs are offered; an assistant's tool calls become a line of its text
  each, and tool results are folded, as text, into the next user message (a user message of
  their own when none follows before the next assistant turn);
- **no system messages**: the system prompt, and the history's system messages, go in front of
  the first user message (one of its own when the history has none);
- **alternating turns**: consecutive messages of one role are merged into one (their text joined
  by a blank line, their blocks and tool calls kept in order); tool results are never merged, as
  each answers one call.

The rules never change the session: only what one request carries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from tether.protocol import (
    ContentBlock,
    Message,
    MessageContent,
    Role,
    TextBlock,
    ToolCall,
    is_blocks,
)
from tether.providers.base import Capabilities, ModelRequest
from tether.providers.content import flatten_text

T = TypeVar("T")
PARAGRAPH = "\n\n"


def prepare(request: ModelRequest, capabilities: Capabilities) -> ModelRequest:
    """``request`` as a provider with ``capabilities`` can take it (itself when it can as is)."""
    messages: Sequence[Message] = request.messages
    system = request.system
    tools = request.tools
    if not capabilities.tools:
        messages = fold_tool_results(messages)
        tools = ()
    if not capabilities.system:
        messages = embed_system(system, messages)
        system = None
    if capabilities.alternating:
        messages = merge_consecutive(messages)
    if messages is request.messages and system is request.system and tools is request.tools:
        return request
    return dataclasses.replace(request, messages=messages, system=system, tools=tools)


# --- merging --------------------------------------------------------------------------------


def merge_runs(
    items: Iterable[T], key: Callable[[T], Hashable], merge: Callable[[T, T], T]
) -> list[T]:
    """Consecutive items of one ``key`` merged into one (left to right); ``None`` as a key means
    "never merged". The one rule behind every provider that wants alternating turns."""
    merged: list[T] = []
    last_key: Hashable = None
    for item in items:
        item_key = key(item)
        if merged and item_key is not None and item_key == last_key:
            merged[-1] = merge(merged[-1], item)
        else:
            merged.append(item)
        last_key = item_key
    return merged


def merge_consecutive(messages: Sequence[Message]) -> list[Message]:
    """Consecutive user, assistant or system messages merged; tool results kept apart."""
    return merge_runs(messages, _merge_key, _merge_messages)


def _merge_key(message: Message) -> Role | None:
    return None if message.role is Role.TOOL else message.role


def _merge_messages(first: Message, second: Message) -> Message:
    calls = [*(first.tool_calls or ()), *(second.tool_calls or ())]
    return first.model_copy(
        update={
            "content": join_content(first.content, second.content),
            "tool_calls": calls or None,
        }
    )


def join_content(
    first: MessageContent | None, second: MessageContent | None
) -> MessageContent | None:
    """Two contents as one: text joined by a blank line; blocks (either side) kept as blocks."""
    if first is None or first == "" or first == []:
        return second
    if second is None or second == "" or second == []:
        return first
    if isinstance(first, str) and isinstance(second, str):
        return first + PARAGRAPH + second
    if is_blocks(first) or is_blocks(second):
        return [*_as_blocks(first), *_as_blocks(second)]
    return flatten_text(first) + PARAGRAPH + flatten_text(second)


def _as_blocks(content: MessageContent | None) -> list[ContentBlock]:
    if is_blocks(content):
        return list(content)
    return [TextBlock(text=flatten_text(content))]


# --- tools ------------------------------------------------------------------------------------


def call_text(call: ToolCall) -> str:
    """An assistant's tool call as a line of its text."""
    return f"[called tool {call.name} with {call.arguments or '{}'}]"


def result_text(message: Message, names: dict[str, str]) -> str:
    """A tool result as text the model reads in the next user message."""
    name = message.name or names.get(message.tool_call_id or "", "a tool")
    outcome = "failed" if message.is_error else "returned"
    return f"[tool {name} {outcome}:]\n{flatten_text(message.content)}"


def fold_tool_results(messages: Sequence[Message]) -> list[Message]:
    """Tool calls as assistant text, tool results as text in front of the next user message."""
    names = {c.id: c.name for m in messages for c in m.tool_calls or ()}
    folded: list[Message] = []
    pending: list[str] = []  # results waiting for the next user message
    for message in messages:
        if message.role is Role.TOOL:
            pending.append(result_text(message, names))
            continue
        if pending:
            if message.role is Role.USER:
                message = _with_prefix(message, PARAGRAPH.join(pending))
            else:
                folded.append(_user(PARAGRAPH.join(pending), message))
            pending = []
        if message.tool_calls:
            text = "\n".join(call_text(call) for call in message.tool_calls)
            content = join_content(message.content, text)
            message = message.model_copy(update={"content": content, "tool_calls": None})
        folded.append(message)
    if pending:
        folded.append(_user(PARAGRAPH.join(pending), folded[-1] if folded else None))
    return folded


# --- system -----------------------------------------------------------------------------------


def embed_system(system: str | None, messages: Sequence[Message]) -> list[Message]:
    """The system prompt and the history's system messages in front of the first user
    message (a user message of its own when there is none)."""
    parts = [system] if system else []
    parts += [flatten_text(m.content) for m in messages if m.role is Role.SYSTEM]
    rest = [m for m in messages if m.role is not Role.SYSTEM]
    if not parts:
        return rest
    text = PARAGRAPH.join(part for part in parts if part)
    for index, message in enumerate(rest):
        if message.role is Role.USER:
            return [*rest[:index], _with_prefix(message, text), *rest[index + 1 :]]
    return [_user(text, rest[0] if rest else None), *rest]


# --- helpers ----------------------------------------------------------------------------------


def _with_prefix(message: Message, text: str) -> Message:
    return message.model_copy(update={"content": join_content(text, message.content)})


def _user(text: str, near: Message | None) -> Message:
    """A user message made for the request, with the id and time of the message it stands by."""
    if near is None:
        return Message.model_validate(
            {"role": "user", "content": text, "id": "prepared", "createdAt": "1970-01-01T00:00:00Z"}
        )
    return Message(
        role=Role.USER, content=text, id=f"{near.id}-prepared", created_at=near.created_at
    )
