"""Shared helpers of the providers."""

from __future__ import annotations

import pytest

from tether.providers.content import token_count


@pytest.mark.parametrize(
    ("reported", "counted"),
    [(12, 12), (0, 0), (None, 0), ("12", 0), (1.5, 0), (-3, 0), (True, 0), ({}, 0)],
)
def test_odd_token_counts_from_an_endpoint_count_as_zero_instead_of_failing(
    reported: object, counted: int
) -> None:
    assert token_count(reported) == counted
