"""Cumulative usage per entity as the stores compute it: the SQL twin of ``core.usage``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.usage import epoch_us
from tally_pipeline.ledger.usage_sql import EVALUATE_ONCE, UsageSQL, compose, p
from tally_pipeline.store.base import Store


@dataclass
class UsageTotals:
    """Micro-units per entity through an instant; entities with an unusable size are apart, with why."""

    through: datetime
    micro: dict[EntityKey, int] = field(default_factory=dict)
    unusable: dict[EntityKey, str] = field(default_factory=dict)


def cumulative_usage(store: Store, registry: SizeSchemaRegistry, through: datetime) -> UsageTotals:
    """Every entity's usage through ``through`` from ``resource_intervals`` (one statement)."""
    sql = UsageSQL(store.dialect)
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
        sql.meters(registry.meters()),
        " ON m.resource_type = i.resource_type WHERE i.start_at < ",
        p(through),
        EVALUATE_ONCE,
        ") x GROUP BY x.cloud, x.project_id, x.meter",
    )
    totals = UsageTotals(through)
    for cloud, project_id, meter, micro, n_bad, example in store.query(statement.sql, statement.params):
        key = EntityKey(cloud, project_id, meter)
        if n_bad:
            totals.unusable[key] = str(example)
        else:
            totals.micro[key] = int(micro)
    return totals
