"""A session's allow-lists of tools and models, and its token totals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.protocol import ErrorCode, InvalidParams
from tether.protocol.kernel import StopReason

from .support import KernelHarness, tool_call
from .test_run import Tools


async def test_a_run_asking_for_a_tool_outside_the_session_list_is_refused_before_anything(
    tmp_path: Path,
):
    harness = KernelHarness(tmp_path, [{"text": "never"}])
    sid = await harness.session(tools=["read_file", "list_files"])
    with pytest.raises(InvalidParams) as raised:
        await harness.run(sid, tools=["read_file", "search_text"])
    assert raised.value.code == ErrorCode.INVALID_PARAMS
    data = raised.value.data
    assert [f["field"] for f in data["fields"]] == ["tools"]
    assert data["allowed"] == ["read_file", "list_files"]
    assert data["refused"] == ["search_text"]
    assert await harness.store.history(sid) == []
    assert harness.provider.requests == [] and harness.events == []


async def test_a_run_narrowing_the_session_list_is_served_with_the_narrower_list(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "ok"}])
    sid = await harness.session(tools=["read_file", "list_files"])
    await harness.run(sid, tools=["list_files"])
    assert [spec.name for spec in harness.provider.requests[0].tools] == ["list_files"]


async def test_a_run_tool_list_is_still_narrowed_by_the_configuration(tmp_path: Path):
    enabled = {"tools": {"enabled": ["read_file"]}}
    harness = KernelHarness(tmp_path, [{"text": "ok"}], config=enabled)
    sid = await harness.session()
    await harness.run(sid, tools=["read_file", "list_files"])
    assert [spec.name for spec in harness.provider.requests[0].tools] == ["read_file"]


async def test_a_run_model_outside_the_allowed_models_is_refused(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "never"}])
    sid = await harness.session(allowed_models=["m", "small"])
    with pytest.raises(InvalidParams) as raised:
        await harness.run(sid, model="big")
    data = raised.value.data
    assert [f["field"] for f in data["fields"]] == ["model"]
    assert data["allowed"] == ["m", "small"] and data["refused"] == ["big"]
    assert await harness.store.history(sid) == []
    assert harness.events == []


async def test_a_session_whose_own_model_is_not_allowed_is_refused(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "never"}])
    sid = await harness.session(model="big", allowed_models=["small"])
    with pytest.raises(InvalidParams) as raised:
        await harness.run(sid)
    assert raised.value.data["refused"] == ["big"]


async def test_the_configured_model_must_be_allowed_too(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "never"}])
    sid = await harness.session(allowed_models=["small"])
    with pytest.raises(InvalidParams) as raised:
        await harness.run(sid)  # the configuration says "m"
    assert raised.value.data["refused"] == ["m"]
    assert "provider.model" in raised.value.message


async def test_an_allowed_run_model_is_used(tmp_path: Path):
    harness = KernelHarness(tmp_path, [{"text": "ok"}])
    sid = await harness.session(allowed_models=["m", "small"])
    result = await harness.run(sid, model="small")
    assert result.stop_reason is StopReason.END_TURN
    assert harness.provider.requests[0].model == "small"


async def test_usage_of_every_run_adds_up_on_the_session(tmp_path: Path):
    harness = KernelHarness(
        tmp_path,
        [
            {
                "toolCalls": [tool_call("a", "list_files")],
                "usage": {"inputTokens": 100, "outputTokens": 10},
            },
            {"text": "one", "usage": {"inputTokens": 120, "outputTokens": 5}},
            {"text": "two", "usage": {"inputTokens": 200, "outputTokens": 7}},
        ],
    )
    sid = await harness.session()
    first = await harness.run(sid)
    second = await harness.run(sid)
    assert first.usage is not None and second.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (220, 15)
    assert (second.usage.input_tokens, second.usage.output_tokens) == (200, 7)
    totals = (await harness.store.get(sid)).usage
    assert (totals.input_tokens, totals.output_tokens) == (420, 22)


async def test_a_run_that_fails_still_adds_the_usage_it_had(tmp_path: Path):
    harness = KernelHarness(
        tmp_path,
        [
            {
                "toolCalls": [tool_call("a", "list_files")],
                "usage": {"inputTokens": 50, "outputTokens": 3},
            },
            {"error": "overloaded", "status": 529},
        ],
    )
    sid = await harness.session()
    with pytest.raises(Exception) as raised:
        await harness.run(sid)
    assert getattr(raised.value, "code", None) == ErrorCode.PROVIDER_ERROR
    totals = (await harness.store.get(sid)).usage
    assert (totals.input_tokens, totals.output_tokens) == (50, 3)


async def test_a_cancelled_run_still_adds_the_usage_it_had(tmp_path: Path):
    tools = Tools("first")
    harness = KernelHarness(
        tmp_path,
        [
            {
                "toolCalls": [tool_call("a", "first")],
                "usage": {"inputTokens": 70, "outputTokens": 9},
            }
        ],
        tools=tools,
    )
    sid = await harness.session()
    run = asyncio.ensure_future(harness.run(sid))
    await tools.started.setdefault("first", asyncio.Event()).wait()
    assert harness.kernel.cancel(sid)
    result = await run
    assert result.stop_reason is StopReason.CANCELLED
    totals = (await harness.store.get(sid)).usage
    assert (totals.input_tokens, totals.output_tokens) == (70, 9)
