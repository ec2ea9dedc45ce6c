"""The OpenAI Chat Completions provider, for OpenAI and every server that speaks its format.

``POST {base_url}/chat/completions`` with ``stream: true``. What compatible servers (Ollama, vLLM,
llama.cpp, LM Studio) do differently is tolerated: no ``usage``, tool calls without ``id`` (one is
made up) or without ``index``, a tool call arriving whole in one delta, a last chunk with no
choices, no ``[DONE]`` after the finish reason, and a plain JSON answer to a streaming request.

Tool-call arguments are passed on as the text the model produced, even when it is not valid
JSON: the kernel validates them and tells the model what was wrong.

``settings.thinkingLevel`` (``low | medium | high``) is sent as ``reasoning_effort`` (``off``
sends nothing: the model's default). Reasoning that a compatible server streams
(``reasoning_content`` or ``reasoning`` in the delta) is passed on as thought pieces; OpenAI
itself streams none but reports ``reasoning_tokens`` in the usage.
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
    ResourceLinkBlock,
    Role,
    TextBlock,
    ToolCall,
    is_blocks,
)
from tether.protocol.tools import ToolSpec
from tether.protocol.usage import Usage
from tether.providers.base import Completion, ModelRequest, PriceSource
from tether.providers.content import (
    arguments_json,
    flatten_text,
    optional_count,
    pick_settings,
    resource_text,
    thinking_level,
    token_count,
)
from tether.providers.errors import AttemptFailed
from tether.providers.http import HttpProvider, TurnReader, decode_json, index_of, obj
from tether.providers.retry import RetryPolicy
from tether.providers.sse import ServerSentEvent

DEFAULT_BASE_URL = "https://api.openai.com/v1"
SETTINGS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "parallel_tool_calls",
    "reasoning_effort",
)


class OpenAIProvider(HttpProvider):
    name = "openai"
    genai_name = "openai"
    native_output = True  # response_format json_schema

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
        super().__init__(
            url=base_url.rstrip("/") + "/chat/completions",
            headers={"authorization": f"Bearer {api_key}"} if api_key else {},
            client=client,
            api_key=api_key,
            model=model,
            timeout=timeout,
            retry=retry,
        )
        self.prices = PriceSource.of("openai", base_url, DEFAULT_BASE_URL)

    def models_url(self) -> str:
        return self.url.removesuffix("/chat/completions") + "/models"

    def model_names(self, body: Any) -> tuple[str, ...]:
        return tuple(str(model["id"]) for model in body["data"])

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": openai_messages(request.system, request.messages),
        }
        if request.tools:
            body["tools"] = openai_tools(request.tools)
        level = thinking_level(request.settings)
        if level is not None and level != "off":
            body["reasoning_effort"] = level  # an explicit reasoning_effort setting wins
        body.update(pick_settings(request.settings, SETTINGS))
        if request.output is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.output.name, "schema": dict(request.output.schema)},
            }
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    def reader(self) -> ChatCompletionReader:
        return ChatCompletionReader()


# --- canonical → Chat Completions -------------------------------------------------------------


def openai_messages(system: str | None, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The ``messages`` array: the system prompt first, then the history in order."""
    wire: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    wire.extend(_message(message) for message in messages)
    return wire


def openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def _message(message: Message) -> dict[str, Any]:
    if message.role is Role.TOOL:
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": flatten_text(message.content),
        }
    if message.role is Role.ASSISTANT:
        wire: dict[str, Any] = {"role": "assistant", "content": flatten_text(message.content)}
        if message.tool_calls:
            wire["content"] = wire["content"] or None
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        return wire
    if message.role is Role.SYSTEM:
        return {"role": "system", "content": flatten_text(message.content)}
    return {"role": "user", "content": _user_content(message)}


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    content = message.content
    if not is_blocks(content):
        return flatten_text(content)
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ResourceLinkBlock):
            parts.append({"type": "text", "text": resource_text(block)})
        elif isinstance(block, ImageBlock):
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


# --- Chat Completions → canonical -------------------------------------------------------------


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatCompletionReader(TurnReader):
    """Reassembles a streamed chat completion: text pieces, tool calls by index, usage."""

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._fresh_thoughts: list[str] = []
        self._usage: Usage | None = None
        self._finish_reason: str | None = None

    def feed(self, event: ServerSentEvent) -> str | None:
        data = event.data
        if data[:1] != "{" and data.strip() == "[DONE]":  # (a chunk is an object)
            self.done = True
            return None
        chunk = decode_json(data)
        if type(chunk) is not dict:
            return None
        if chunk.get("error"):
            raise AttemptFailed(
                "the endpoint reported an error in the stream", retryable=True, body=data
            )
        usage = chunk.get("usage")
        if usage is not None:
            self._take_usage(usage)
        text = None
        for choice in chunk.get("choices") or ():
            if type(choice) is not dict:
                continue
            index = choice.get("index")  # none (or nonsense) counts as the first
            if type(index) is int and index != 0:
                continue  # only the first choice is asked for
            delta = choice.get("delta")
            if type(delta) is dict:
                piece = delta.get("content")
                if piece and isinstance(piece, str):
                    self._text.append(piece)
                    text = piece
                if "reasoning_content" in delta or "reasoning" in delta:
                    self._take_reasoning(delta)
                calls = delta.get("tool_calls")
                if calls is not None:
                    self._take_calls(calls)
            if choice.get("finish_reason"):
                self._finish_reason = str(choice["finish_reason"])
        return text

    def thoughts(self) -> list[str]:
        fresh, self._fresh_thoughts = self._fresh_thoughts, []
        return fresh

    def _take_reasoning(self, delta: dict[str, Any]) -> None:
        """Reasoning text, as compatible servers stream it: ``reasoning_content`` (DeepSeek,
        vLLM, llama.cpp) or ``reasoning`` (Ollama, OpenRouter)."""
        for key in ("reasoning_content", "reasoning"):
            piece = delta.get(key)
            if isinstance(piece, str) and piece:
                self._reasoning.append(piece)
                self._fresh_thoughts.append(piece)
                return

    def completion(self) -> Completion:
        if not self.done and self._finish_reason is None:
            raise AttemptFailed("the stream ended before the turn was complete", retryable=True)
        return self._completion()

    def whole(self, body: Any) -> Completion:
        if not isinstance(body, dict):
            raise AttemptFailed("the endpoint sent an unexpected answer", retryable=False)
        choices = body.get("choices")
        choice = obj(choices[0]) if isinstance(choices, list) and choices else {}
        message = obj(choice.get("message"))
        content = message.get("content")
        if isinstance(content, str):
            self._text.append(content)
        self._take_reasoning(message)
        self._fresh_thoughts = []
        self._take_calls(message.get("tool_calls"))
        self._take_usage(body.get("usage"))
        self._finish_reason = choice.get("finish_reason")
        return self._completion()

    def _take_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            prompt = token_count(usage.get("prompt_tokens"))
            self._usage = Usage(
                input_tokens=prompt,
                output_tokens=token_count(usage.get("completion_tokens")),
                reasoning_tokens=optional_count(
                    obj(usage.get("completion_tokens_details")).get("reasoning_tokens")
                ),
                cached_tokens=optional_count(
                    obj(usage.get("prompt_tokens_details")).get("cached_tokens")
                ),
                context_tokens=prompt or None,
            )

    def _take_calls(self, deltas: Any) -> None:
        for delta in deltas if isinstance(deltas, list) else ():
            if not isinstance(delta, dict):
                continue
            call = self._calls.setdefault(self._index_of(delta), _PartialCall())
            if delta.get("id") and not call.id:
                call.id = str(delta["id"])
            function = obj(delta.get("function"))
            name = function.get("name")
            if name and name != call.name:
                call.name += name  # some servers repeat the whole name, a few stream it in pieces
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif arguments is not None:  # an object instead of its JSON text
                call.arguments.append(arguments_json(arguments))

    def _index_of(self, delta: dict[str, Any]) -> int:
        index = index_of(delta.get("index"), -1)
        if index >= 0:
            return index
        # No index: the call with this id, a new call when it names a function, else the last one.
        for known, call in self._calls.items():
            if delta.get("id") and call.id == delta["id"]:
                return known
        last = max(self._calls, default=-1)
        starts = bool(delta.get("id") or obj(delta.get("function")).get("name"))
        return last + 1 if starts or last < 0 else last

    def _completion(self) -> Completion:
        try:
            calls = [
                ToolCall(
                    id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                    name=call.name,
                    arguments="".join(call.arguments) or "{}",
                )
                for _, call in sorted(self._calls.items())
            ]
        except ValidationError:
            raise AttemptFailed(
                "the endpoint sent a tool call without a name", retryable=False
            ) from None
        return Completion(
            content="".join(self._text) or None,
            tool_calls=calls,
            usage=self._usage,
            finish_reason=self._finish_reason,
            reasoning="".join(self._reasoning) or None,
        )
