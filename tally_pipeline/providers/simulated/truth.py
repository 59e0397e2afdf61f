"""Ground truth: what every simulated resource really was, when, and how big.

Each resource has exactly one lifecycle: ``[created_at, deleted_at)`` split into intervals, one per
size version (a resize, an extend, an image's bytes arriving), plus the status history the platform
shows. Usage is computed from the intervals exactly as the ledger computes it from ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from tally_pipeline.core.timeutil import to_utc

if TYPE_CHECKING:
    from tally_pipeline.core.registry import Meter

_MICROS_PER_HOUR = Decimal(3_600_000_000)
_BUCKET = timedelta(hours=1)


class ResourceKey(NamedTuple):
    cloud: str
    resource_type: str
    resource_id: str


@dataclass(frozen=True, slots=True)
class Interval:
    """``[start, end)`` at one size and power status; ``end`` None means still alive when the
    simulation stops. ``status`` is the power or lifecycle status the platform showed (active,
    shutoff, suspended, paused, shelved_offloaded, lower-cased as events carry it); None for a type
    whose status no meter prices."""

    start: datetime
    end: datetime | None
    project_id: str
    size: Mapping[str, Any]
    status: str | None = None


#: Power and lifecycle statuses a pricing policy tells apart (nova's API statuses, lower-cased).
POWER_STATUSES = frozenset({"shutoff", "suspended", "paused", "shelved_offloaded"})


def power_class(status: str | None) -> str | None:
    """The status a bill tells apart: a power status, else ``active`` for a running server (its
    transitions — build, resize, verify_resize — run at full flavor); None stays None."""
    if status is None:
        return None
    shown = status.lower()
    return shown if shown in POWER_STATUSES else "active"


@dataclass(frozen=True, slots=True)
class Phase:
    """From ``at`` on (until the next phase) the platform shows this status and task state."""

    at: datetime
    status: str
    task_state: str | None = None


@dataclass(frozen=True, slots=True)
class Lifecycle:
    cloud: str
    resource_type: str
    resource_id: str
    project_id: str
    name: str
    created_at: datetime
    deleted_at: datetime | None
    intervals: tuple[Interval, ...]
    phases: tuple[Phase, ...]

    @property
    def key(self) -> ResourceKey:
        return ResourceKey(self.cloud, self.resource_type, self.resource_id)

    def alive_at(self, at: datetime) -> bool:
        return self.created_at <= at and (self.deleted_at is None or at < self.deleted_at)

    def interval_at(self, at: datetime) -> Interval | None:
        if not self.alive_at(at):
            return None
        for interval in reversed(self.intervals):
            if interval.start <= at:
                return interval
        return None

    def phase_at(self, at: datetime) -> Phase | None:
        """The status shown at ``at`` (None outside the lifecycle)."""
        if not self.alive_at(at):
            return None
        for phase in reversed(self.phases):
            if phase.at <= at:
                return phase
        return None

    @property
    def size(self) -> Mapping[str, Any]:
        """The last size."""
        return self.intervals[-1].size


def _overlap_micros(start: datetime, end: datetime | None, t0: datetime, t1: datetime) -> int:
    low = max(start, t0)
    high = t1 if end is None else min(end, t1)
    if high <= low:
        return 0
    delta = high - low
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class GroundTruth:
    """Every lifecycle of a simulation, indexed by resource and by the hour each one overlaps.

    An open interval (``end`` None) keeps counting past the simulation's end: the cloud stays as it
    stood, which is also what the platform view shows.
    """

    def __init__(self, lifecycles: Iterable[Lifecycle], *, start: datetime, end: datetime):
        self.start = to_utc(start)
        self.end = to_utc(end)
        self._all = tuple(lifecycles)
        self._by_key: dict[ResourceKey, Lifecycle] = {}
        self._by_group: dict[tuple[str, str], list[Lifecycle]] = {}
        for lc in self._all:
            if lc.key in self._by_key:
                raise ValueError(f"resource {lc.key} has two lifecycles")
            self._by_key[lc.key] = lc
            self._by_group.setdefault((lc.cloud, lc.resource_type), []).append(lc)
        self._buckets = max(1, -(-(self.end - self.start) // _BUCKET))
        self._index: dict[tuple[str, str], list[list[Lifecycle]]] = {}

    @property
    def clouds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(lc.cloud for lc in self._all))

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[Lifecycle]:
        return iter(self._all)

    def lifecycle(self, cloud: str, resource_type: str, resource_id: str) -> Lifecycle:
        return self._by_key[ResourceKey(cloud, resource_type, resource_id)]

    def get(self, key: ResourceKey) -> Lifecycle | None:
        return self._by_key.get(key)

    def lifecycles(self, cloud: str | None = None, resource_type: str | None = None) -> list[Lifecycle]:
        """Lifecycles in generation order, optionally for one cloud and/or one type."""
        if cloud is not None and resource_type is not None:
            return list(self._by_group.get((cloud, resource_type), ()))
        return [
            lc for lc in self._all
            if (cloud is None or lc.cloud == cloud) and (resource_type is None or lc.resource_type == resource_type)
        ]

    def intervals(self, cloud: str | None = None, resource_type: str | None = None) -> Iterator[tuple[ResourceKey, Interval]]:
        for lc in self.lifecycles(cloud, resource_type):
            for interval in lc.intervals:
                yield lc.key, interval

    def alive_at(self, cloud: str, resource_type: str, at: datetime) -> list[Lifecycle]:
        """Lifecycles covering ``at``, ordered by (created_at, resource_id)."""
        at = to_utc(at)
        if at < self.start:
            candidates: Iterable[Lifecycle] = sorted(
                self._by_group.get((cloud, resource_type), ()), key=lambda lc: (lc.created_at, lc.resource_id)
            )
        else:
            buckets = self._bucket_index(cloud, resource_type)
            slot = min(int((at - self.start) // _BUCKET), self._buckets - 1)
            candidates = buckets[slot]
        return [lc for lc in candidates if lc.alive_at(at)]

    def _bucket_index(self, cloud: str, resource_type: str) -> list[list[Lifecycle]]:
        # One list per hour of the window holding every lifecycle that overlaps that hour, so a
        # lookup at an instant scans one hour's population instead of the whole history. The last
        # bucket also serves every instant past the end (nothing is created there).
        index = self._index.get((cloud, resource_type))
        if index is None:
            index = [[] for _ in range(self._buckets)]
            last = self._buckets - 1
            ordered = sorted(self._by_group.get((cloud, resource_type), ()), key=lambda lc: (lc.created_at, lc.resource_id))
            for lc in ordered:
                first = max(0, min(last, int((lc.created_at - self.start) // _BUCKET)))
                if lc.deleted_at is None:
                    final = last
                else:
                    if lc.deleted_at <= self.start:
                        continue
                    final = max(0, min(last, int((lc.deleted_at - self.start) // _BUCKET)))
                for slot in range(first, final + 1):
                    index[slot].append(lc)
            self._index[(cloud, resource_type)] = index
        return index

    def resource_hours(self, cloud: str, resource_type: str, window_start: datetime, window_end: datetime) -> Decimal:
        """Hours resources of the type existed within ``[window_start, window_end)``, exactly."""
        t0, t1 = to_utc(window_start), to_utc(window_end)
        micros = sum(
            _overlap_micros(lc.created_at, lc.deleted_at, t0, t1)
            for lc in self._by_group.get((cloud, resource_type), ())
        )
        return Decimal(micros) / _MICROS_PER_HOUR

    def quantity(self, cloud: str, meter: Meter, window_start: datetime, window_end: datetime,
                 *, project_id: str | None = None) -> Decimal:
        """A meter's usage within the window: ``size[per] / divisor`` per hour (1 when ``per`` is None).

        A missing or null ``per`` field (an image still queued) meters zero.
        """
        t0, t1 = to_utc(window_start), to_utc(window_end)
        total = Decimal(0)
        for lc in self._by_group.get((cloud, meter.resource_type), ()):
            for interval in lc.intervals:
                if project_id is not None and interval.project_id != project_id:
                    continue
                micros = _overlap_micros(interval.start, interval.end, t0, t1)
                if not micros:
                    continue
                if meter.per is None:
                    rate = Decimal(1)
                else:
                    value = interval.size.get(meter.per)
                    if not value:
                        continue
                    rate = Decimal(value) / meter.divisor
                total += rate * Decimal(micros) / _MICROS_PER_HOUR
        return total

    def change_counts(self, cloud: str, resource_type: str | None = None) -> dict[str, int]:
        """Creates, size updates and deletes that happened inside the window (warm creates excluded)."""
        counts = {"create": 0, "update": 0, "delete": 0}
        for lc in self.lifecycles(cloud, resource_type):
            if self.start <= lc.created_at < self.end:
                counts["create"] += 1
            counts["update"] += sum(1 for i in lc.intervals[1:] if self.start <= i.start)
            if lc.deleted_at is not None:
                counts["delete"] += 1
        return counts
