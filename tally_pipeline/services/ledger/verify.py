"""Ledger verification: for every entity, do its postings add up to its usage through its checkpoint?

One statement (one snapshot, so a poster running meanwhile cannot make it see half a batch)
recomputes each checkpointed entity's cumulative usage through the checkpoint's clamp from
``resource_intervals`` and sums its postings over both accounts. Only disagreeing entities come
back to Python. In the same snapshot it lists the entities with usage that no cycle has posted,
and what the latest cycle skipped or excluded. Cheap enough to run after every posting cycle (the
Dagster asset check; ``Verification.audit`` is that check's verdict).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from tally_pipeline.core.registry import Meter, SizeSchemaRegistry
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.core.usage import to_micro, to_units
from tally_pipeline.store import ledger_checkpoints, ledger_records
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.usage_sql import UsageSQL

Kind = Literal[
    "orphan_postings", "ledger_mismatch", "unknown_meter", "unreadable_usage", "skipped", "history_changed",
    "never_posted",
]

#: Kinds that mean the ledger itself is inconsistent, whatever happened to history since.
LEDGER_KINDS: frozenset[str] = frozenset({"orphan_postings", "ledger_mismatch"})
#: Kinds the next cycle settles by itself: history changed after a cycle, or usage arrived for an
#: entity after the latest cycle (or before the first). The audit shows them and passes.
PENDING_KINDS: frozenset[str] = frozenset({"history_changed", "never_posted"})
# Every other kind (unknown_meter, unreadable_usage, skipped) is usage the ledger leaves unbilled
# until someone corrects the history or the registry: the audit fails on it.


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """One entity whose postings do not match. Amounts in the meter's unit."""

    cloud: str
    project_id: str
    meter: str
    kind: Kind
    clamp: datetime | None
    posted: Decimal
    checkpoint_total: Decimal | None
    recomputed: Decimal | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "project_id": self.project_id,
            "meter": self.meter,
            "kind": self.kind,
            "clamp": format_rfc3339(self.clamp) if self.clamp else None,
            "posted": str(self.posted),
            "checkpoint_total": None if self.checkpoint_total is None else str(self.checkpoint_total),
            "recomputed": None if self.recomputed is None else str(self.recomputed),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Audit:
    """The ``ledger_balanced`` check's verdict.

    ``blocking``: the ledger's own sums are broken, so posting onto it must stop (Dagster severity
    ERROR). Unbilled usage (skips, exclusions) fails the audit too, but does not stop the cycle:
    stopping it would leave every other entity unbilled as well (severity WARN).
    """

    passed: bool
    blocking: bool
    broken: list[Discrepancy]
    unbilled: list[Discrepancy]
    pending: list[Discrepancy]

    @property
    def failing(self) -> list[Discrepancy]:
        return self.broken + self.unbilled


@dataclass
class Verification:
    entities: int  # checkpoints that have been posted at least once
    discrepancies: list[Discrepancy] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.discrepancies

    def audit(self) -> Audit:
        broken = [d for d in self.discrepancies if d.kind in LEDGER_KINDS]
        pending = [d for d in self.discrepancies if d.kind in PENDING_KINDS]
        unbilled = [d for d in self.discrepancies if d.kind not in LEDGER_KINDS | PENDING_KINDS]
        return Audit(not broken and not unbilled, bool(broken), broken, unbilled, pending)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entities": self.entities,
            "discrepancies": [d.to_dict() for d in self.discrepancies],
        }


def verify(store: Store, registry: SizeSchemaRegistry | None = None, *, include_history: bool = True) -> Verification:
    """Compare every entity's postings with its usage recomputed through its checkpoint's clamp.

    ``include_history=False`` reports only inconsistencies of the ledger itself (postings that do
    not sum to their checkpoint, postings without one), not history that changed after a cycle,
    usage never posted, or what the latest cycle skipped.
    """
    if registry is None:
        from tally_pipeline.schemas import default_registry

        registry = default_registry()
    return store.run(lambda uow: _verify(uow, store, registry, include_history))


def verify_in(uow: UnitOfWork, store: Store, registry: SizeSchemaRegistry) -> Verification:
    """``verify`` inside a caller's unit of work: its findings describe the snapshot the caller reads
    (closing a month reads the month's usage in the same one)."""
    return _verify(uow, store, registry, True)


def _verify(uow: UnitOfWork, store: Store, registry: SizeSchemaRegistry, include_history: bool) -> Verification:
    sql = store.usage_sql()
    meters = registry.meters()
    known = {m.name for m in meters}
    rows = ledger_checkpoints.disagreements(uow, sql, meters)
    checked = ledger_checkpoints.posted_count(uow)
    found: list[Discrepancy] = []
    for row in rows:
        posted = to_micro(row.posted) if row.posted is not None else 0
        checkpoint_total = to_micro(row.total) if row.total is not None else None
        recomputed = row.micro if row.micro is not None else 0
        kind: Kind
        if not row.has_checkpoint:
            kind, detail = "orphan_postings", "postings exist for an entity without a checkpoint"
        elif posted != checkpoint_total:
            kind, detail = "ledger_mismatch", "the postings do not sum to the checkpoint's total"
        elif row.meter not in known:
            kind, detail = "unknown_meter", f"{row.meter} is not registered; usage cannot be recomputed"
        elif row.unusable:
            kind, detail = "unreadable_usage", f"{row.example}"
        else:
            kind = "history_changed"
            detail = "usage through the clamp changed after the cycle; the next cycle posts the difference"
        if not include_history and kind not in LEDGER_KINDS:
            continue
        readable = row.has_checkpoint and row.clamp is not None and not row.unusable and row.meter in known
        found.append(
            Discrepancy(
                row.cloud,
                row.project_id,
                row.meter,
                kind,
                row.clamp,
                to_units(posted),
                None if checkpoint_total is None else to_units(checkpoint_total),
                to_units(recomputed) if readable else None,
                detail,
            )
        )
    if include_history:
        found += _unposted(uow, sql, meters)
        found.sort(key=lambda d: (d.cloud, d.project_id, d.meter))
    return Verification(checked, found)


def _unposted(uow: UnitOfWork, sql: UsageSQL, meters: Sequence[Meter]) -> list[Discrepancy]:
    """Entities with usage no cycle posted, and what the latest cycle skipped or excluded."""
    latest = ledger_records.latest_cycle(uow)
    # usage dated before the latest cycle's clamp should have been posted by it; before the first
    # cycle, every entity with usage is unposted
    relation = sql.meters(meters)
    out = [
        Discrepancy(cloud, project_id, meter, "never_posted", None, Decimal(0), None, None,
                    "usage but no posting: " + ("no cycle has run yet" if latest is None else
                                                f"not posted by the latest cycle (clamp {format_rfc3339(latest[1])})"))
        for cloud, project_id, meter in ledger_records.never_posted(
            uow, relation.sql, relation.params, None if latest is None else latest[1])
    ]
    for skip in ledger_records.latest_skips(uow):
        what = (f"posted without {skip.excluded_intervals} interval(s) the meters cannot read"
                if skip.excluded_intervals else "not posted by the latest cycle")
        out.append(Discrepancy(skip.cloud, skip.project_id, skip.meter, "skipped", None, Decimal(0), None, None,
                               f"{what}: {skip.detail}"))
    return out
