"""Pending usage: what a posting cycle at this instant would post, read without posting it.

It is the poster's own rule on the poster's own inputs: the same totals (``store.ledger_reads``
computes them as a posting batch does), the same late usage (``late.late_for``) and the same
split (``core.ledger.plan_delta``), so ``tally post-usage`` at the same instant posts exactly these
amounts (a test holds that). Nothing is locked or written: an entity with usage and no checkpoint
yet is read as never posted, and one whose checkpoint is at or past the clamp has nothing pending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tally_pipeline.core.ledger import (
    Checkpoint,
    CycleWindow,
    Delta,
    EntityKey,
    EntityTotals,
    NonMonotonicCheckpoint,
    plan_delta,
)
from tally_pipeline.core.registry import Meter
from tally_pipeline.services.ledger.late import LateMemo, late_for
from tally_pipeline.store import ledger_late, ledger_reads
from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.ledger_reads import Scope
from tally_pipeline.store.usage_sql import UsageSQL

_ZERO = EntityTotals(0, 0, 0)


@dataclass(frozen=True, slots=True)
class PendingEntity:
    """An entity's delta not yet posted: ``delta.amounts()`` by account, from ``checkpoint``;
    ``excluded`` intervals of its history the meters cannot read (counted as nothing, as the poster does)."""

    key: EntityKey
    checkpoint: Checkpoint
    delta: Delta
    excluded: int = 0


def pending_usage(
    uow: UnitOfWork,
    sql: UsageSQL,
    meters: Sequence[Meter],
    window: CycleWindow,
    scope: Scope,
    *,
    first: EntityKey | None = None,
    last: EntityKey | None = None,
) -> list[PendingEntity]:
    """The entities in scope from ``first`` to ``last`` (inclusive) with something pending, in key order.

    Read inside the caller's transaction; ``window`` is the cycle's that would post it
    (``CycleWindow.at(now, …)`` with the ledger's settings). An entity whose meter is no longer
    registered is left out, as the poster skips it.
    """
    registered = {m.name for m in meters}
    watermark = ledger_late.pin_watermark(uow, sql)
    checkpoints, totals, bad = ledger_reads.pending_inputs(
        uow, sql, sql.meters(meters), window, scope, first=first, last=last
    )
    todo: list[tuple[EntityKey, Checkpoint]] = []
    for key in sorted(checkpoints.keys() | totals.keys()):
        if key.meter in registered:
            todo.append((key, checkpoints.get(key, Checkpoint())))
    memo: LateMemo = {}
    late = late_for(uow, sql, meters, window, todo, watermark, memo)
    out: list[PendingEntity] = []
    for key, checkpoint in todo:
        try:
            delta = plan_delta(checkpoint, totals.get(key, _ZERO), window, key, late=late.get(key, 0),
                               watermark=watermark)
        except NonMonotonicCheckpoint:
            continue  # posted past this clamp already: nothing is pending (the poster reports it)
        if delta is not None and delta.amounts():
            out.append(PendingEntity(key, checkpoint, delta, bad.get(key, (0, ""))[0]))
    return out
