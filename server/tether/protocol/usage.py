"""Token usage: what a run reports (``kernel/*``) and what a session totals (``session/*``).

A module of its own so that the session models do not import the ``kernel/*`` ones: a server
start that only answers the handshake builds neither.
"""

from __future__ import annotations

from pydantic import Field

from tether.protocol.base import WireModel


class Usage(WireModel):
    """Tokens as the endpoint reported them. The optional counts are omitted when unknown.

    ``output_tokens`` includes ``reasoning_tokens``; ``input_tokens`` includes ``cached_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int | None = Field(
        default=None, description="output tokens the model spent thinking, when reported"
    )
    cached_tokens: int | None = Field(
        default=None, description="input tokens read from the provider's prompt cache"
    )
    context_tokens: int | None = Field(
        default=None,
        description="the size of the context the last model call read (its input tokens)",
    )
    cost: float | None = Field(
        default=None,
        description="what the model calls cost, in US dollars, from the genai-prices table; "
        "absent when the provider and model are not in it",
    )
