"""The posting cycle's write floor (``tally bench post``): it writes exactly the cycle's rows, into copies
holding what the tables held before the cycle."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tally_pipeline.bench.post import BASE, LAG, WINDOW_DAYS, _intervals
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.store.base import Store
from tally_pipeline.store.ledger_floor import measure_write_floor


def _ledger(store: Store) -> list[tuple]:
    return sorted(store.query("SELECT cloud, project_id, meter, clamp, account, amount FROM ledger_postings")) + \
        sorted(store.query("SELECT cloud, project_id, meter, total, clamp, cycle_id FROM usage_checkpoints"))


@pytest.mark.parametrize("store_url", ["duckdb", "postgres"], indirect=True)
def test_the_floor_writes_the_cycles_rows_into_copies_and_leaves_the_ledger_as_it_was(store: Store) -> None:
    rows, entities = _intervals(30)
    store.load_intervals(rows)
    registry = default_registry()
    first = post_usage(store, registry, now=BASE, ingest_lag=LAG, window_days=WINDOW_DAYS)
    steady = post_usage(store, registry, now=BASE + timedelta(hours=1), ingest_lag=LAG, window_days=WINDOW_DAYS)
    before = _ledger(store)

    floor = measure_write_floor(store, steady.cycle_id)

    assert floor.postings == steady.postings == entities and floor.checkpoints == entities
    assert floor.held == first.postings > entities  # the copy held the first cycle's usage and aged_out rows
    assert floor.postings_s > 0 and floor.checkpoints_s > 0 and floor.seconds == floor.postings_s + floor.checkpoints_s
    assert _ledger(store) == before
    tables = {name for (name,) in store.query("SELECT table_name FROM information_schema.tables")}
    assert not {"_floor_postings", "_floor_checkpoints"} & tables
