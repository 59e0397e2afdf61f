"""``collector_type_activity``: per (cloud, resource type), when the collector last stored an event of it.

Kept in the ingest transaction (``note``), as ``cloud_activity`` is per cloud, and read by the
service-events-silent alert and ``/metrics``: a type the sync keeps correcting while the collector
carries none of it is a service publishing where the collector does not listen. Plain SQL meaning the
same in both dialects.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from tally_pipeline.store.base import Store, UnitOfWork


def note(uow: UnitOfWork, counts: Mapping[tuple[str, str], int], received_at: datetime) -> None:
    """Add collector events stored per (cloud, resource_type) at ``received_at``: one statement for the
    batch, its rows in key order (two batches lock them in the same order: no deadlocks)."""
    if not counts:
        return
    keys = sorted(counts)
    uow.execute(
        "INSERT INTO collector_type_activity AS a (cloud, resource_type, first_collector_event, "
        "last_collector_event, collector_events) VALUES "
        + ", ".join(["(%s, %s, %s, %s, %s)"] * len(keys))
        + " ON CONFLICT (cloud, resource_type) DO UPDATE SET "
        "last_collector_event = greatest(a.last_collector_event, excluded.last_collector_event), "
        "collector_events = a.collector_events + excluded.collector_events",
        [p for cloud, rtype in keys for p in (cloud, rtype, received_at, received_at, counts[(cloud, rtype)])],
    )


def last_collector_events(store: Store) -> list[tuple[str, str, datetime]]:
    """``(cloud, resource_type, last collector event stored)``, by cloud and type."""
    return [(c, t, at) for c, t, at in store.query(
        "SELECT cloud, resource_type, last_collector_event FROM collector_type_activity ORDER BY cloud, resource_type")]
