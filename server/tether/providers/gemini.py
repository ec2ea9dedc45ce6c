"""The Gemini provider: the Gemini API's ``generateContent`` over HTTP.

``POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`` for a streamed turn
(``:generateContent`` for :meth:`GeminiProvider.request`), the API key in the
``x-goog-api-key`` header (never in the URL). Roles are ``user`` and ``model``; the system prompt
(with any system messages of the history) is the ``systemInstruction``. Assistant tool calls are
``functionCall`` parts, tool results ``functionResponse`` parts (``{"output": text}``, or
``{"error": text}`` for a failed call) in a user turn, and consecutive turns of one role are
merged. Images are ``inline_data`` parts.

Gemini calls carry no id (newer models may send one, which is kept): each call gets a fresh id
of tether's, and its result is sent back under the call's name, in the order of the calls, which
is how the API matches them. Thought signatures the model attaches to its parts are kept in the
assistant message's ``metadata.thoughtSignatures`` (by tool-call id, ``text`` for the text) and
sent back on the same parts, as the API requires for function calling with thinking models.

``settings.thinkingLevel`` becomes ``generationConfig.thinkingConfig``: a ``thinkingBudget``
(``off`` is a budget of 0, which models that always think refuse) with ``includeThoughts``, so
the thought summaries stream as thought pieces. Usage: ``promptTokenCount`` is the input (cached
tokens included), ``candidatesTokenCount`` plus ``thoughtsTokenCount`` the output.

Finish reasons are given in the canonical words: ``stop``, ``length``, ``tool_calls``,
``content_filter`` (others in lower case, as Gemini names them).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from pydantic import ValidationError

from tether.protocol import ImageBlock, Message, ResourceLinkBlock, Role, TextBlock
from tether.protocol import ToolCall as CanonicalCall
from tether.protocol.messages import MessageContent, is_blocks
from tether.protocol.tools import ToolSpec
from tether.protocol.usage import Usage
from tether.providers import output
from tether.providers.base import Completion, ModelRequest, OutputSpec, PriceSource
from tether.providers.content import (
    THINKING_BUDGETS,
    arguments_json,
    arguments_object,
    flatten_text,
    is_error_result,
    optional_count,
    pick_settings,
    resource_text,
    thinking_level,
    token_count,
)
from tether.providers.errors import AttemptFailed
from tether.providers.http import HttpProvider, TurnReader, decode_json, obj
from tether.providers.retry import RetryPolicy
from tether.providers.sse import ServerSentEvent

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
API_VERSION = "v1beta"
SIGNATURES_KEY = "thoughtSignatures"  # the assistant message's metadata key for them
TEXT_SIGNATURE = "text"  # the signature of the message's text part, under that key
OWN_IDS_KEY = "geminiCallIds"  # metadata flag: the call ids are Gemini's own, sent back as such
CALL_ID_PREFIX = "gemini_"  # ids tether gives Gemini's calls that came without one
GENERATION_SETTINGS = {  # tether's setting -> generationConfig's field
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "max_tokens": "maxOutputTokens",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
}
FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}
RETRYABLE_STATUSES = {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"}
_VERSIONED = re.compile(r"/v\d+(?:alpha|beta)?\d*$")


class GeminiProvider(HttpProvider):
    name = "gemini"
    genai_name = "gcp.gemini"
    native_output = True  # a final function the model must call (tether.providers.output)

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
        root = base_url.rstrip("/")
        super().__init__(
            url=root if _VERSIONED.search(root) else f"{root}/{API_VERSION}",
            headers={"x-goog-api-key": api_key} if api_key else {},
            client=client,
            api_key=api_key,
            model=model,
            timeout=timeout,
            retry=retry,
        )
        self.prices = PriceSource.of("google", base_url, DEFAULT_BASE_URL)

    def model_url(self, model: str, *, stream: bool) -> str:
        """The endpoint of ``model``: ``models/{model}:streamGenerateContent?alt=sse`` or
        ``:generateContent``. A name given as a resource (``models/...``, ``tunedModels/...``)
        is used as it is; every segment is percent-encoded, so a name cannot change the path."""
        resource = model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"
        kind, _, name = resource.partition("/")
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{self.url}/{kind}/{quote(name, safe='')}:{method}"

    def request_url(self, request: ModelRequest) -> str:
        return self.model_url(request.model, stream=True)

    def models_url(self) -> str:
        return f"{self.url}/models?pageSize=1000"

    def model_names(self, body: Any) -> tuple[str, ...]:
        return tuple(str(model["name"]).removeprefix("models/") for model in body["models"])

    async def request(self, request: ModelRequest) -> Completion:
        """The whole turn from ``generateContent``, without streaming it."""
        url = self.model_url(request.model, stream=False)
        async with aclosing(self.turn(url, self.payload(request))) as events:
            async for event in events:
                if isinstance(event, Completion):
                    return event
        raise RuntimeError("the gemini provider ended its turn without a completion")

    def payload(self, request: ModelRequest) -> dict[str, Any]:
        system, contents = gemini_contents(request.system, request.messages)
        body: dict[str, Any] = {"contents": contents}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        declarations = gemini_tools(request.tools)
        if request.output is not None:
            name, description, schema = output.tool_definition(request.output)
            declarations.append(
                {"name": name, "description": description, "parametersJsonSchema": schema}
            )
            # a function call, the final one at the latest
            body["toolConfig"] = {"functionCallingConfig": {"mode": "ANY"}}
        if declarations:
            body["tools"] = [{"functionDeclarations": declarations}]
        config = generation_config(request.settings)
        if config:
            body["generationConfig"] = config
        return body

    def structured_answer(self, completion: Completion, spec: OutputSpec) -> Completion:
        """A call of the final tool is the answer's text."""
        return output.answer_from_tool(completion, spec)

    def reader(self) -> GenerateContentReader:
        return GenerateContentReader()


def generation_config(settings: Any) -> dict[str, Any]:
    """``generationConfig`` from the session's settings (only those Gemini understands)."""
    picked = pick_settings(settings, [*GENERATION_SETTINGS, "stop", "stop_sequences"])
    config = {
        GENERATION_SETTINGS[name]: value
        for name, value in picked.items()
        if name in GENERATION_SETTINGS
    }
    stop = picked.get("stop_sequences", picked.get("stop"))
    if stop is not None:
        config["stopSequences"] = [stop] if isinstance(stop, str) else stop
    level = thinking_level(settings)
    if level == "off":
        config["thinkingConfig"] = {"thinkingBudget": 0}
    elif level is not None:
        config["thinkingConfig"] = {
            "thinkingBudget": THINKING_BUDGETS[level],
            "includeThoughts": True,
        }
    return config


# --- canonical → Gemini -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Asked:
    """A call as the history holds it: what its result is sent back under."""

    name: str
    own_id: str | None  # Gemini's own id of the call, when it gave one
    position: int  # its place among the calls of its message


def gemini_contents(
    system: str | None, messages: Sequence[Message]
) -> tuple[str | None, list[dict[str, Any]]]:
    """The system instruction's text and the ``contents`` array, turns merged by role.

    The results that follow a model turn are sent in the order of its calls (the API matches
    them by name and order), whatever order the history holds them in."""
    systems = [system] if system else []
    asked = _calls_by_id(messages)
    contents: list[dict[str, Any]] = []
    results: list[Message] = []
    for message in [*messages, None]:
        if message is not None and message.role is Role.TOOL:
            results.append(message)
            continue
        results.sort(key=lambda result: _position(asked, result))
        for result in results:
            _add(contents, "user", [_response(result, asked)])
        results = []
        if message is None:
            break
        if message.role is Role.SYSTEM:
            systems.append(flatten_text(message.content))
        elif message.role is Role.ASSISTANT:
            _add(contents, "model", _model_parts(message))
        else:
            _add(contents, "user", _content_parts(message.content))
    return "\n\n".join(systems) or None, contents


def _calls_by_id(messages: Sequence[Message]) -> dict[str, _Asked]:
    return {
        call.id: _Asked(call.name, _own_id(message, call.id), position)
        for message in messages
        if message.role is Role.ASSISTANT
        for position, call in enumerate(message.tool_calls or ())
    }


def _position(asked: dict[str, _Asked], result: Message) -> int:
    call = asked.get(result.tool_call_id or "")
    return call.position if call is not None else len(asked)


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Append ``parts`` as a turn of ``role``, merged into the last turn when it has that role."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def gemini_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """``functionDeclarations``, with each tool's JSON Schema as ``parametersJsonSchema``."""
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "parametersJsonSchema": tool.parameters,
        }
        for tool in tools
    ]


def _response(result: Message, asked: dict[str, _Asked]) -> dict[str, Any]:
    """A tool result as a ``functionResponse`` part: under its call's name (the message's own
    ``name`` when the call is not in the history)."""
    call = asked.get(result.tool_call_id or "")
    key = "error" if is_error_result(result) else "output"
    response: dict[str, Any] = {
        "name": call.name if call is not None else result.name or "unknown",
        "response": {key: flatten_text(result.content)},
    }
    if call is not None and call.own_id:
        response["id"] = call.own_id
    return {"functionResponse": response}


def _model_parts(message: Message) -> list[dict[str, Any]]:
    signatures = _signatures(message)
    parts: list[dict[str, Any]] = []
    text = flatten_text(message.content)
    if text:
        parts.append(_signed({"text": text}, signatures.get(TEXT_SIGNATURE)))
    for call in message.tool_calls or ():
        function: dict[str, Any] = {"name": call.name, "args": arguments_object(call.arguments)}
        own_id = _own_id(message, call.id)
        if own_id:
            function["id"] = own_id
        parts.append(_signed({"functionCall": function}, signatures.get(call.id)))
    return parts


def _signed(part: dict[str, Any], signature: str | None) -> dict[str, Any]:
    if signature:
        part["thoughtSignature"] = signature
    return part


def _signatures(message: Message) -> dict[str, str]:
    kept = (message.metadata or {}).get(SIGNATURES_KEY)
    if not isinstance(kept, dict):
        return {}
    return {str(key): value for key, value in kept.items() if isinstance(value, str)}


def _own_id(message: Message, call_id: str) -> str | None:
    """The call's id when Gemini gave it (the message's metadata says so): it is sent back."""
    return call_id if (message.metadata or {}).get(OWN_IDS_KEY) else None


def _content_parts(content: MessageContent | None) -> list[dict[str, Any]]:
    if not is_blocks(content):  # text, or any other JSON value sent as its JSON text
        text = flatten_text(content)
        return [{"text": text}] if text else []
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append({"text": block.text})
        elif isinstance(block, ResourceLinkBlock):
            parts.append({"text": resource_text(block)})
        elif isinstance(block, ImageBlock):
            parts.append({"inline_data": {"mime_type": block.mime_type, "data": block.data}})
    return parts


# --- Gemini → canonical -----------------------------------------------------------------------


@dataclass
class _Call:
    name: str
    args: Any
    own_id: str | None
    signature: str | None


@dataclass
class _Turn:
    text: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    text_signature: str | None = None


class GenerateContentReader(TurnReader):
    """Reads ``GenerateContentResponse`` chunks: text, thoughts, function calls, usage.

    The stream has no end marker: the turn is complete once a candidate gave its
    ``finishReason`` (or the prompt was blocked)."""

    def __init__(self) -> None:
        self._turn = _Turn()
        self._fresh_thoughts: list[str] = []
        self._usage: Usage | None = None
        self._finish_reason: str | None = None

    def feed(self, event: ServerSentEvent) -> str | None:
        chunk = decode_json(event.data)
        return self._chunk(chunk) if isinstance(chunk, dict) else None

    def thoughts(self) -> list[str]:
        fresh, self._fresh_thoughts = self._fresh_thoughts, []
        return fresh

    def completion(self) -> Completion:
        if self._finish_reason is None:
            raise AttemptFailed("the stream ended before the turn was complete", retryable=True)
        return self._completion()

    def whole(self, body: Any) -> Completion:
        chunks = body if isinstance(body, list) else [body]  # a stream read without ``alt=sse``
        for chunk in chunks:
            if not isinstance(chunk, dict):
                raise AttemptFailed("the endpoint sent an unexpected answer", retryable=False)
            self._chunk(chunk)
        self._fresh_thoughts = []
        return self._completion()

    def _chunk(self, chunk: dict[str, Any]) -> str | None:
        error = chunk.get("error")
        if isinstance(error, dict):
            status = str(error.get("status") or "")
            code = error.get("code")
            raise AttemptFailed(
                f"the endpoint reported {status or code or 'an error'} in the stream",
                retryable=status in RETRYABLE_STATUSES
                or (isinstance(code, int) and (code == 429 or code >= 500)),
                body=orjson.dumps(chunk).decode(),
            )
        self._take_usage(chunk.get("usageMetadata"))
        blocked = obj(chunk.get("promptFeedback")).get("blockReason")
        if blocked:
            self._finish_reason = "content_filter"
        candidates = chunk.get("candidates")
        candidate = obj(candidates[0]) if isinstance(candidates, list) and candidates else {}
        text = "".join(
            self._part(obj(part)) for part in obj(candidate.get("content")).get("parts") or ()
        )
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self._finish_reason = FINISH_REASONS.get(reason, reason.lower())
        return text or None

    def _part(self, part: dict[str, Any]) -> str:
        """Takes one part; returns its answer text (empty for anything else)."""
        signature = part.get("thoughtSignature")
        signature = signature if isinstance(signature, str) and signature else None
        call = part.get("functionCall")
        if isinstance(call, dict):
            own_id = call.get("id")
            self._turn.calls.append(
                _Call(
                    name=str(call.get("name") or ""),
                    args=call.get("args"),
                    own_id=own_id if isinstance(own_id, str) and own_id else None,
                    signature=signature,
                )
            )
            return ""
        text = part.get("text")
        if not isinstance(text, str):
            return ""
        if part.get("thought") is True:
            if text:
                self._turn.thoughts.append(text)
                self._fresh_thoughts.append(text)
            return ""
        if signature:
            self._turn.text_signature = signature
        self._turn.text.append(text)
        return text

    def _take_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        prompt = token_count(usage.get("promptTokenCount")) + token_count(
            usage.get("toolUsePromptTokenCount")
        )
        thoughts = optional_count(usage.get("thoughtsTokenCount"))
        self._usage = Usage(
            input_tokens=prompt,
            output_tokens=token_count(usage.get("candidatesTokenCount")) + (thoughts or 0),
            reasoning_tokens=thoughts,
            cached_tokens=optional_count(usage.get("cachedContentTokenCount")),
            context_tokens=prompt or None,
        )

    def _completion(self) -> Completion:
        turn = self._turn
        signatures: dict[str, str] = {}
        if turn.text_signature:
            signatures[TEXT_SIGNATURE] = turn.text_signature
        calls: list[CanonicalCall] = []
        own_ids = False
        try:
            for call in turn.calls:
                call_id = call.own_id or f"{CALL_ID_PREFIX}{uuid.uuid4().hex[:24]}"
                own_ids = own_ids or call.own_id is not None
                arguments = arguments_json(call.args if isinstance(call.args, dict) else {})
                calls.append(CanonicalCall(id=call_id, name=call.name, arguments=arguments))
                if call.signature:
                    signatures[call_id] = call.signature
        except ValidationError:
            raise AttemptFailed(
                "the endpoint sent a function call without a name", retryable=False
            ) from None
        metadata: dict[str, Any] = {}
        if signatures:
            metadata[SIGNATURES_KEY] = signatures
        if own_ids:
            metadata[OWN_IDS_KEY] = True
        reason = self._finish_reason
        if calls and reason == "stop":
            reason = "tool_calls"
        return Completion(
            content="".join(turn.text) or None,
            tool_calls=calls,
            usage=self._usage,
            finish_reason=reason,
            reasoning="".join(turn.thoughts) or None,
            metadata=metadata or None,
        )
