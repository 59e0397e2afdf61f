"""Reads of ``usage_checkpoints`` held against the postings and the intervals (the audit, the benchmark).

The poster writes the checkpoints (``ledger.poster``, until its statements move into the store).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from tally_pipeline.core.registry import Meter
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.usage_sql import EVALUATE_ONCE, UsageSQL, compose


@dataclass(frozen=True, slots=True)
class Disagreement:
    """An entity whose checkpoint, postings and recomputed usage do not all agree.

    ``total`` and ``posted`` are amounts in the meter's unit; ``micro`` is the usage recomputed
    through the clamp, ``unusable`` the intervals it could not read (one named in ``example``).
    """

    cloud: str
    project_id: str
    meter: str
    has_checkpoint: bool
    clamp: datetime | None
    total: Decimal | None
    posted: Decimal | None
    micro: int | None
    unusable: int
    example: str | None


def disagreements(uow: UnitOfWork, sql: UsageSQL, meters: Sequence[Meter]) -> list[Disagreement]:
    """Entities whose postings do not sum to their checkpoint's total, whose checkpoint's total is
    not their usage recomputed through its clamp, or whose postings have no checkpoint; in key order.

    One statement, so one snapshot: a poster running meanwhile cannot show half a batch.
    """
    statement = compose(
        "WITH recomputed AS (SELECT x.cloud, x.project_id, x.meter, sum(",
        sql.usage("x.t"),
        ") AS micro, count(*) - count(x.v) AS n_bad, min(CASE WHEN x.v IS NULL THEN ",
        sql.bad_value(),
        " END) AS example FROM (SELECT c.cloud, c.project_id, c.meter, ",
        sql.us("c.clamp"),
        " AS t, ",
        sql.interval_columns(),
        " FROM usage_checkpoints c JOIN ",
        sql.meters(meters),
        " ON m.meter = c.meter JOIN resource_intervals i ON i.cloud = c.cloud"
        " AND i.project_id = c.project_id AND i.resource_type = m.resource_type AND i.start_at < c.clamp"
        " WHERE c.clamp IS NOT NULL",
        EVALUATE_ONCE,
        ") x GROUP BY x.cloud, x.project_id, x.meter),"
        " posted AS (SELECT cloud, project_id, meter, sum(amount) AS amount"
        " FROM ledger_postings GROUP BY cloud, project_id, meter)"
        " SELECT coalesce(c.cloud, p.cloud), coalesce(c.project_id, p.project_id), coalesce(c.meter, p.meter),"
        " c.cloud IS NOT NULL, c.clamp, c.total, p.amount, r.micro, r.n_bad, r.example"
        " FROM usage_checkpoints c"
        " FULL JOIN posted p ON p.cloud = c.cloud AND p.project_id = c.project_id AND p.meter = c.meter"
        " LEFT JOIN recomputed r ON r.cloud = c.cloud AND r.project_id = c.project_id AND r.meter = c.meter"
        " WHERE c.cloud IS NULL OR coalesce(p.amount, 0) <> c.total"
        " OR (c.clamp IS NOT NULL AND (coalesce(r.n_bad, 0) > 0 OR coalesce(r.micro, 0) <> ",
        sql.amount_to_micro("c.total"),
        ")) ORDER BY 1, 2, 3",
    )
    return [
        Disagreement(cloud, project_id, meter, bool(has_checkpoint), clamp, total, amount,
                     None if micro is None else int(micro), int(n_bad or 0), None if example is None else str(example))
        for cloud, project_id, meter, has_checkpoint, clamp, total, amount, micro, n_bad, example
        in uow.fetchall(statement.sql, statement.params)
    ]


def posted_count(uow: UnitOfWork) -> int:
    """Checkpoints posted at least once (those with a clamp)."""
    return int(uow.fetchall("SELECT count(*) FROM usage_checkpoints WHERE clamp IS NOT NULL")[0][0])


def entity_keys(store: Store) -> list[tuple[str, str, str]]:
    """Every checkpointed (cloud, project_id, meter), in key order."""
    return [(c, p, m) for c, p, m in store.query("SELECT cloud, project_id, meter FROM usage_checkpoints ORDER BY 1, 2, 3")]
