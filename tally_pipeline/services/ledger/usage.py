"""Cumulative usage per entity as the stores compute it: the SQL twin of ``core.usage``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.store import usage_reads
from tally_pipeline.store.base import Store


@dataclass
class UsageTotals:
    """Micro-units per entity through an instant; entities with an unusable size are apart, with why."""

    through: datetime
    micro: dict[EntityKey, int] = field(default_factory=dict)
    unusable: dict[EntityKey, str] = field(default_factory=dict)


def cumulative_usage(store: Store, registry: SizeSchemaRegistry, through: datetime) -> UsageTotals:
    """Every entity's usage through ``through`` from ``resource_intervals``."""
    totals = UsageTotals(through)
    for row in usage_reads.cumulative_usage(store, registry.meters(), through):
        key = EntityKey(row.cloud, row.project_id, row.meter)
        if row.unusable:
            totals.unusable[key] = str(row.example)
        else:
            totals.micro[key] = row.micro
    return totals
