"""Retry pacing for the sender: exponential backoff with jitter, and ``Retry-After`` parsing. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class Backoff:
    """Delay before retry ``n`` (1 for the first retry) is ``min(max_delay, base * factor**(n-1))``,
    scaled down by a random share of up to ``jitter`` so many collectors don't retry in step.

    A server's ``Retry-After`` is a floor (capped at ``max_retry_after`` against absurd values).
    """

    base: float = 0.5
    factor: float = 2.0
    max_delay: float = 60.0
    jitter: float = 0.5
    max_retry_after: float = 600.0

    def __post_init__(self) -> None:
        if self.base <= 0 or self.factor < 1 or self.max_delay < self.base:
            raise ValueError("backoff needs base > 0, factor >= 1 and max_delay >= base")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter is a share between 0 and 1")

    def ceiling(self, failures: int) -> float:
        """The un-jittered delay after ``failures`` consecutive failures (at least 1)."""
        exponent = max(0, failures - 1)
        # Cap the exponent first: factor**1000 overflows a float long before anyone waits that long.
        if self.factor > 1 and exponent > 64:
            return self.max_delay
        return min(self.max_delay, self.base * self.factor**exponent)

    def delay(self, failures: int, rng: random.Random, retry_after: float | None = None) -> float:
        ceiling = self.ceiling(failures)
        wait = ceiling * (1.0 - self.jitter * rng.random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after))
        return wait


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)
