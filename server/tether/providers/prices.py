"""What model calls cost, in US dollars, from the maintained price table of ``genai-prices``.

A provider says where the table looks it up (:class:`~tether.providers.base.PriceSource`: its
own endpoint by provider id, any other by URL); a model the table does not know, on a provider
it does not know (a local server, the scripted provider), has no cost: :func:`cost` answers None
and the caller shows it as unknown, never as free.

``genai_prices`` weighs ~80-200 ms to import and its first lookup ~40-90 ms more (it parses its
whole table), so it is imported only when a run has usage to price: :func:`loaded` tells the
caller whether the first call would do that, to make it off the event loop.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from decimal import Decimal

from tether.protocol.usage import Usage
from tether.providers.base import PriceSource


def loaded() -> bool:
    """Whether the table is in memory (a lookup then takes ~0.1 ms, no import)."""
    return "genai_prices" in sys.modules


def cost(source: PriceSource | None, model: str, calls: Sequence[Usage]) -> float | None:
    """What ``calls`` (one usage per model call: prices may depend on a call's size) cost; None
    when the table has no price for ``model`` there, or there is no call to price."""
    if source is None or not model or not calls:
        return None
    import genai_prices

    total = Decimal(0)
    for usage in calls:
        tokens = genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cached_tokens or None,
        )
        try:
            if source.provider_id is not None:
                price = genai_prices.calc_price(tokens, model, provider_id=source.provider_id)
            else:
                price = genai_prices.calc_price(tokens, model, provider_api_url=source.api_url)
        except LookupError:  # the provider or the model is not in the table
            return None
        total += price.total_price
    return float(total)
