"""Usage read from ``resource_intervals`` through the meter rule in SQL (``usage_sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tally_pipeline.core.registry import Meter
from tally_pipeline.core.usage import epoch_us
from tally_pipeline.store.base import Store
from tally_pipeline.store.usage_sql import EVALUATE_ONCE, compose, p


@dataclass(frozen=True, slots=True)
class EntityUsage:
    """An entity's micro-units through an instant; ``unusable`` intervals (one named in ``example``) add nothing."""

    cloud: str
    project_id: str
    meter: str
    micro: int
    unusable: int = 0
    example: str | None = None


def cumulative_usage(store: Store, meters: Sequence[Meter], through: datetime) -> list[EntityUsage]:
    """Every entity's usage through ``through`` (one statement)."""
    sql = store.usage_sql()
    statement = compose(
        "SELECT x.cloud, x.project_id, x.meter, sum(",
        sql.usage("x.t"),
        "), count(*) - count(x.v), min(CASE WHEN x.v IS NULL THEN ",
        sql.bad_value(),
        " END) FROM (SELECT i.cloud, i.project_id, m.meter, ",
        sql.bigint(epoch_us(through)),
        " AS t, ",
        sql.interval_columns(),
        " FROM resource_intervals i JOIN ",
        sql.meters(meters),
        " ON m.resource_type = i.resource_type WHERE i.start_at < ",
        p(through),
        EVALUATE_ONCE,
        ") x GROUP BY x.cloud, x.project_id, x.meter",
    )
    return [
        EntityUsage(cloud, project_id, meter, int(micro or 0), int(n_bad or 0), None if example is None else str(example))
        for cloud, project_id, meter, micro, n_bad, example in store.query(statement.sql, statement.params)
    ]
