"""What a run costs: each model call priced from genai-prices' table, summed into the run's
usage, its ``run_finished`` and its session's totals; unknown when the table has no price."""

from __future__ import annotations

from pathlib import Path

import genai_prices
import pytest

from tests.fakes.model_server import Call, ModelServer, Reply
from tether.protocol.kernel import RunFinished, Usage
from tether.providers.base import PriceSource
from tether.providers.openai import OpenAIProvider
from tether.providers.prices import cost

from .support import KernelHarness


def table_price(model: str, *calls: tuple[int, int]) -> float:
    """What the table says ``calls`` (input, output tokens) cost at OpenAI."""
    return sum(
        float(
            genai_prices.calc_price(
                genai_prices.Usage(input_tokens=i, output_tokens=o), model, provider_id="openai"
            ).total_price
        )
        for i, o in calls
    )


async def test_a_run_reports_what_its_model_calls_cost_in_its_result_event_and_session(
    tmp_path: Path,
):
    (tmp_path / "a.txt").write_text("hello\n")
    harness = KernelHarness(tmp_path, [])
    async with ModelServer() as endpoint:
        endpoint.push(
            Reply(tool_calls=[Call("read_file", {"path": "a.txt"})], usage=(1000, 100)),
            Reply(text="It says hello.", usage=(2000, 50)),
        )
        provider = OpenAIProvider(base_url=endpoint.openai_url, api_key="k", model="gpt-4o")
        provider.prices = PriceSource(provider_id="openai")  # the loopback stands for OpenAI
        harness.provider = provider  # type: ignore[assignment]
        sid = await harness.session()
        try:
            first = await harness.run(sid, model="gpt-4o")
        finally:
            await provider.aclose()
    expected = table_price("gpt-4o", (1000, 100), (2000, 50))
    assert first.usage is not None and first.usage.cost == pytest.approx(expected)
    assert expected > 0 and first.model == "gpt-4o"
    finished = [p.event for p in harness.events if isinstance(p.event, RunFinished)]
    assert finished[0].usage == first.usage
    session = await harness.store.get(sid)
    assert session.usage.cost == pytest.approx(expected)


async def test_a_model_the_table_does_not_know_has_no_cost_rather_than_a_zero_one(
    tmp_path: Path,
):
    harness = KernelHarness(tmp_path, [{"text": "hi", "usage": {"inputTokens": 5}}])
    sid = await harness.session()
    result = await harness.run(sid)  # the scripted provider: no price anywhere
    assert result.usage == Usage(input_tokens=5) and result.usage.cost is None
    assert (await harness.store.get(sid)).usage.cost is None


def test_a_local_endpoint_or_an_unknown_model_is_not_priced():
    calls = [Usage(input_tokens=10, output_tokens=10)]
    assert cost(PriceSource(api_url="http://127.0.0.1:8000/v1"), "gpt-4o", calls) is None
    assert cost(PriceSource(provider_id="openai"), "no-such-model-xyz", calls) is None
    assert cost(PriceSource(provider_id="openai"), "gpt-4o", []) is None
    cached = [Usage(input_tokens=1000, output_tokens=0, cached_tokens=1000)]
    whole = [Usage(input_tokens=1000, output_tokens=0)]
    priced = cost(PriceSource(provider_id="openai"), "gpt-4o", cached)
    assert priced is not None and priced < (
        cost(PriceSource(provider_id="openai"), "gpt-4o", whole) or 0
    )
