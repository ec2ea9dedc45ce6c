"""OpenTelemetry traces of real kernel runs, caught by the SDK's in-memory exporter: the run,
model call and tool call spans, their GenAI attributes and their parenting; no content unless
asked; nothing of OpenTelemetry imported when tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.kernel.support import KernelHarness, tool_call
from tether.protocol import ProviderError
from tether.protocol.kernel import StopReason

EXPORTER = InMemorySpanExporter()
SECRET_PROMPT = "summarize notes.txt, the code is hunter2"


@pytest.fixture(scope="module", autouse=True)
def collector() -> None:
    """The process's tracer provider, once (OpenTelemetry allows only one): spans end up in
    :data:`EXPORTER` as tether's tracer finds the provider set."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[list[ReadableSpan]]:
    EXPORTER.clear()
    found: list[ReadableSpan] = []
    yield found


def finished_spans() -> list[ReadableSpan]:
    return list(EXPORTER.get_finished_spans())


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name]
    return span


TURNS: list[dict[str, Any]] = [
    {
        "text": "Reading.",
        "toolCalls": [
            tool_call("c1", "read_file", path="notes.txt"),
            tool_call("c2", "read_file", path="missing.txt"),
        ],
        "usage": {"inputTokens": 100, "outputTokens": 20},
        "finishReason": "tool_calls",
    },
    {
        "text": "It says hi.",
        "usage": {"inputTokens": 150, "outputTokens": 5},
        "finishReason": "stop",
    },
]


async def traced_run(tmp_path: Path, turns: list[dict[str, Any]], **telemetry: Any) -> Any:
    (tmp_path / "notes.txt").write_text("hi\n")
    harness = KernelHarness(tmp_path, turns, config={"telemetry": {"enabled": True, **telemetry}})
    sid = await harness.session()
    return sid, await harness.run(sid, SECRET_PROMPT)


async def test_a_run_is_a_span_with_a_span_per_model_call_and_per_tool_call_inside_it(
    tmp_path: Path, spans: list[ReadableSpan]
):
    sid, result = await traced_run(tmp_path, TURNS)
    assert result.stop_reason is StopReason.END_TURN
    spans = finished_spans()
    assert sorted(s.name for s in spans) == [
        "chat m",
        "chat m",
        "execute_tool read_file",
        "execute_tool read_file",
        "invoke_agent tether",
    ]
    run = one(spans, "invoke_agent tether")
    assert run.parent is None and run.kind is SpanKind.INTERNAL
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id
        for s in spans
        if s is not run
    )
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "tether",
        "gen_ai.conversation.id": sid,
        "gen_ai.provider.name": "tether.scripted",
        "gen_ai.request.model": "m",
        "tether.run.id": result.run_id,
        "tether.run.stop_reason": "end_turn",
        "tether.run.iterations": 2,
        "gen_ai.usage.input_tokens": 250,
        "gen_ai.usage.output_tokens": 25,
    }
    first, second = sorted(
        (s for s in spans if s.name == "chat m"), key=lambda s: s.start_time or 0
    )
    assert first.kind is SpanKind.CLIENT
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "tether.scripted",
        "gen_ai.request.model": "m",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert second.attributes is not None and second.attributes["gen_ai.usage.input_tokens"] == 150
    tools = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in spans
        if s.attributes and "gen_ai.tool.name" in s.attributes
    }
    assert dict(tools["c1"].attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "read_file",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    assert tools["c1"].status.status_code is StatusCode.UNSET
    assert tools["c2"].status.status_code is StatusCode.ERROR  # no such file
    assert (
        tools["c2"].attributes is not None and tools["c2"].attributes["error.type"] == "tool_error"
    )


async def test_without_capture_content_no_prompt_answer_or_tool_data_is_in_any_span(
    tmp_path: Path, spans: list[ReadableSpan]
):
    await traced_run(tmp_path, TURNS)
    dumped = json.dumps([dict(s.attributes or {}) for s in finished_spans()], default=str)
    for content in ("hunter2", "notes.txt", "It says hi", "Reading.", "hi\\n"):
        assert content not in dumped


async def test_capture_content_puts_the_prompt_answers_and_tool_data_in_the_spans(
    tmp_path: Path, spans: list[ReadableSpan]
):
    await traced_run(tmp_path, TURNS, capture_content=True)
    spans = finished_spans()
    run = one(spans, "invoke_agent tether")
    assert run.attributes is not None
    prompt = json.loads(str(run.attributes["gen_ai.input.messages"]))
    assert prompt == [{"role": "user", "parts": [{"type": "text", "content": SECRET_PROMPT}]}]
    tool = next(
        s for s in spans if s.attributes and s.attributes.get("gen_ai.tool.call.id") == "c1"
    )
    assert tool.attributes is not None
    assert json.loads(str(tool.attributes["gen_ai.tool.call.arguments"])) == {"path": "notes.txt"}
    assert "hi" in str(tool.attributes["gen_ai.tool.call.result"])
    answers = [
        str((s.attributes or {}).get("gen_ai.output.messages")) for s in spans if s.name == "chat m"
    ]
    assert any("It says hi." in answer for answer in answers)


async def test_a_failing_model_call_marks_its_span_and_the_run_s_with_the_error_type(
    tmp_path: Path, spans: list[ReadableSpan]
):
    with pytest.raises(ProviderError):
        await traced_run(tmp_path, [{"error": "the endpoint is down", "status": 503}])
    spans = finished_spans()
    for name in ("chat m", "invoke_agent tether"):
        span = one(spans, name)
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None and span.attributes["error.type"] == "ProviderError"
    assert "the endpoint is down" not in json.dumps([dict(s.attributes or {}) for s in spans])


async def test_telemetry_enabled_false_traces_nothing(tmp_path: Path, spans: list[ReadableSpan]):
    await traced_run(tmp_path, TURNS, enabled=False)
    assert finished_spans() == []


UNTRACED_RUN = """
import asyncio, json, sys
from pathlib import Path
from tests.kernel.support import KernelHarness, tool_call

async def main():
    root = Path(sys.argv[1])
    (root / "a.txt").write_text("hi")
    turns = [
        {"toolCalls": [tool_call("c1", "read_file", path="a.txt")], "usage": {"inputTokens": 3}},
        {"text": "done"},
    ]
    harness = KernelHarness(root, turns)
    result = await harness.run(await harness.session(), "go")
    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
    print(json.dumps({"stop": result.stop_reason, "loaded": loaded}))

asyncio.run(main())
"""


def test_a_run_with_tracing_off_imports_nothing_of_opentelemetry(tmp_path: Path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", UNTRACED_RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=Path(__file__).parent.parent,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {"stop": "end_turn", "loaded": []}


def test_tether_run_exports_to_the_console_on_stderr_and_keeps_stdout_for_its_output(
    tmp_path: Path,
):
    """The standard variables alone turn tracing on in the real server; ``console`` spans go to
    stderr, as stdout carries the protocol (and ``tether run --json`` its events)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "hello", "usage": {"inputTokens": 3}}]))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ["OTEL_TRACES_EXPORTER"] = "console"
    argv = [sys.executable, "-m", "tether", "run", "hi", "--json", "--script", str(script)]
    done = subprocess.run(
        [*argv, "--workspace", str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["result"]["response"] == "hello"
    assert '"name": "invoke_agent tether"' in done.stderr
    assert '"name": "chat' in done.stderr


WITHOUT_SDK = """
import asyncio, importlib.abc, json, logging, sys
from pathlib import Path

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, Refuse())
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from tests.kernel.support import KernelHarness

async def main():
    harness = KernelHarness(Path(sys.argv[1]), [{"text": "a"}, {"text": "b"}],
                            config={"telemetry": {"enabled": True}})
    sid = await harness.session()
    results = [await harness.run(sid, "go") for _ in range(2)]
    print(json.dumps([r.response for r in results]))

asyncio.run(main())
"""


def test_tracing_asked_for_without_the_otel_extra_is_reported_once_and_runs_go_on(
    tmp_path: Path,
):
    """The OpenTelemetry API alone may be installed (the MCP SDK needs it), not the SDK."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SDK, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=Path(__file__).parent.parent,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == ["a", "b"]
    assert done.stderr.count("install tether[otel]") == 1
