"""A ``PlatformView`` from fixed lists, for tests and benchmarks that need no simulator."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from tally_pipeline.providers.simulated.platform import FailureMode, PlatformRecord
from tally_pipeline.schemas import default_registry

RESOURCE_TYPES = default_registry().in_order


@dataclass
class StaticView:
    """A ``PlatformView`` from fixed lists: tests and benchmarks that need no simulator.

    ``records`` are what the platform lists at any instant; ``deleted`` are nova's deleted servers
    (status ``DELETED``, ``deleted_at`` set), filtered to ``[since, at]``; ``failures`` are the
    view's own failure modes per type.
    """

    records_by_type: dict[str, list[PlatformRecord]] = field(default_factory=dict)
    deleted: list[PlatformRecord] = field(default_factory=list)
    failures: dict[str, FailureMode] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[PlatformRecord], deleted: list[PlatformRecord] | None = None) -> StaticView:
        by_type: dict[str, list[PlatformRecord]] = {t: [] for t in RESOURCE_TYPES}
        for record in records:
            by_type.setdefault(record.resource_type, []).append(record)
        return cls(by_type, list(deleted or []))

    def records(self, cloud: str, resource_type: str, at: datetime) -> list[PlatformRecord]:
        return list(self.records_by_type.get(resource_type, ()))

    def deleted_servers(self, cloud: str, since: datetime, at: datetime) -> list[PlatformRecord]:
        return [r for r in self.deleted if r.deleted_at is not None and since <= r.deleted_at <= at]

    def failure(self, cloud: str, resource_type: str) -> FailureMode | None:
        return self.failures.get(resource_type)

    def __iter__(self) -> Iterator[PlatformRecord]:
        for records in self.records_by_type.values():
            yield from records
