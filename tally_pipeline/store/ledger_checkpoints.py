"""``usage_checkpoints``: the poster's statements on it (the only writer), and the reads that hold
it against the postings and the intervals (the audit, the benchmark).

``ledger.poster`` decides what to post; the statements here run inside its transactions. A batch is
a run of the listing in key order, so its statements address it as a key range.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from tally_pipeline.core.ledger import Checkpoint, CycleWindow, EntityKey
from tally_pipeline.core.registry import Meter
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.usage_sql import EVALUATE_ONCE, Fragment, UsageSQL, compose, p


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


# -- the poster's statements ---------------------------------------------------------------------

# A steady cycle lists every checkpoint and needs the clamp of almost none: one before the cycle's
# clamp (or none yet) posts whatever its value. Sending only the others' clamps spares turning 100,000
# timestamps into datetimes (measured: 66-71 ms against 117-137 ms for the listing of 100,000).
_LISTING = (
    "SELECT cloud, project_id, meter, CASE WHEN clamp >= %s THEN clamp END FROM usage_checkpoints"
    " ORDER BY cloud, project_id, meter"
)


def listing(store: Store, clamp: datetime, size: int) -> Generator[list[tuple[str, str, str, datetime | None]], None, None]:
    """Every checkpoint's key, in key order, and its clamp where that is at or past ``clamp`` (None
    where it is before ``clamp`` or the entity was never posted: both post at this clamp); ``size``
    rows at a time, the first before the rest are read (``Store.query_chunks``)."""
    return store.query_chunks(_LISTING, (clamp,), size)


def count(store: Store) -> int:
    """How many checkpoints there are."""
    return int(store.query("SELECT count(*) FROM usage_checkpoints")[0][0])


def open_checkpoints(uow: UnitOfWork, sql: UsageSQL, keys: Sequence[EntityKey]) -> None:
    """Give entities a checkpoint row (total 0, never posted); rows that exist are left alone.

    Inserted in key order so that posters opening the same entities at once wait for each other
    in the same order and never deadlock.
    """
    with ExitStack() as stack:
        statement = compose(
            "INSERT INTO usage_checkpoints (cloud, project_id, meter) SELECT k.cloud, k.project_id, k.meter FROM ",
            _keys_relation(uow, stack, sql, keys),
            " ORDER BY 1, 2, 3 ON CONFLICT DO NOTHING",
        )
        uow.execute(statement.sql, statement.params)


def _keys_relation(uow: UnitOfWork, stack: ExitStack, sql: UsageSQL, keys: Sequence[EntityKey]) -> Fragment:
    return sql.rows(
        uow,
        stack,
        "k",
        [("cloud", "text"), ("project_id", "text"), ("meter", "text")],
        [[k.cloud for k in keys], [k.project_id for k in keys], [k.meter for k in keys]],
    )


def batch_range(sql: UsageSQL, keys: Sequence[EntityKey], *, exact: bool = True) -> Fragment:
    """The batch as a run of checkpoint keys: a batch is a slice of the listing in key order."""
    first, last = keys[0], keys[-1]
    return sql.key_range(
        (first.cloud, first.project_id, first.meter), (last.cloud, last.project_id, last.meter), exact=exact
    )


def lock_batch(uow: UnitOfWork, sql: UsageSQL, keys: Sequence[EntityKey]) -> dict[tuple[str, str, str], Checkpoint]:
    """Read the checkpoints in the batch's key range; on Postgres row-lock them, in key order.

    The range may hold entities that are not in the batch (opened since the listing, or filtered
    out); they are locked and left alone.
    """
    statement = compose(
        "SELECT c.cloud, c.project_id, c.meter, ",
        sql.amount_to_micro("c.total"),
        ", c.clamp, c.aged_boundary, ",
        sql.amount_to_micro("c.aged_before"),
        ", c.watermark FROM usage_checkpoints c WHERE TRUE",
        batch_range(sql, keys),
        " ORDER BY c.cloud, c.project_id, c.meter ",
        sql.lock_rows(),
    )
    # keyed by plain (cloud, project_id, meter) tuples: an EntityKey is a tuple, so it finds them
    return {
        (cloud, project_id, meter): Checkpoint(int(total), clamp, boundary, int(before), watermark)
        for cloud, project_id, meter, total, clamp, boundary, before, watermark
        in uow.fetchall(statement.sql, statement.params)
    }


def advance(
    uow: UnitOfWork,
    stack: ExitStack,
    sql: UsageSQL,
    window: CycleWindow,
    cycle_id: str,
    advanced: Sequence[tuple[EntityKey, Checkpoint]],
    watermark: int,
) -> None:
    """Move the batch's checkpoints to this cycle: its clamp and boundary, their new totals, and the
    projection watermark the totals were read at."""
    rows = sql.rows(
        uow,
        stack,
        "r",
        [("cloud", "text"), ("project_id", "text"), ("meter", "text"), ("total", "micro"), ("aged_before", "micro")],
        [
            [k.cloud for k, _ in advanced],
            [k.project_id for k, _ in advanced],
            [k.meter for k, _ in advanced],
            [str(c.total) for _, c in advanced],
            [str(c.aged_before) for _, c in advanced],
        ],
    )
    statement = compose(
        "UPDATE usage_checkpoints AS c SET total = ",
        sql.micro_to_amount("r.total"),
        ", clamp = ",
        p(window.clamp),
        ", aged_boundary = ",
        p(window.boundary),
        ", aged_before = ",
        sql.micro_to_amount("r.aged_before"),
        ", watermark = ",
        p(watermark),
        ", cycle_id = ",
        p(cycle_id),
        ", updated_at = ",
        p(datetime.now(UTC)),
        " FROM ",
        rows,
        " WHERE c.cloud = r.cloud AND c.project_id = r.project_id AND c.meter = r.meter",
        batch_range(sql, [key for key, _ in advanced], exact=False),
    )
    uow.execute(statement.sql, statement.params)
