"""Retry pacing: exponential growth, the cap, jitter within its band, Retry-After as a floor."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from tally_pipeline.collector.backoff import Backoff, parse_retry_after


def test_the_ceiling_doubles_up_to_the_cap():
    b = Backoff(base=0.5, factor=2.0, max_delay=10.0)
    assert [b.ceiling(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert b.ceiling(10_000) == 10.0  # no float overflow after a very long outage


def test_jitter_stays_in_its_band_and_spreads_retries():
    b = Backoff(base=1.0, max_delay=60.0, jitter=0.5)
    rng = random.Random(1)
    for n in range(1, 12):
        delays = [b.delay(n, rng) for _ in range(200)]
        ceiling = b.ceiling(n)
        assert all(ceiling * 0.5 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling * 0.3  # really spread, not one value
    # two collectors retrying after the same failure do not wait the same time
    assert b.delay(3, random.Random(1)) != b.delay(3, random.Random(2))


def test_no_jitter_means_exactly_the_ceiling():
    b = Backoff(base=0.25, jitter=0.0)
    assert [b.delay(n, random.Random()) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]


def test_retry_after_is_a_floor_capped_against_absurd_values():
    b = Backoff(base=1.0, max_delay=8.0, jitter=0.0, max_retry_after=120.0)
    rng = random.Random()
    assert b.delay(1, rng, retry_after=5.0) == 5.0
    assert b.delay(4, rng, retry_after=0.0) == 8.0
    assert b.delay(1, rng, retry_after=86_400.0) == 120.0


@pytest.mark.parametrize("kwargs", [{"base": 0}, {"factor": 0.5}, {"base": 2, "max_delay": 1}, {"jitter": 1.5}])
def test_nonsense_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_parse_retry_after():
    now = 1_700_000_000.0
    assert parse_retry_after("7", now) == 7.0
    assert parse_retry_after(" 120 ", now) == 120.0
    later = format_datetime(datetime.fromtimestamp(now + 90, UTC), usegmt=True)
    assert parse_retry_after(later, now) == 90.0
    earlier = format_datetime(datetime.fromtimestamp(now - 90, UTC), usegmt=True)
    assert parse_retry_after(earlier, now) == 0.0
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("-5", now) is None
