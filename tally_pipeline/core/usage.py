"""Meters: how much of a meter one lifecycle interval used through an instant, exactly.

A meter is a rate: ``size[per] / divisor`` units per hour (1 when ``per`` is None). Quantities are
integer **micro-units** (1e-6 of the meter's unit). The one rounding step is per interval: the
usage of an interval through ``T`` is ``floor(value × µs / (3600 × divisor))`` where µs is the
length of ``[start, min(end, T))`` in microseconds. Cumulative usage is the sum over intervals.
The SQL in ``tally_pipeline.ledger.usage_sql`` computes the same integers; tests hold them equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from typing import Any

from tally_pipeline.core.registry import Meter

MICRO = 1_000_000
#: A meter's size field must be an integer in [0, MAX_METER_VALUE): it then fits a BIGINT and
#: one interval's product with its duration fits the stores' 38-digit integers.
MAX_METER_VALUE = 10**18

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# Wide enough that scaling a 38-digit amount never rounds (the default context keeps 28 digits).
_EXACT = Context(prec=80)


class MeterValueError(ValueError):
    """A size whose meter field is not a usable number (a string, a float, a negative, a boolean…)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """One attribute version of a resource: its size over ``[start, end)``; ``end`` None while open."""

    start: datetime
    end: datetime | None
    size: Any
    resource_id: str = ""


def epoch_us(instant: datetime) -> int:
    """Microseconds since the Unix epoch of an aware instant (exact)."""
    return (instant - _EPOCH) // _ONE_US


def from_epoch_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def meter_value(meter: Meter, size: Any) -> int:
    """The size field a meter multiplies by: 1 without ``per``; 0 when the field is absent or null."""
    if meter.per is None:
        return 1
    if not isinstance(size, Mapping):
        raise MeterValueError("size is not an object")
    raw = size.get(meter.per)
    if raw is None:
        return 0
    # bool is an int subclass in Python, but JSON true is not a number in either database
    if type(raw) is not int or not 0 <= raw < MAX_METER_VALUE:
        raise MeterValueError(f"{meter.per} = {raw!r} is not an integer in [0, 10^18)")
    return raw


def interval_usage_micro(meter: Meter, interval: Interval, through: datetime) -> int:
    """Usage in micro-units of one interval over ``[start, min(end, through))``, truncated.

    An interval that had not begun by ``through`` uses nothing, and its size is not read.
    """
    if interval.start >= through:
        return 0
    value = meter_value(meter, interval.size)
    stop = through if interval.end is None or interval.end > through else interval.end
    duration_us = epoch_us(stop) - epoch_us(interval.start)
    if duration_us <= 0:
        return 0
    return value * duration_us // (3600 * meter.divisor)


def cumulative_usage_micro(meter: Meter, intervals: Iterable[Interval], through: datetime) -> int:
    """Usage in micro-units of all intervals through ``through`` (the sum of per-interval usage)."""
    return sum(interval_usage_micro(meter, interval, through) for interval in intervals)


def to_units(micro: int) -> Decimal:
    """Micro-units as an exact decimal in the meter's unit (six decimal places)."""
    return _EXACT.scaleb(Decimal(micro), -6)


def to_micro(amount: Decimal | int | str) -> int:
    """An exact decimal in the meter's unit back to micro-units; more than six decimals is an error."""
    scaled = _EXACT.scaleb(Decimal(amount), 6)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{amount} has more than six decimal places")
    return int(scaled)
