"""A per-token limit on what a writer may put into the dead letter.

Each token has a bucket of dead-lettered bytes (UTF-8) that drains at ``per_minute / 60`` a second. A
request is refused (429, ``Retry-After``) while its token's bucket holds more than one minute's
worth; what a request dead-letters is added once it is known. So a token may overshoot by one
request (at most the body limit), then writes at the configured rate. Held per API process: with
several workers the rate is per worker.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

DEFAULT_PER_MINUTE = 16 * 1024 * 1024  # a buggy collector at 5% invalid of a few thousand events/s fits under it


class DeadLetterQuota:
    def __init__(self, per_minute: int = DEFAULT_PER_MINUTE, *, clock: Callable[[], float] = time.monotonic):
        self.per_minute = per_minute
        self._rate = per_minute / 60.0
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # token name -> (level, as of)

    def _level(self, name: str, now: float) -> float:
        level, since = self._buckets.get(name, (0.0, now))
        return max(0.0, level - (now - since) * self._rate)

    def retry_after(self, name: str) -> int | None:
        """Seconds until ``name`` may dead-letter again, or None when it may now."""
        with self._lock:
            now = self._clock()
            level = self._level(name, now)
            if level <= self.per_minute:
                return None
            return max(1, math.ceil((level - self.per_minute) / self._rate))

    def charge(self, name: str, amount: int) -> None:
        """Add what a request dead-lettered to its token's bucket."""
        if amount <= 0:
            return
        with self._lock:
            now = self._clock()
            self._buckets[name] = (self._level(name, now) + amount, now)
