"""The Anthropic Messages provider: ``POST {base_url}/v1/messages`` with ``stream: true``.

The system prompt (with any system messages of the history) goes top-level. Assistant tool calls
become ``tool_use`` blocks, tool messages ``tool_result`` blocks in a user message (consecutive
results share one), and consecutive messages of one role are merged, as the API wants turns to
alternate. Streamed tool input is passed on as the JSON text the model produced, even when it is
not valid JSON: the kernel validates it and tells the model what was wrong.

Finish reasons are given in the canonical words: ``stop``, ``length``, ``tool_calls``,
``content_filter`` (others as Anthropic names them).

``settings.thinkingLevel`` (``low | medium | high``) turns on extended thinking with a token
budget (see :data:`~tether.providers.content.THINKING_BUDGETS`). The thinking streams as thought
pieces; its blocks (``thinking`` with their ``signature``, ``redacted_thinking``) come back in the
completion's ``metadata.thinking``, which the kernel keeps on the assistant message, and are sent
back first in that message on later turns, as the API requires after tool use.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from tether.protocol import (
    ImageBlock,
    Message,
    MessageContent,
    ResourceLinkBlock,
    Role,
    TextBlock,
    ToolCall,
    is_blocks,
)
from tether.protocol.tools import ToolSpec
from tether.protocol.usage import Usage
from tether.providers import output
from tether.providers.base import Completion, ModelRequest, OutputSpec, PriceSource
from tether.providers.content import (
    THINKING_BUDGETS,
    arguments_json,
    arguments_object,
    flatten_text,
    image_placeholder,
    is_error_result,
    optional_count,
    pick_settings,
    resource_text,
    thinking_level,
    token_count,
)
from tether.providers.errors import AttemptFailed
from tether.providers.http import HttpProvider, TurnReader, decode_json, index_of, obj
from tether.providers.prepare import merge_runs
from tether.providers.retry import RetryPolicy
from tether.providers.sse import ServerSentEvent

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
SETTINGS = ("temperature", "top_p", "top_k", "stop_sequences")
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
RETRYABLE_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
THINKING_KEY = "thinking"  # the assistant message's metadata key that keeps thinking blocks


class AnthropicProvider(HttpProvider):
    name = "anthropic"
    genai_name = "anthropic"
    native_output = True  # a final tool the model must call (tether.providers.output)

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        super().__init__(
            url=base_url.rstrip("/") + "/v1/messages",
            headers=headers,
            client=client,
            api_key=api_key,
            model=model,
            timeout=timeout,
            retry=retry,
        )
        self.prices = PriceSource.of("anthropic", base_url, DEFAULT_BASE_URL)

    def models_url(self) -> str:
        return self.url.removesuffix("/messages") + "/models"

    def model_names(self, body: Any) -> tuple[str, ...]:
        return tuple(str(model["id"]) for model in body["data"])

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        system, messages = anthropic_messages(request.system, request.messages)
        settings = request.settings
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": pick_settings(settings, ["max_tokens"]).get(
                "max_tokens", DEFAULT_MAX_TOKENS
            ),
            "messages": messages,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = anthropic_tools(request.tools)
        if request.output is not None:
            name, description, schema = output.tool_definition(request.output)
            tool = {"name": name, "description": description, "input_schema": schema}
            body["tools"] = [*body.get("tools", ()), tool]
            body["tool_choice"] = {"type": "any"}  # a tool call, the final one at the latest
        stop = pick_settings(settings, ["stop"]).get("stop")
        if stop is not None:
            body["stop_sequences"] = [stop] if isinstance(stop, str) else stop
        body.update(pick_settings(settings, SETTINGS))
        _add_thinking(body, thinking_level(settings))
        body["stream"] = True
        if request.output is not None and "thinking" in body:
            body["tool_choice"] = {"type": "auto"}  # the API forces no tool while it thinks
        return body

    def reader(self) -> MessagesReader:
        return MessagesReader()

    def structured_answer(self, completion: Completion, spec: OutputSpec) -> Completion:
        """A call of the final tool is the answer's text."""
        return output.answer_from_tool(completion, spec)


def _add_thinking(body: dict[str, Any], level: str | None) -> None:
    """Extended thinking for ``low | medium | high``: a token budget, with ``max_tokens`` raised
    so the answer keeps its room (the API wants ``max_tokens`` above the budget). Thinking does
    not go with a changed ``temperature`` or ``top_k``: those are left out."""
    if level is None or level == "off":
        return
    budget = THINKING_BUDGETS[level]
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if body["max_tokens"] <= budget:
        body["max_tokens"] = budget + body["max_tokens"]
    body.pop("temperature", None)
    body.pop("top_k", None)


# --- canonical → Messages ---------------------------------------------------------------------


def anthropic_messages(
    system: str | None, messages: Sequence[Message]
) -> tuple[str | None, list[dict[str, Any]]]:
    """The top-level system text and the alternating ``messages`` array."""
    systems = [system] if system else []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            systems.append(flatten_text(message.content))
            continue
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        blocks = _blocks(message)
        if blocks:
            turns.append({"role": role, "content": blocks})
    # Tool results are user turns on this wire: turns are merged here, after the mapping.
    return "\n\n".join(systems) or None, merge_runs(turns, _role, _merge_turns)


def _role(turn: dict[str, Any]) -> str:
    return str(turn["role"])


def _merge_turns(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    return {"role": first["role"], "content": [*first["content"], *second["content"]]}


def anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role is Role.TOOL:
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": _result_content(message.content),
        }
        if is_error_result(message):
            result["is_error"] = True
        return [result]
    if message.role is Role.ASSISTANT:
        blocks = thinking_blocks(message)
        blocks += _content_blocks(message.content, images=False)
        blocks.extend(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": arguments_object(call.arguments),
            }
            for call in message.tool_calls or ()
        )
        return blocks
    return _content_blocks(message.content, images=True)


def thinking_blocks(message: Message) -> list[dict[str, Any]]:
    """The thinking blocks kept in an assistant message's ``metadata.thinking``, as they came:
    the API wants them back, signatures intact, before the tool calls they led to."""
    kept = (message.metadata or {}).get(THINKING_KEY)
    if not isinstance(kept, list):
        return []
    return [
        block
        for block in kept
        if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
    ]


def _result_content(content: MessageContent | None) -> str | list[dict[str, Any]]:
    if not is_blocks(content):
        return flatten_text(content)
    return _content_blocks(content, images=True)


def _content_blocks(content: MessageContent | None, *, images: bool) -> list[dict[str, Any]]:
    if not is_blocks(content):
        text = flatten_text(content)
        return [{"type": "text", "text": text}] if text else []
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            if block.text:  # the API refuses empty text blocks
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ResourceLinkBlock):
            blocks.append({"type": "text", "text": resource_text(block)})
        elif isinstance(block, ImageBlock) and images:
            source = {"type": "base64", "media_type": block.mime_type, "data": block.data}
            blocks.append({"type": "image", "source": source})
        elif isinstance(block, ImageBlock):
            blocks.append({"type": "text", "text": image_placeholder(block)})
    return blocks


# --- Messages → canonical ---------------------------------------------------------------------


@dataclass
class _ToolUse:
    id: str
    name: str
    start_input: Any
    pieces: list[str] = field(default_factory=list)

    def arguments(self) -> str:
        if self.pieces:
            return "".join(self.pieces)
        return arguments_json(self.start_input or {})


class MessagesReader(TurnReader):
    """Reads the Messages event stream: text deltas, ``tool_use`` input deltas, usage."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._tools: dict[int, _ToolUse] = {}
        self._thinking: dict[int, dict[str, Any]] = {}  # index -> thinking block, as it grows
        self._fresh_thoughts: list[str] = []
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._cached_tokens: int | None = None
        self._stop_reason: str | None = None

    def feed(self, event: ServerSentEvent) -> str | None:
        data = decode_json(event.data)
        if not isinstance(data, dict):
            return None
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_start":
            self._start(data)
        elif kind == "message_start":
            self._take_usage(obj(data.get("message")).get("usage"))
        elif kind == "message_delta":
            self._stop_reason = obj(data.get("delta")).get("stop_reason") or self._stop_reason
            self._take_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = obj(data.get("error"))
            error_type = str(error.get("type") or "error")
            raise AttemptFailed(
                f"the endpoint reported {error_type} in the stream",
                retryable=error_type in RETRYABLE_ERRORS,
                body=event.data,
            )
        return None

    def thoughts(self) -> list[str]:
        fresh, self._fresh_thoughts = self._fresh_thoughts, []
        return fresh

    def completion(self) -> Completion:
        if not self.done:
            raise AttemptFailed("the stream ended before the turn was complete", retryable=True)
        return self._completion()

    def whole(self, body: Any) -> Completion:
        if not isinstance(body, dict):
            raise AttemptFailed("the endpoint sent an unexpected answer", retryable=False)
        for index, block in enumerate(body.get("content") or ()):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                self._text.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                self._tools[index] = _ToolUse(
                    str(block.get("id") or ""), str(block.get("name") or ""), block.get("input")
                )
            elif block.get("type") in ("thinking", "redacted_thinking"):
                self._thinking[index] = dict(block)
        self._take_usage(body.get("usage"))
        self._stop_reason = body.get("stop_reason")
        return self._completion()

    def _start(self, data: dict[str, Any]) -> None:
        block = obj(data.get("content_block"))
        index = index_of(data.get("index"), len(self._tools) + len(self._thinking))
        if block.get("type") == "tool_use":
            self._tools[index] = _ToolUse(
                str(block.get("id") or ""), str(block.get("name") or ""), block.get("input")
            )
        elif block.get("type") in ("thinking", "redacted_thinking"):
            self._thinking[index] = dict(block)
            if isinstance(block.get("thinking"), str) and block["thinking"]:
                self._fresh_thoughts.append(block["thinking"])

    def _delta(self, data: dict[str, Any]) -> str | None:
        delta = obj(data.get("delta"))
        if delta.get("type") == "text_delta":
            text = str(delta.get("text") or "")
            self._text.append(text)
            return text or None
        index = index_of(data.get("index"), -1)
        if delta.get("type") == "input_json_delta":
            tool = self._tools.get(index)
            if tool is not None:
                tool.pieces.append(str(delta.get("partial_json") or ""))
        elif delta.get("type") in ("thinking_delta", "signature_delta"):
            self._think(index, delta)
        return None  # thinking is not part of the answer

    def _think(self, index: int, delta: dict[str, Any]) -> None:
        block = self._thinking.setdefault(index, {"type": "thinking", "thinking": ""})
        if delta.get("type") == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(
                delta.get("signature") or ""
            )
            return
        piece = str(delta.get("thinking") or "")
        if piece:
            block["thinking"] = str(block.get("thinking") or "") + piece
            self._fresh_thoughts.append(piece)

    def _take_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if usage.get("cache_read_input_tokens") is not None:
            self._cached_tokens = optional_count(usage["cache_read_input_tokens"])
        if usage.get("input_tokens") is not None:
            self._input_tokens = sum(
                token_count(usage.get(key))
                for key in (
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                )
            )
        if usage.get("output_tokens") is not None:
            self._output_tokens = token_count(usage["output_tokens"])

    def _completion(self) -> Completion:
        usage = None
        if self._input_tokens is not None or self._output_tokens is not None:
            usage = Usage(
                input_tokens=self._input_tokens or 0,
                output_tokens=self._output_tokens or 0,
                cached_tokens=self._cached_tokens,
                context_tokens=self._input_tokens or None,
            )
        try:
            calls = [
                ToolCall(
                    id=tool.id or f"toolu_{uuid.uuid4().hex[:24]}",
                    name=tool.name,
                    arguments=tool.arguments(),
                )
                for _, tool in sorted(self._tools.items())
            ]
        except ValidationError:
            raise AttemptFailed(
                "the endpoint sent a tool call without a name", retryable=False
            ) from None
        reason = self._stop_reason
        thinking = [block for _, block in sorted(self._thinking.items())]
        reasoning = "".join(str(block.get("thinking") or "") for block in thinking)
        return Completion(
            content="".join(self._text) or None,
            tool_calls=calls,
            usage=usage,
            finish_reason=FINISH_REASONS.get(reason, reason) if reason else None,
            reasoning=reasoning or None,
            metadata={THINKING_KEY: thinking} if thinking else None,
        )
