"""``tally bench reconcile``: the diff of one cloud of N resources against a projection of N, 1 % drift.

Setup (not timed) writes N live resources into ``current_resources`` and builds a listing of the
same N with 1 % drift: a third missing (missed deletes), a third new (missed creates), a third
resized. Timed: reading the projection rows from the store, and the pure diff. Listing time is
excluded (it belongs to the platform).
"""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from tally_pipeline.bench.common import peak_rss_mb, timer
from tally_pipeline.core import reconcile as rules
from tally_pipeline.providers.interface import Enumerated, ListedResource
from tally_pipeline.services.reconciliation import projected_resources
from tally_pipeline.store import open_store

_FLAVORS = [
    {"disk_gb": 20, "flavor_name": "m1.small", "ram_mb": 2048, "vcpus": 1},
    {"disk_gb": 40, "flavor_name": "m1.medium", "ram_mb": 4096, "vcpus": 2},
    {"disk_gb": 80, "flavor_name": "m1.large", "ram_mb": 8192, "vcpus": 4},
]
_SIZE_TEXT = ['{"disk_gb":20,"flavor_name":"m1.small","ram_mb":2048,"vcpus":1}',
              '{"disk_gb":40,"flavor_name":"m1.medium","ram_mb":4096,"vcpus":2}',
              '{"disk_gb":80,"flavor_name":"m1.large","ram_mb":8192,"vcpus":4}']


def _measure(n: int, database: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    now = datetime(2026, 6, 1, tzinfo=UTC)
    old = now - timedelta(days=3)
    store = open_store(database)
    cloud = f"bench-{n}"
    utc = pa.timestamp("us", tz="UTC")
    table = pa.table({
        "cloud": [cloud] * n,
        "resource_type": ["instance"] * n,
        "resource_id": [f"srv-{i}" for i in range(n)],
        "status": ["live"] * n,
        "project_id": [f"proj-{i % 97}" for i in range(n)],
        "size": [_SIZE_TEXT[i % 3] for i in range(n)],
        "created_at": pa.array([old] * n, utc),
        "last_event_at": pa.array([old] * n, utc),
        "last_seq": pa.array(list(range(n)), pa.int64()),
        "event_count": pa.array([1] * n, pa.int32()),
        "platform_status": ["active"] * n,  # as the listing shows them: only the planted drift differs
    })

    def load(uow: Any) -> None:
        uow.con.register("_bench_rows", table)
        uow.con.execute(
            "INSERT INTO current_resources (cloud, resource_type, resource_id, status, project_id, size, created_at, "
            "last_event_at, last_seq, event_count, platform_status) SELECT cloud, resource_type, resource_id, status, "
            "project_id, size::JSON, created_at, last_event_at, last_seq, event_count, platform_status FROM _bench_rows"
        )
        uow.con.unregister("_bench_rows")

    store.run(load)
    drift = max(3, n // 100)
    missing = set(rng.sample(range(n), drift // 3))
    resized = set(rng.sample(range(n), drift // 3)) - missing
    items = [
        ListedResource("instance", f"srv-{i}", f"proj-{i % 97}", _FLAVORS[(i + (i in resized)) % 3], "ACTIVE", False,
                       old, old)
        for i in range(n) if i not in missing
    ]
    items += [ListedResource("instance", f"new-{j}", "proj-1", _FLAVORS[0], "ACTIVE", False, old, old)
              for j in range(drift // 3)]
    listing = [Enumerated("instance", items)]
    settings = rules.Settings(timedelta(seconds=300), 1.0)
    gc.collect()
    with timer() as read_s:
        projected = projected_resources(store, cloud)
    gc.freeze()  # inputs are long-lived: the collector would only rescan them during the diff
    with timer() as diff_s:
        plan = rules.plan(projected, listing, None, settings, now)
    gc.unfreeze()
    store.close()
    return {
        "resources": n,
        "projection_read_s": round(read_s[0], 3),
        "diff_s": round(diff_s[0], 3),
        "total_s": round(read_s[0] + diff_s[0], 3),
        # deletes by absence await the platform's confirmation (asked for by id, not timed here:
        # that is the platform's time, measured by ``tally bench openstack``)
        "corrections": {"create": plan.count("create"), "update": plan.count("update"),
                        "delete": plan.count("delete") + len(plan.pending)},
        "deletes_awaiting_confirmation": len(plan.pending),
    }


def run(*, sizes: list[int], database: str = "duckdb://:memory:", seed: int = 1) -> dict[str, Any]:
    results = [_measure(n, database, seed) for n in sizes]
    out: dict[str, Any] = {"benchmark": "reconcile", "database": database.split(":")[0], "runs": results}
    if len(results) >= 2:
        small, large = results[0], results[-1]
        out["size_ratio"] = large["resources"] / small["resources"]
        out["diff_growth"] = round(large["diff_s"] / max(small["diff_s"], 1e-9), 2)
        out["total_growth"] = round(large["total_s"] / max(small["total_s"], 1e-9), 2)
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out
