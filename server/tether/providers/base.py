"""The provider contract: canonical messages in, streamed text and a completion out.

A provider owns its wire format, auth, base URL and retries; nothing outside ``providers/`` knows
any of them. It is given a shared ``httpx.AsyncClient`` (except the scripted one, which needs
none) and raises :class:`tether.protocol.ProviderError` once it has given up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.protocol import Message, ToolCall
from tether.protocol.tools import ToolSpec
from tether.protocol.usage import Usage


@dataclass(frozen=True, kw_only=True)
class OutputSpec:
    """The JSON Schema the final answer must satisfy, for a provider that can enforce it."""

    name: str
    schema: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One call to the model: what it is told, what it has seen, what it may call."""

    model: str
    system: str | None = None
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)  # temperature, max_tokens, ...
    output: OutputSpec | None = None  # only for a provider with native_output


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a provider's endpoint takes; :mod:`tether.providers.prepare` rewrites a request
    for one that lacks something."""

    tools: bool = True  # tool specs, assistant tool calls and tool results
    system: bool = True  # a system prompt, and system messages
    alternating: bool = False  # only alternating turns: consecutive same-role messages merged


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


class TextDelta(_Event):
    """A piece of the assistant's text, as it streams in."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


class ThoughtDelta(_Event):
    """A piece of the model's reasoning, as it streams in (not part of the answer)."""

    kind: Literal["thought_delta"] = "thought_delta"
    text: str


class Completion(_Event):
    """The whole assistant turn: the last event of every stream.

    ``metadata`` is what the provider needs kept on the assistant message and sent back with it
    on later turns (Anthropic thinking blocks with their signatures, Gemini thought signatures);
    the kernel stores it as the message's ``metadata``.
    """

    kind: Literal["completion"] = "completion"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    reasoning: str | None = None  # the reasoning text that streamed, if any
    metadata: dict[str, Any] | None = None


ProviderEvent = Annotated[TextDelta | ThoughtDelta | Completion, Field(discriminator="kind")]
StreamEvent = TextDelta | ThoughtDelta | Completion


@dataclass(frozen=True)
class PriceSource:
    """Where the price table (:mod:`tether.providers.prices`) looks a model up: by the
    provider's id when tether talks to the provider's own endpoint, else by the endpoint's URL
    (a proxy or a compatible server the table knows, such as OpenRouter; a local one has no
    price)."""

    provider_id: str | None = None
    api_url: str | None = None

    @classmethod
    def of(cls, provider_id: str, base_url: str, default_url: str) -> PriceSource:
        if base_url.rstrip("/") == default_url.rstrip("/"):
            return cls(provider_id=provider_id)
        return cls(api_url=base_url)


class Provider(ABC):
    """A model endpoint. ``stream`` yields text (and reasoning) deltas, then exactly one
    :class:`Completion`."""

    name: str
    # gen_ai.provider.name in the OpenTelemetry GenAI semantic conventions (tether.telemetry)
    genai_name: ClassVar[str] = "tether.scripted"
    prices: PriceSource | None = None  # None: its calls cost nothing known (scripted)
    # Whether it enforces ModelRequest.output itself; the kernel tells the others in the prompt.
    native_output: ClassVar[bool] = False
    capabilities: Capabilities = Capabilities()
    """What the endpoint takes (declared by the class; ``provider.supports_*`` may say otherwise
    for one model): a request is prepared for it before its wire mapping runs."""

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """The assistant's turn as it arrives; raises ProviderError when the endpoint fails.

        Reasoning pieces (:class:`ThoughtDelta`) may come before or between text pieces."""

    def structured_answer(self, completion: Completion, spec: OutputSpec) -> Completion:
        """The completion of a request that carried ``output``, with the answer as its text: a
        provider whose mechanism is a tool call turns that call into the text."""
        return completion

    async def request(self, request: ModelRequest) -> Completion:
        """The assistant's whole turn, without streaming it."""
        async for event in self.stream(request):
            if isinstance(event, Completion):
                return event
        raise RuntimeError(f"provider {self.name} ended its stream without a completion")

    async def aclose(self) -> None:  # noqa: B027 - most providers hold nothing of their own
        """Release what the provider holds (the shared HTTP client is not its own)."""
