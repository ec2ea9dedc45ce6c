"""OpenTelemetry traces of runs, model calls and tool calls (the ``tether[otel]`` extra).

Imported only when tracing is on (:mod:`tether.kernel.tracing` decides, from
``telemetry.enabled`` and the standard ``OTEL_*`` variables): a server that does not trace
never loads OpenTelemetry. The spans follow the GenAI semantic conventions::

    invoke_agent tether          (internal)  one per run
    ├── chat {model}             (client)    each model call
    └── execute_tool {name}      (internal)  each tool call (concurrent ones side by side)

Attributes carry names, ids, models, token counts, finish reasons, the cost and error types;
the prompt, answers, tool arguments and results only with ``telemetry.capture_content`` (and
the secrets tether knows redacted even then). A call that fails ends its span with status error
and ``error.type``.

The tracer provider is the process's: one an embedding program has set is kept; otherwise one
is made, once, with the exporters ``OTEL_TRACES_EXPORTER`` names (``otlp`` by default, over
``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``; ``console`` writes to stderr, as stdout carries the
protocol), flushed when the process exits.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from tether import __version__
from tether.protocol import ToolCall
from tether.protocol.kernel import RunResult
from tether.protocol.usage import Usage
from tether.providers.base import Completion

AGENT_NAME = "tether"
Redact = Callable[[str], str]

_tracer: Tracer | None = None


def tracer(environ: Mapping[str, str] = os.environ) -> Tracer:
    """tether's tracer, from the process's provider (made on first use when nobody set one)."""
    global _tracer
    if _tracer is None:
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(_provider(environ))
        _tracer = trace.get_tracer("tether", __version__)
    return _tracer


def _provider(environ: Mapping[str, str]) -> trace.TracerProvider:
    """An SDK provider with the exporters the ``OTEL_*`` variables name."""
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, str] = {SERVICE_VERSION: __version__}
    if not environ.get("OTEL_SERVICE_NAME") and "service.name=" not in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes[SERVICE_NAME] = AGENT_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    names = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    for name in (part.strip() for part in names.split(",")):
        exporter = _exporter(name, environ)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names (None: ``none`` or unknown)."""
    if name == "otlp":
        protocol = (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        )
        if protocol.strip() == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    if name not in ("none", ""):
        print(f"tether: OTEL_TRACES_EXPORTER {name!r} is not one tether knows", file=sys.stderr)
    return None


@dataclass(frozen=True, kw_only=True)
class RunTelemetry:
    """The spans of one run (:class:`tether.kernel.run.Run` calls it at each step)."""

    tracer: Tracer
    session_id: str
    run_id: str
    model: str
    provider: str  # gen_ai.provider.name
    capture_content: bool
    redact: Redact

    @contextmanager
    def run(self, prompt: str) -> Iterator[RunSpan]:
        """The run's span, current while the run goes on (its calls' spans are its children)."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": self.session_id,
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model,
            "tether.run.id": self.run_id,
        }
        if self.capture_content:
            attributes["gen_ai.input.messages"] = _json(
                [{"role": "user", "parts": [_text_part(self.redact(prompt))]}]
            )
        with _span(self.tracer, f"invoke_agent {AGENT_NAME}", SpanKind.INTERNAL, attributes) as s:
            yield RunSpan(s)

    @contextmanager
    def chat(self) -> Iterator[ChatSpan]:
        """One model call's span."""
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model,
        }
        with _span(self.tracer, f"chat {self.model}", SpanKind.CLIENT, attributes) as span:
            yield ChatSpan(span, self.redact if self.capture_content else None)

    @contextmanager
    def tool(self, call: ToolCall) -> Iterator[ToolSpan]:
        """One tool call's span."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = self.redact(call.arguments)
        name = f"execute_tool {call.name}"
        with _span(self.tracer, name, SpanKind.INTERNAL, attributes) as span:
            yield ToolSpan(span, self.redact if self.capture_content else None)


@dataclass(frozen=True)
class RunSpan:
    span: Span

    def finished(self, result: RunResult) -> None:
        self.span.set_attribute("tether.run.stop_reason", str(result.stop_reason))
        self.span.set_attribute("tether.run.iterations", result.iterations)
        if result.usage is not None:
            _usage(self.span, result.usage)


@dataclass(frozen=True)
class ChatSpan:
    span: Span
    redact: Redact | None  # None: no content in the span

    def finished(self, completion: Completion) -> None:
        if completion.usage is not None:
            _usage(self.span, completion.usage)
        if completion.finish_reason:
            self.span.set_attribute("gen_ai.response.finish_reasons", [completion.finish_reason])
        if self.redact is not None:
            self.span.set_attribute("gen_ai.output.messages", _output(completion, self.redact))


@dataclass(frozen=True)
class ToolSpan:
    span: Span
    redact: Redact | None  # None: no content in the span

    def finished(self, content: str, is_error: bool) -> None:
        if is_error:
            self.span.set_status(Status(StatusCode.ERROR))
            self.span.set_attribute("error.type", "tool_error")
        if self.redact is not None:
            self.span.set_attribute("gen_ai.tool.call.result", self.redact(content))


@contextmanager
def _span(
    tracer: Tracer, name: str, kind: SpanKind, attributes: Mapping[str, Any]
) -> Iterator[Span]:
    """A current span that records an exception leaving it (``error.type``: its class)."""
    with tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            raise


def _usage(span: Span, usage: Usage) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if usage.cost is not None:
        span.set_attribute("tether.usage.cost", usage.cost)


def _text_part(text: str) -> dict[str, str]:
    return {"type": "text", "content": text}


def _output(completion: Completion, redact: Redact) -> str:
    parts: list[dict[str, Any]] = []
    if completion.content:
        parts.append(_text_part(redact(completion.content)))
    parts.extend(
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": redact(c.arguments)}
        for c in completion.tool_calls
    )
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    if completion.finish_reason:
        message["finish_reason"] = completion.finish_reason
    return _json([message])


def _json(value: Sequence[Any]) -> str:
    return json.dumps(value, ensure_ascii=False)
