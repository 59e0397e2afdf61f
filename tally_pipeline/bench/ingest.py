"""``tally bench ingest``: the ingest core and the HTTP API against a raw bulk load, on one database.

All three runs load the same N synthetic events (distinct ids per run) into the same database in
the same process run, so the ratios compare like with like:

- core: items (dicts, as a collector would send) → validation → the store, batches of 1000;
- http: the same through ``tally serve`` in its own process, two concurrent clients posting
  batches of 1000;
- copy: the rows the core would store, already serialised, bulk-loaded into a scratch table with
  the same primary key (Postgres: ``COPY``; DuckDB: an Arrow insert) — the floor a loader can reach.
"""

from __future__ import annotations

import gc
import random
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson

from tally_pipeline.bench.common import api_process, peak_rss_mb, timer
from tally_pipeline.core.envelope import EventRecord, validate_event
from tally_pipeline.runtime import Runtime

_FLAVORS = [
    {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20},
    {"flavor_name": "m1.medium", "vcpus": 2, "ram_mb": 4096, "disk_gb": 40},
    {"flavor_name": "m1.large", "vcpus": 4, "ram_mb": 8192, "disk_gb": 80},
]
_TYPES = [
    ("compute.instance.create.end", "create"),
    ("compute.instance.resize.confirm.end", "update"),
    ("compute.instance.create.start", "note"),
    ("compute.instance.delete.end", "delete"),
]


def synthetic_events(n: int, *, run: str, seed: int = 1, clouds: int = 3, resources: int | None = None) -> list[dict[str, Any]]:
    """N realistic collector events over ``resources`` instances (default n/5)."""
    rng = random.Random(seed)
    resources = resources or max(1, n // 5)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    for i in range(n):
        r = rng.randrange(resources)
        event_type, _verb = _TYPES[rng.randrange(len(_TYPES))]
        when = start + timedelta(seconds=rng.randrange(30 * 86400))
        events.append(
            {
                "event_id": f"{run}-{i}",
                "event_type": event_type,
                "cloud": f"bench-{r % clouds}",
                "resource_type": "instance",
                "resource_id": f"{run}-srv-{r}",
                "project_id": f"proj-{r % 97}",
                "occurred_at": when.strftime("%Y-%m-%dT%H:%M:%S") + f".{rng.randrange(10**6):06d}Z",
                "payload": {"size": _FLAVORS[r % len(_FLAVORS)], "status": "ACTIVE", "host": f"cmp-{r % 50}"},
            }
        )
    return events


def _core(rt: Runtime, items: list[dict[str, Any]]) -> float:
    with timer() as elapsed:
        for _ in rt.ingestor.ingest_stream(items, origin="bench"):
            pass
    return elapsed[0]


def _http(url: str, items: list[dict[str, Any]], clients: int = 2) -> float:
    batches = [orjson.dumps({"events": items[i:i + 1000]}) for i in range(0, len(items), 1000)]
    errors: list[str] = []

    def client(mine: list[bytes]) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            for body in mine:
                response = http.post("/v1/events", content=body, headers={"content-type": "application/json"})
                if response.status_code != 200:
                    errors.append(f"{response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=client, args=(batches[k::clients],)) for k in range(clients)]
    with timer() as elapsed:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise RuntimeError(f"HTTP ingest failed: {errors[0]}")
    return elapsed[0]


def _records(rt: Runtime, items: list[dict[str, Any]]) -> list[EventRecord]:
    out = []
    for item in items:
        record = validate_event(item, rt.registry)
        assert isinstance(record, EventRecord)
        out.append(record)
    return out


def _copy(rt: Runtime, records: list[EventRecord]) -> float:
    """Bulk-load the rows into a scratch table shaped like ``events`` (same primary key)."""
    store = rt.store
    received = datetime.now(UTC)
    rows = [
        (r.event_id, r.event_type, r.verb, r.cloud, r.resource_type, r.resource_id, r.project_id,
         r.occurred_at, r.source, r.payload_json, r.content_hash, received)
        for r in records
    ]
    if store.dialect == "postgres":
        def setup(uow: Any) -> None:
            uow.execute("DROP TABLE IF EXISTS bench_copy_scratch")
            uow.execute("CREATE TABLE bench_copy_scratch (LIKE events INCLUDING DEFAULTS EXCLUDING IDENTITY)")
            uow.execute("ALTER TABLE bench_copy_scratch DROP COLUMN seq, ADD PRIMARY KEY (cloud, event_id)")

        store.run(setup)
        with timer() as elapsed:
            for start in range(0, len(rows), 1000):
                def load(uow: Any, chunk: list[tuple] = rows[start:start + 1000]) -> None:
                    with uow.cur.copy(
                        "COPY bench_copy_scratch (event_id, event_type, verb, cloud, resource_type, resource_id, "
                        "project_id, occurred_at, source, payload, content_hash, received_at) FROM STDIN"
                    ) as copy:
                        for row in chunk:
                            copy.write_row(row)

                store.run(load)
        store.run(lambda uow: uow.execute("DROP TABLE bench_copy_scratch"))
        return elapsed[0]

    import pyarrow as pa

    columns = list(zip(*rows))
    names = ["event_id", "event_type", "verb", "cloud", "resource_type", "resource_id", "project_id",
             "occurred_at", "source", "payload", "content_hash", "received_at"]
    store.run(lambda uow: uow.execute(
        "CREATE OR REPLACE TABLE bench_copy_scratch AS SELECT * EXCLUDE (seq) FROM events LIMIT 0"))
    store.run(lambda uow: uow.execute("ALTER TABLE bench_copy_scratch ADD PRIMARY KEY (cloud, event_id)"))
    with timer() as elapsed:
        for start in range(0, len(rows), 1000):
            table = pa.table({name: list(col[start:start + 1000]) for name, col in zip(names, columns)})

            def load(uow: Any, table: pa.Table = table) -> None:
                uow.con.register("_scratch", table)
                uow.con.execute(
                    "INSERT INTO bench_copy_scratch SELECT event_id, event_type, verb, cloud, resource_type, "
                    "resource_id, project_id, occurred_at, source, payload::JSON, content_hash, received_at FROM _scratch"
                )
                uow.con.unregister("_scratch")

            store.run(load)
    store.run(lambda uow: uow.execute("DROP TABLE bench_copy_scratch"))
    return elapsed[0]


def run(rt: Runtime, *, events: int, clients: int = 2, seed: int = 1, server_workers: int = 1) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    rt.store.require_current_schema()

    def inputs(phase: str) -> list[dict[str, Any]]:
        # Each phase's input is built just before it and frozen out of the collector's sight: it is
        # long-lived test data, and rescanning hundreds of thousands of dicts would be measured too.
        items = synthetic_events(events, run=f"{phase}-{run_id}", seed=seed)
        gc.collect()
        gc.freeze()
        return items

    copy_records = _records(rt, inputs("copy"))
    copy_s = _copy(rt, copy_records)
    del copy_records
    gc.unfreeze()
    core_s = _core(rt, inputs("core"))
    gc.unfreeze()
    http_items = inputs("http")
    with api_process(rt.config.database, workers=server_workers) as url:
        http_s = _http(url, http_items, clients)
    del http_items
    gc.unfreeze()
    copy_rate, core_rate, http_rate = events / copy_s, events / core_s, events / http_s
    return {
        "benchmark": "ingest",
        "database": rt.store.dialect,
        "events": events,
        "http_clients": clients,
        "server_workers": server_workers,
        "batch_size": 1000,
        "core_s": round(core_s, 3),
        "http_s": round(http_s, 3),
        "copy_s": round(copy_s, 3),
        "core_events_per_s": round(core_rate),
        "http_events_per_s": round(http_rate),
        "copy_events_per_s": round(copy_rate),
        "core_vs_copy": round(core_rate / copy_rate, 3),
        "http_vs_copy": round(http_rate / copy_rate, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
