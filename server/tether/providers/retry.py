"""Retries: exponential backoff with full jitter, ``Retry-After``, and the give-up error.

A try is repeated when the endpoint answers 429 or 5xx, the connection fails or times out, or the
stream is cut before anything of the turn reached the caller (once a text piece has been passed
on, trying again would stream it twice, so the error is final). Any other 4xx is final at once.
After the last try the caller gets a :class:`~tether.protocol.ProviderError` whose ``data`` is
``{"status"?, "provider", "body"?}``: the HTTP status when there was one, and the first 2 KB of
the error body with the API key blanked out; its message carries the status and what the endpoint
said (``openai: HTTP 401: Incorrect API key provided``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from tether.protocol import ProviderError
from tether.providers.errors import AttemptFailed

log = logging.getLogger("tether.providers")

BODY_LIMIT = 2048  # bytes of an error body kept in ProviderError.data

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how long to wait. ``sleep`` and ``random`` are injectable for tests."""

    max_retries: int = 3
    base_delay: float = 0.5  # seconds; the n-th retry waits up to base_delay * 2**n ...
    max_delay: float = 8.0  # ... but never more than this
    max_retry_after: float = 60.0  # a server's Retry-After is honoured up to this many seconds
    sleep: Sleep = field(default=asyncio.sleep)
    random: Callable[[], float] = field(default=random.random)

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling: float = min(self.max_delay, self.base_delay * 2**retry)
        return self.random() * ceiling


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """The wait a response asks for, in seconds: ``retry-after-ms``, or ``Retry-After`` given as
    seconds or as an HTTP date. ``None`` when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` blanked out."""
    return text.replace(secret, "[redacted]") if secret else text


MESSAGE_LIMIT = 300  # characters of the endpoint's own message put in the error's message


def endpoint_message(body: str) -> str | None:
    """What the endpoint said in an error body, one line: ``error.message`` of a JSON body
    (OpenAI, Anthropic and Gemini alike), or ``message``, ``detail`` or ``error`` as a string;
    else the body itself when it is short plain text. None for HTML and the like."""
    try:
        parsed = json.loads(body)
    except ValueError:
        text = body.strip()
        if not text or text.startswith("<") or len(text) > MESSAGE_LIMIT:
            return None
        return " ".join(text.split())
    return _message_in(parsed)


def _message_in(parsed: object) -> str | None:
    if isinstance(parsed, list) and parsed:  # Gemini has sent [{"error": {...}}]
        parsed = parsed[0]
    if not isinstance(parsed, dict):
        return None
    error = parsed.get("error")
    candidates = (
        error.get("message") if isinstance(error, dict) else error,
        parsed.get("message"),
        parsed.get("detail"),
    )
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip():
            return " ".join(candidate.split())[:MESSAGE_LIMIT]
    return None


def give_up(
    failure: AttemptFailed, *, provider: str, tries: int, secret: str | None
) -> ProviderError:
    """The error the caller sees once ``failure`` is final."""
    message = redact(failure.message, secret)
    said = endpoint_message(failure.body) if failure.body else None
    if said:
        message = f"{message}: {redact(said, secret)}"
    if tries > 1:
        message = f"{message} (gave up after {tries} tries)"
    data: dict[str, Any] = {"provider": provider}
    if failure.status is not None:
        data["status"] = failure.status
    if failure.body:
        data["body"] = redact(failure.body[:BODY_LIMIT], secret)
    return ProviderError(f"{provider}: {message}", data)


def _why_final(failure: AttemptFailed, *, started: bool, retries: int, policy: RetryPolicy) -> str:
    if started:
        return "part of the turn was already passed on"
    if not failure.retryable:
        return "not retryable"
    return f"{retries} of {policy.max_retries} retries done"


async def with_retries(
    attempt: Callable[[], AsyncGenerator[T, None]],
    policy: RetryPolicy,
    *,
    provider: str,
    secret: str | None = None,
) -> AsyncGenerator[T, None]:
    """The events of ``attempt()``, tried again while it fails before yielding anything."""
    retry = 0
    while True:
        started = False
        try:
            async with aclosing(attempt()) as events:
                async for event in events:
                    started = True
                    yield event
            return
        except AttemptFailed as failure:
            if started or not failure.retryable or retry >= policy.max_retries:
                log.debug(
                    "%s: %s; no retry (%s)",
                    provider,
                    redact(failure.message, secret),
                    _why_final(failure, started=started, retries=retry, policy=policy),
                )
                raise give_up(failure, provider=provider, tries=retry + 1, secret=secret) from None
            wait = policy.delay(retry, failure.retry_after)
            log.warning(
                "%s: %s; retry %d of %d in %.2f s",
                provider,
                redact(failure.message, secret),
                retry + 1,
                policy.max_retries,
                wait,
            )
        await policy.sleep(wait)
        retry += 1
