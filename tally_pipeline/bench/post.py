"""``tally bench post``: how fast one posting cycle moves N entities, set-based versus naive.

The benchmark builds its own tables (a throw-away schema on Postgres, a temporary file on
DuckDB), so it never touches the data of the database it is pointed at. Every entity is an
instance meter (three per project) or a volume meter; every interval is open, so every cycle
has a delta for every entity. Timed: the first cycle (opens every checkpoint), then steady cycles an
hour apart, each followed by its own write floor (``store.ledger_floor``: writing that cycle's
postings and checkpoints with nothing read or computed, in the same database, among the same earlier
postings), and the naive one-transaction-per-entity poster an hour after the last over a spread sample
of the same entities. The headline is the fastest steady cycle against its own floor: the floor is
the fastest of three tries, so one cycle timed once would be judged by its noise, not its work.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tally_pipeline.bench.naive_poster import post_usage_naively
from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ledger.poster import DEFAULT_BATCH_SIZE, DEFAULT_WORKERS, CycleResult, post_usage
from tally_pipeline.services.ledger.verify import verify
from tally_pipeline.store import Store, ledger_checkpoints
from tally_pipeline.store.ledger_floor import WriteFloor, measure_write_floor
from tally_pipeline.store.scratch import scratch_store

BASE = datetime(2026, 1, 1, tzinfo=UTC)
LAG = 900.0
WINDOW_DAYS = 35

_INSTANCE_SIZES = (
    json.dumps({"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}),
    json.dumps({"flavor_name": "m1.large", "vcpus": 4, "ram_mb": 8192, "disk_gb": 80}),
)
_VOLUME_SIZE = json.dumps({"gb": 100, "volume_type": "ssd"})


def _intervals(entities: int) -> tuple[list[tuple[Any, ...]], int]:
    """Rows for resource_intervals giving ``entities`` entities; returns (rows, entities made)."""
    rows: list[tuple[Any, ...]] = []
    instances, volumes = divmod(entities, 3)
    for n in range(instances):
        project = f"p{n:07d}"
        rid = f"vm-{n:07d}"
        # created 40 days ago (part of it before the window), resized 10 days ago, still running
        rows.append(("bench", "instance", rid, 1, 1, project, _INSTANCE_SIZES[0], BASE - timedelta(days=40), BASE - timedelta(days=10)))
        rows.append(("bench", "instance", rid, 2, 1, project, _INSTANCE_SIZES[1], BASE - timedelta(days=10), None))
    for n in range(volumes):
        rows.append(("bench", "volume", f"vol-{n}", 1, 1, f"q{n:07d}", _VOLUME_SIZE, BASE - timedelta(days=3), None))
    return rows, instances * 3 + volumes


def _timed(store: Store, fn: Any) -> tuple[Any, float]:
    """``fn()`` and its seconds, started on a clean slate: no garbage pending, no dirty pages (each timed
    step would otherwise pay for the writes of the one before, or run into a checkpoint they set off)."""
    gc.collect()
    store.checkpoint()
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _steady(store: Store, cycle: Callable[[datetime], CycleResult], now: datetime) -> tuple[CycleResult, float, WriteFloor]:
    """One steady cycle, timed, and its write floor, measured before the next cycle adds postings."""
    result, seconds = _timed(store, lambda: cycle(now))
    return result, seconds, measure_write_floor(store, result.cycle_id)


def bench_post(
    url: str,
    entities: int,
    *,
    naive_sample: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    workers: int | None = None,
    steady_cycles: int = 3,
    keep: bool = False,
) -> dict[str, Any]:
    """Run the benchmark against the database server ``url`` names; return the figures.

    ``naive_sample`` defaults to 10,000 entities on Postgres and 200 on DuckDB, where every
    transaction opens the file. ``steady_cycles``: how many steady cycles are timed.
    """
    if entities < 3:
        raise ValueError("use at least 3 entities")
    if steady_cycles < 1:
        raise ValueError("time at least one steady cycle")
    registry = default_registry()
    with scratch_store(url, keep=keep) as store:
        return _run(store, registry, entities, naive_sample, batch_size, workers, steady_cycles)


def _run(
    store: Store, registry: Any, entities: int, naive_sample: int | None, batch_size: int, workers: int | None,
    steady_cycles: int,
) -> dict[str, Any]:
    if naive_sample is None:
        naive_sample = 10_000 if store.dialect == "postgres" else 200
    rows, made = _intervals(entities)
    store.load_intervals(rows)
    def cycle(now: datetime) -> CycleResult:
        return post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS, batch_size=batch_size,
                          workers=workers)


    first, first_s = _timed(store, lambda: cycle(BASE))
    steadies = [_steady(store, cycle, BASE + timedelta(hours=hour)) for hour in range(1, steady_cycles + 1)]
    steady, steady_s, floor = min(steadies, key=lambda timed: timed[1])
    store.run(store.usage_sql().refresh_statistics)
    keys = [EntityKey(*key) for key in ledger_checkpoints.entity_keys(store)]
    sample_size = max(1, min(naive_sample, len(keys)))
    step = len(keys) / sample_size
    sample = [keys[int(i * step)] for i in range(sample_size)]
    naive, naive_s = _timed(
        store,
        lambda: post_usage_naively(store, registry, sample, now=BASE + timedelta(hours=steady_cycles + 1), ingest_lag=LAG, window_days=WINDOW_DAYS)
    )
    check, verify_s = _timed(store, lambda: verify(store, registry))

    rate = made / steady_s
    naive_rate = len(sample) / naive_s
    return {
        "backend": store.dialect,
        "entities": made,
        "intervals": len(rows),
        "batch_size": batch_size,
        "workers": workers if workers is not None else (DEFAULT_WORKERS if store.parallel_writes else 1),
        "steady_cycles": [{"seconds": round(seconds, 3), "floor_s": round(own.seconds, 3),
                           "ratio_to_floor": round(seconds / own.seconds, 2)} for _, seconds, own in steadies],
        "entities_per_s": round(rate, 1),
        "seconds": round(steady_s, 3),
        "entities_with_delta": len(steady.posted),
        "postings": steady.postings,
        # What the steady cycle cannot do without: COPY its postings, one update of every checkpoint.
        "floor_s": round(floor.seconds, 3),
        "floor": {"postings": floor.postings, "postings_s": round(floor.postings_s, 3), "earlier_postings": floor.held,
                  "checkpoints": floor.checkpoints, "checkpoints_s": round(floor.checkpoints_s, 3)},
        "ratio_to_floor": round(steady_s / floor.seconds, 2),
        "first_cycle_entities_per_s": round(made / first_s, 1),
        "first_cycle_postings": first.postings,
        "naive_entities_per_s": round(naive_rate, 1),
        "naive_sample": len(sample),
        "naive_entities_with_delta": len(naive.posted),
        "speedup": round(rate / naive_rate, 2),
        "verify_s": round(verify_s, 3),
        "verify_ok": check.ok,
    }
