"""``tally bench projection``: full rebuild and incremental refresh against the database's own floor.

Setup (not timed) bulk-loads N synthetic events over M instances straight into ``events`` — a
create, resizes and notes, and for some a delete, per resource. Then, on the same data:

- ``rebuild_s``: ``projection.rebuild`` (both tables from scratch), best of two like the floor;
- ``floor_s``: the plain window-function query that picks each resource's latest event, written to
  a table — a floor no fold can beat, since a fold must at least sort every history;
- ``incremental_s``: a refresh after 1,000 late events scattered over the history, ingested
  through the ingest core;
- ``incremental_lookup_floor_s``: only finding those resources' histories among all events (a
  key-only semi join counted, nothing read): what any full-history re-fold pays first.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from tally_pipeline import projection
from tally_pipeline.bench.common import peak_rss_mb, timer
from tally_pipeline.runtime import Runtime

_FLAVORS = [
    '{"disk_gb":20,"flavor_name":"m1.small","ram_mb":2048,"vcpus":1}',
    '{"disk_gb":40,"flavor_name":"m1.medium","ram_mb":4096,"vcpus":2}',
    '{"disk_gb":80,"flavor_name":"m1.large","ram_mb":8192,"vcpus":4}',
]
_KEY = "cloud, resource_type, resource_id"
_COLUMNS = ["event_id", "event_type", "verb", "cloud", "resource_type", "resource_id", "project_id",
            "occurred_at", "source", "payload", "content_hash", "received_at"]


def synthetic_table(events: int, resources: int, *, run: str, seed: int, chunk: int) -> pa.Table:
    """One chunk of ``chunk`` events (index ``seed``) of the synthetic history, as Arrow columns."""
    per = max(2, events // resources)
    index = np.arange(chunk * seed, min(events, chunk * (seed + 1)))
    r = index // per
    k = index % per
    start = datetime(2026, 1, 1, tzinfo=UTC)
    born = (r * 7919) % (30 * 86400)
    offset = born + k * (3600 + (r % 13) * 60)
    last = k == per - 1
    deleted = last & (r % 10 < 3)
    verb = np.where(k == 0, "create", np.where(deleted, "delete", np.where(k % 3 == 2, "note", "update")))
    event_type = np.select(
        [verb == "create", verb == "delete", verb == "note"],
        ["compute.instance.create.end", "compute.instance.delete.end", "compute.instance.create.start"],
        "compute.instance.resize.confirm.end",
    )
    flavor = (r + k // 3) % 3
    payload = np.where(np.isin(verb, ["create", "update"]),
                       np.array([f'{{"size":{f}}}' for f in _FLAVORS])[flavor], "{}")
    occurred = pa.array([start + timedelta(seconds=int(s)) for s in offset], pa.timestamp("us", tz="UTC"))
    rid = np.char.add(f"{run}-srv-", r.astype(str))
    return pa.table({
        "event_id": np.char.add(f"{run}-", index.astype(str)),
        "event_type": event_type,
        "verb": verb,
        "cloud": np.char.add("bench-", (r % 3).astype(str)),
        "resource_type": np.full(len(index), "instance"),
        "resource_id": rid,
        "project_id": np.char.add("proj-", (r % 97).astype(str)),
        "occurred_at": occurred,
        "source": np.full(len(index), "collector"),
        "payload": payload,
        "content_hash": np.full(len(index), "0" * 32),
        "received_at": pa.array([datetime.now(UTC)] * len(index), pa.timestamp("us", tz="UTC")),
    })


def _load(rt: Runtime, events: int, resources: int, run: str) -> None:
    chunk = 200_000
    for seed in range((events + chunk - 1) // chunk):
        table = synthetic_table(events, resources, run=run, seed=seed, chunk=chunk)
        if rt.store.dialect == "duckdb":
            def load(uow: Any, table: pa.Table = table) -> None:
                uow.con.register("_bench_events", table)
                uow.con.execute(
                    f"INSERT INTO events ({', '.join(_COLUMNS)}) SELECT {', '.join(_COLUMNS[:-3])}, "
                    "payload::JSON, content_hash, received_at FROM _bench_events"
                )
                uow.con.unregister("_bench_events")
        else:
            def load(uow: Any, table: pa.Table = table) -> None:
                with uow.cur.copy(f"COPY events ({', '.join(_COLUMNS)}) FROM STDIN") as copy:
                    for row in zip(*(table.column(c).to_pylist() for c in _COLUMNS)):
                        copy.write_row(row)
        rt.store.run(load)


def _late_events(rt: Runtime, n: int, resources: int, run: str, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        r = rng.randrange(resources)
        when = start + timedelta(seconds=rng.randrange(40 * 86400))
        out.append({
            "event_id": f"{run}-late-{i}",
            "event_type": "compute.instance.resize.confirm.end",
            "cloud": f"bench-{r % 3}",
            "resource_type": "instance",
            "resource_id": f"{run}-srv-{r}",
            "occurred_at": when.isoformat(),
            "payload": {"size": {"flavor_name": "m1.xlarge", "vcpus": 8, "ram_mb": 16384, "disk_gb": 160}},
        })
    return out


def _floor(rt: Runtime) -> float:
    sql = (
        "CREATE TEMP TABLE bench_latest AS SELECT * FROM ("
        " SELECT cloud, resource_type, resource_id, verb, project_id, occurred_at, payload, seq,"
        " row_number() OVER (PARTITION BY cloud, resource_type, resource_id ORDER BY occurred_at DESC, seq DESC) AS rn"
        " FROM events) latest WHERE rn = 1"
    )

    def work(uow: Any) -> None:
        uow.execute(sql)
        uow.execute("DROP TABLE bench_latest")

    with timer() as elapsed:
        rt.store.run(work)
    return elapsed[0]


def _lookup_floor(rt: Runtime) -> float:
    """Only finding the pending resources' histories: a count over a key-only semi join, no event read.

    Any refresh that re-folds full histories pays at least this; in a column store it is a scan.
    """
    watermark = rt.store.query("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0]
    pending = f"SELECT DISTINCT {_KEY} FROM events WHERE seq > %s"
    if rt.store.dialect == "duckdb":
        sql = f"SELECT count(*) FROM events SEMI JOIN ({pending}) USING ({_KEY})"
    else:
        sql = f"SELECT count(*) FROM events e JOIN ({pending}) p USING ({_KEY})"
    with timer() as elapsed:
        rt.store.query(sql, (watermark,))
    return elapsed[0]


def _timed_rebuild(rt: Runtime) -> tuple[float, projection.RefreshResult]:
    with timer() as elapsed:
        result = projection.rebuild(rt.store)
    return elapsed[0], result


def run(rt: Runtime, *, events: int, resources: int, late: int = 1000, seed: int = 1) -> dict[str, Any]:
    rt.store.require_current_schema()
    run_id = uuid.uuid4().hex[:6]
    with rt.store.session():
        with timer() as load_s:
            _load(rt, events, resources, run_id)
        projection.refresh(rt.store)  # start from a projection that is up to date
        # Both sides are timed the same way, best of two: a rebuild gives identical tables each time.
        floor_s = min(_floor(rt) for _ in range(2))
        rebuild_s, result = min((_timed_rebuild(rt) for _ in range(2)), key=lambda timed: timed[0])
        late_items = _late_events(rt, late, resources, run_id, seed)
        for _ in rt.ingestor.ingest_stream(late_items, origin="bench"):
            pass
        lookup_s = _lookup_floor(rt)
        with timer() as incremental_s:
            incremental = projection.refresh(rt.store)
    return {
        "benchmark": "projection",
        "database": rt.store.dialect,
        "events": events,
        "resources": resources,
        "load_s": round(load_s[0], 3),
        "rebuild_s": round(rebuild_s, 3),
        "rebuild_events_per_s": round(events / rebuild_s),
        "rebuild_resources": result.resources,
        "floor_s": round(floor_s, 3),
        "rebuild_vs_floor": round(rebuild_s / floor_s, 2),
        "late_events": late,
        "incremental_resources": incremental.resources,
        "incremental_s": round(incremental_s[0], 4),
        "incremental_vs_rebuild": round(incremental_s[0] / rebuild_s, 4),
        "incremental_lookup_floor_s": round(lookup_s, 4),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
