"""``tally bench dead-letter``: what one rejected item costs as the dead letter grows.

Each write is one ingest of one refused item (a payload of ``item_kb`` KiB under a size the
registry refuses), through the same ingest core the API uses, one after another, timed alone. The
report gives the latency of the writes in each tenth of the run against the dead letter's size at
that point, so a cost that grows with the table shows as a rising p50 (each write paying for it) or
a rising p99 (some writes paying for many).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from tally_pipeline.bench.common import percentile
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store


def refused_item(n: int, item_kb: int) -> dict[str, Any]:
    """An otherwise valid event whose size the registry refuses (``size_schema``), ``item_kb`` KiB long."""
    return {"event_id": f"dl-{n:08d}", "event_type": "volume.create.end", "cloud": "bench",
            "resource_type": "volume", "resource_id": f"v-{n}", "project_id": "p", "occurred_at":
            "2026-01-01T00:00:00Z", "payload": {"size": {"flavor_name": "x"}, "junk": "x" * (item_kb * 1024)}}


def run(database: str, *, rows: int, item_kb: int, progress: Callable[[int], None] = lambda _n: None) -> dict[str, Any]:
    store = open_store(database, migrate=True)
    ingestor = Ingestor(store, default_registry())
    latencies: list[float] = []
    try:
        for n in range(rows):
            start = time.perf_counter()
            outcome = ingestor.ingest([refused_item(n, item_kb)], origin="bench")
            latencies.append(time.perf_counter() - start)
            if outcome.rejected != 1:
                raise RuntimeError(f"item {n} was not refused: {outcome}")
            progress(1)
        stored, raw_bytes = store.query(f"SELECT count(*), sum({store.raw_bytes_sql}) FROM rejected_events")[0]
    finally:
        store.close()
    tenth = max(1, rows // 10)
    steps = []
    for start in range(0, rows, tenth):
        part = latencies[start:start + tenth]
        steps.append({"rows_before": start, "dead_letter_mb": round(start * item_kb / 1024, 1),
                      "p50_s": round(statistics.median(part), 4), "p99_s": round(percentile(part, 0.99), 4),
                      "max_s": round(max(part), 4), "mean_s": round(statistics.fmean(part), 4)})
    return {"database": database.split("://")[0], "rows": rows, "item_kb": item_kb, "stored": stored,
            "raw_mb_stored": round((raw_bytes or 0) / 2**20, 1), "total_s": round(sum(latencies), 2), "by_size": steps}
