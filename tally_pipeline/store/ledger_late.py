"""The reads a posting batch makes to date late usage exactly (``tally_pipeline.services.ledger.late``).

A batch pins the projection: it reads the watermark its totals correspond to, and on Postgres holds
the projection lock shared until it commits, so no refresh can change the intervals between the
batch's statements (a refresh takes that lock exclusively). It is taken before the checkpoints'
row locks, so a refresh waiting for it never sits between two batches that wait for each other.
"""

from __future__ import annotations

from datetime import datetime

from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.projection_tables import Key
from tally_pipeline.store.usage_sql import UsageSQL


def pin_watermark(uow: UnitOfWork, sql: UsageSQL) -> int:
    """The projection watermark this transaction's reads of the projection correspond to."""
    sql.pin_projection(uow)
    return int(uow.fetchall("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0])


def late_resources(uow: UnitOfWork, since: int, upto: int, before: datetime) -> list[Key]:
    """Resources that received, with ``since < seq <= upto``, an event dated before ``before``.

    Bounded by the seq range (an index on Postgres, row-group pruning on DuckDB, whose log is in seq
    order): in steady state, the events of one schedule interval.
    """
    rows = uow.fetchall(
        "SELECT DISTINCT cloud, resource_type, resource_id FROM events WHERE seq > %s AND seq <= %s"
        " AND occurred_at < %s ORDER BY 1, 2, 3",
        (since, upto, before),
    )
    return [(cloud, rtype, rid) for cloud, rtype, rid in rows]
