"""Meters: how much of a meter one lifecycle interval used through an instant, exactly.

A meter is a rate: ``size[per] / divisor`` units per hour (1 when ``per`` is None). Quantities are
integer **micro-units** (1e-6 of the meter's unit). The one rounding step is per interval: the
usage of an interval through ``T`` is ``floor(value × µs / (3600 × divisor))`` where µs is the
length of ``[start, min(end, T))`` in microseconds. Cumulative usage is the sum over intervals.
The SQL in ``tally_pipeline.store.usage_sql`` computes the same integers; tests hold them equal.
Accuracy against a ground truth is measured per (cloud, project, meter), as a tenant reads a bill.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from typing import Any

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.registry import Meter

MICRO = 1_000_000
#: A meter's size field must be an integer in [0, MAX_METER_VALUE): it then fits a BIGINT and
#: one interval's product with its duration fits the stores' 38-digit integers.
MAX_METER_VALUE = 10**18

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# Wide enough that scaling a 38-digit amount never rounds (the default context keeps 28 digits).
_EXACT = Context(prec=80)


class MeterValueError(InputError, ValueError):
    """A size whose meter field is not a usable number (a string, a float, a negative, a boolean…)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """One attribute version of a resource: its size over ``[start, end)``; ``end`` None while open."""

    start: datetime
    end: datetime | None
    size: Any
    resource_id: str = ""
    platform_status: str | None = None  # a meter bills it or not (``Meter.bills``)


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

    An interval that had not begun by ``through``, or in a status the meter does not bill, uses
    nothing, and its size is not read.
    """
    if interval.start >= through or not meter.bills(interval.platform_status):
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


def unknown_status_policy(meters: Iterable[Meter], intervals_by_type: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Per meter whose type has intervals in status ``unknown``: how many there are, and whether the
    meter bills them (it does unless it names ``unknown`` in its ``unbilled_statuses``). A cycle
    reports this so an unknowable status is never billed, or left free, silently."""
    from tally_pipeline.core.platform import UNKNOWN_STATUS

    return {
        m.name: {"resource_type": m.resource_type, "intervals": intervals_by_type[m.resource_type],
                 "billed": m.bills(UNKNOWN_STATUS)}
        for m in sorted(meters, key=lambda m: m.name) if intervals_by_type.get(m.resource_type)
    }


def to_units(micro: int) -> Decimal:
    """Micro-units as an exact decimal in the meter's unit (six decimal places)."""
    return _EXACT.scaleb(Decimal(micro), -6)


def to_micro(amount: Decimal | int | str) -> int:
    """An exact decimal in the meter's unit back to micro-units; more than six decimals is an error."""
    scaled = _EXACT.scaleb(Decimal(amount), 6)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{amount} has more than six decimal places")
    return int(scaled)


# -- accuracy as a tenant sees it -----------------------------------------------------------------

#: An entity as a tenant reads its bill: (cloud, project_id, meter).
Entity = tuple[str, str, str]


def usage_by_entity(
    meters: Iterable[Meter],
    intervals: Iterable[tuple[str, str, str, Interval]],
    start: datetime,
    end: datetime,
    *,
    skip_unreadable: bool = False,
) -> dict[Entity, int]:
    """Micro-units per (cloud, project, meter) dated in ``[start, end)``, from (cloud, project_id,
    resource_type, interval) rows, with the ledger's per-interval rule (so days telescope).

    An interval whose size a meter cannot read raises ``MeterValueError``, or with
    ``skip_unreadable`` counts nothing for that meter, as in the ledger's totals (which report it).
    """
    by_type: dict[str, list[Meter]] = {}
    for meter in meters:
        by_type.setdefault(meter.resource_type, []).append(meter)
    out: dict[Entity, int] = {}
    for cloud, project_id, resource_type, interval in intervals:
        for meter in by_type.get(resource_type, ()):
            try:
                micro = interval_usage_micro(meter, interval, end) - interval_usage_micro(meter, interval, start)
            except MeterValueError:
                if not skip_unreadable:
                    raise
                continue
            key = (cloud, project_id, meter.name)
            out[key] = out.get(key, 0) + micro
    return out


@dataclass(frozen=True, slots=True)
class EntityAccuracy:
    """One tenant's line: what was measured against the truth, in micro-units of the meter's unit.

    A measurement figure, not an exception (``relative`` is its error as a share of the truth)."""

    cloud: str
    project_id: str
    meter: str
    truth: int
    measured: int

    @property
    def relative(self) -> float:
        """|measured − truth| / truth; 1.0 for usage billed where there was none."""
        if self.truth == 0:
            return 0.0 if self.measured == 0 else 1.0
        return abs(self.measured - self.truth) / self.truth

    def to_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "project_id": self.project_id, "meter": self.meter,
                "truth": float(to_units(self.truth)), "measured": float(to_units(self.measured)),
                "error": round(self.relative, 6)}


@dataclass(frozen=True, slots=True)
class TenantAccuracy:
    """Accuracy per (cloud, project, meter), a measurement figure: errors of different tenants never
    cancel out.

    ``abs_error`` = Σ |measured − truth| / Σ truth over every entity in either; ``worst`` is the
    entity with the largest relative error (ties: the larger absolute difference, then key order).
    """

    abs_error: float
    worst: EntityAccuracy | None
    entities: int

    def to_dict(self) -> dict[str, Any]:
        return {"abs_error": round(self.abs_error, 6), "worst": self.worst.to_dict() if self.worst else None,
                "entities": self.entities}


def tenant_accuracy(truth: Mapping[Entity, int], measured: Mapping[Entity, int]) -> TenantAccuracy:
    lines = [EntityAccuracy(*key, truth.get(key, 0), measured.get(key, 0)) for key in sorted(set(truth) | set(measured))]
    total_truth = sum(line.truth for line in lines)
    total_diff = sum(abs(line.measured - line.truth) for line in lines)
    if total_truth:
        abs_error = total_diff / total_truth
    else:
        abs_error = 0.0 if total_diff == 0 else 1.0
    worst = max(lines, key=lambda e: (e.relative, abs(e.measured - e.truth)), default=None)
    if worst is not None and worst.relative == 0:
        worst = None  # nothing is off: no worst tenant to name
    return TenantAccuracy(abs_error, worst, len(lines))
