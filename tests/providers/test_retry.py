"""The retry policy on its own: backoff with full jitter, and reading Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from tether.protocol import ErrorCode
from tether.providers.errors import AttemptFailed
from tether.providers.retry import RetryPolicy, give_up, parse_retry_after

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_backoff_doubles_up_to_the_ceiling_and_jitter_spans_zero_to_it() -> None:
    top = RetryPolicy(base_delay=0.5, max_delay=4.0, random=lambda: 1.0)
    assert [top.delay(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    bottom = RetryPolicy(base_delay=0.5, max_delay=4.0, random=lambda: 0.0)
    assert [bottom.delay(n) for n in range(3)] == [0.0, 0.0, 0.0]
    half = RetryPolicy(base_delay=0.5, max_delay=4.0, random=lambda: 0.5)
    assert half.delay(2) == 1.0


def test_a_retry_after_replaces_the_backoff_and_is_capped() -> None:
    policy = RetryPolicy(max_retry_after=30.0, random=lambda: 1.0)
    assert policy.delay(0, retry_after=12.5) == 12.5
    assert policy.delay(5, retry_after=0.0) == 0.0
    assert policy.delay(0, retry_after=3600) == 30.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": format_datetime(NOW + timedelta(seconds=90), usegmt=True)}, 90.0),
        ({"retry-after": format_datetime(NOW - timedelta(seconds=90), usegmt=True)}, 0.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_as_seconds_or_as_an_http_date(
    headers: dict[str, str], expected: float | None
) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def test_giving_up_keeps_status_provider_and_body_and_blanks_the_key() -> None:
    failure = AttemptFailed(
        "HTTP 401 for sk-abc", retryable=False, status=401, body="bad key sk-abc" + "." * 5000
    )
    error = give_up(failure, provider="openai", tries=3, secret="sk-abc")
    assert error.code == ErrorCode.PROVIDER_ERROR
    assert error.data["status"] == 401
    assert error.data["provider"] == "openai"
    assert error.data["body"].startswith("bad key [redacted]")
    assert "sk-abc" not in error.message
    assert "gave up after 3 tries" in error.message


@pytest.mark.parametrize(
    "body",
    [
        '{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}',
        '{"type": "error", "error": {"type": "authentication_error", '
        '"message": "Incorrect API key provided"}}',
        '[{"error": {"code": 401, "message": "Incorrect API key provided"}}]',
        '{"detail": "Incorrect API key provided"}',
        "Incorrect API key provided\n",
    ],
)
def test_giving_up_says_what_the_endpoint_said_after_the_status(body: str) -> None:
    failure = AttemptFailed("HTTP 401", retryable=False, status=401, body=body)
    error = give_up(failure, provider="openai", tries=1, secret=None)
    assert error.message == "openai: HTTP 401: Incorrect API key provided"


def test_an_html_error_page_is_left_out_of_the_message() -> None:
    failure = AttemptFailed("HTTP 502", retryable=True, status=502, body="<html>Bad</html>")
    error = give_up(failure, provider="openai", tries=1, secret=None)
    assert error.message == "openai: HTTP 502"


def test_giving_up_without_a_status_or_body_leaves_them_out() -> None:
    error = give_up(
        AttemptFailed("timed out", retryable=True), provider="anthropic", tries=1, secret=None
    )
    assert error.data == {"provider": "anthropic"}
