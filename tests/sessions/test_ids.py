"""UUIDv7 ids: RFC 9562 layout, unique, and sorted in creation order."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest

from tether.sessions import ids
from tether.sessions.ids import utcnow, uuid7


def unix_ms(value: str) -> int:
    return uuid.UUID(value).int >> 80


def test_uuid7_strings_are_version_7_with_the_rfc_variant() -> None:
    for value in (uuid7() for _ in range(1000)):
        parsed = uuid.UUID(value)
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == value


def test_10000_uuid7s_are_unique_and_sort_in_creation_order() -> None:
    made = [uuid7() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert made == sorted(made)
    assert [uuid.UUID(v).int for v in made] == sorted(uuid.UUID(v).int for v in made)


def test_a_uuid7_carries_the_unix_millisecond_it_was_made_in() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    # Ids made faster than 4096 per millisecond borrow the next one; a few at most.
    assert before <= unix_ms(value) <= after + 3


def test_more_than_4096_ids_in_one_millisecond_still_sort_in_creation_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frozen = time.time_ns()
    monkeypatch.setattr(ids, "time", SimpleNamespace(time_ns=lambda: frozen))
    made = [uuid7() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert made == sorted(made)
    assert all(uuid.UUID(v).version == 7 for v in made)


def test_ids_keep_sorting_in_creation_order_when_the_clock_steps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time_ns()
    clock = SimpleNamespace(time_ns=lambda: now)
    monkeypatch.setattr(ids, "time", clock)
    made = [uuid7() for _ in range(10)]
    clock.time_ns = lambda: now - 5_000_000_000
    made += [uuid7() for _ in range(10)]
    assert made == sorted(made)
    assert len(set(made)) == 20


def test_utcnow_is_timezone_aware_utc() -> None:
    now = utcnow()
    assert now.tzinfo is not None
    assert now.utcoffset() is not None and now.utcoffset().total_seconds() == 0
