"""``tally bench ingest``: the ingest core and the HTTP API against a raw bulk load, on one database.

All three runs load the same number of synthetic events (random uuid4 ids, resources scattered over
4M, distinct per run) into the same ``events`` table in the same process run, so the ratios compare
like with like:

- copy: the rows the core would store, already serialised, bulk-loaded into ``events`` itself
  (Postgres: ``COPY``; DuckDB: an Arrow insert) — the floor a loader can reach on a log of this
  size with these indexes;
- core: items (dicts, as a collector would send) → validation → the store, batches of 1000;
- http: the same through ``tally serve`` in its own process, two concurrent clients posting
  batches of 1000.

``rounds`` runs the three phases that many times, each round with new events: one run of each was
judged by the machine's noise as much as by its work (the core measured 0.79× and then 0.64× of
COPY in two runs a minute apart). Each round starts one phase later (copy, core, http; then core,
http, copy; then http, copy, core), so over three rounds (or any multiple: ``balanced``) every phase
loads into the log at each position once, and the logs it met add up to the same for all three: the
rates are each phase's events over its total time. (The fastest round of each, reported too, is not
a fair comparison: a growing log makes every phase slower, and the first phase of a run loads into
the smallest log — COPY into an empty table took 2.07 s, into one of 1.2M events 2.67 s.) Each
phase starts right after a ``CHECKPOINT``, so none pays for the pages an earlier phase left dirty,
or runs into a checkpoint an earlier phase's WAL set off.

``preload`` first fills the log with that many generated events in SQL, so that the rates are
those of a log that has grown (random ids land on random index pages once the indexes outgrow
the cache). The report gives the log's footprint per event (heap and each index) after the run.
"""

from __future__ import annotations

import gc
import hashlib
import os
import random
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson

from tally_pipeline.bench import ingest_log as bench_log
from tally_pipeline.bench.common import ServeError, api_process, peak_rss_mb, timer
from tally_pipeline.core.envelope import EventRecord, validate_event
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.ingest import Ingestor

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


def resource_uuid(r: int) -> str:
    """Resource number ``r``'s id: md5 of "r<n>" in uuid form, as the SQL pre-fill names it too."""
    return str(uuid.UUID(hashlib.md5(f"r{r}".encode()).hexdigest()))


def synthetic_events(n: int, *, seed: int = 1, clouds: int = 3,
                     resources: int = bench_log.RESOURCE_SPACE) -> list[dict[str, Any]]:
    """N realistic collector events: random uuid4 ids, resources drawn at random from ``resources``.

    Ids that share a prefix would land on a few index pages per batch and hide what a grown log
    costs; real collectors send uuids, and a batch's resources are scattered over the whole cloud.
    """
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    for _ in range(n):
        r = rng.randrange(resources)
        event_type, _verb = _TYPES[rng.randrange(len(_TYPES))]
        when = start + timedelta(seconds=rng.randrange(30 * 86400))
        events.append(
            {
                "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                "event_type": event_type,
                "cloud": f"bench-{r % clouds}",
                "resource_type": "instance",
                "resource_id": resource_uuid(r),
                "project_id": f"proj-{r % 97}",
                "occurred_at": when.strftime("%Y-%m-%dT%H:%M:%S") + f".{rng.randrange(10**6):06d}Z",
                "payload": {"size": _FLAVORS[r % len(_FLAVORS)], "status": "ACTIVE", "host": f"cmp-{r % 50}"},
            }
        )
    return events


def _core(ingestor: Ingestor, items: list[dict[str, Any]]) -> float:
    with timer() as elapsed:
        for _ in ingestor.ingest_stream(items, origin="bench"):
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
        raise ServeError(f"HTTP ingest failed: {errors[0]}")
    return elapsed[0]


def _records(rt: Runtime, items: list[dict[str, Any]]) -> list[EventRecord]:
    out = []
    for item in items:
        record = validate_event(item, rt.registry)
        assert isinstance(record, EventRecord)
        out.append(record)
    return out


def _copy(rt: Runtime, records: list[EventRecord]) -> float:
    """Bulk-load the rows into ``events`` itself, batches of 1000 (the same size and indexes)."""
    received = datetime.now(UTC)
    rows = [
        (r.event_id, r.event_type, r.verb, r.cloud, r.resource_type, r.resource_id, r.project_id,
         r.occurred_at, r.source, r.payload_json, r.content_hash, received)
        for r in records
    ]
    with timer() as elapsed:
        for start in range(0, len(rows), 1000):
            bench_log.copy_rows(rt.store, rows[start:start + 1000])
    return elapsed[0]


def _preload(rt: Runtime, events: int) -> float:
    def progress(done: int) -> None:
        print(f"preloaded {done:,} / {events:,} events", file=sys.stderr, flush=True)

    with timer() as elapsed:
        bench_log.preload(rt.store, events, progress)
    return elapsed[0]


def run(rt: Runtime, *, events: int, clients: int = 2, seed: int = 1, server_workers: int = 1,
        preload: int = 0, rounds: int = 3) -> dict[str, Any]:
    if rounds < 1:
        raise ValueError("run at least one round")
    rt.store.require_current_schema()
    preload_s = _preload(rt, preload) if preload else 0.0
    log_before = rt.store.event_count()

    def inputs(phase: int) -> list[dict[str, Any]]:
        # Each phase's input is built just before it and frozen out of the collector's sight: it is
        # long-lived test data, and rescanning hundreds of thousands of dicts would be measured too.
        # A seed per phase (and per run, from the log's size) keeps every phase's ids distinct.
        items = synthetic_events(events, seed=hash((seed, phase, log_before)))
        gc.collect()
        gc.freeze()
        return items

    def copy_phase(items: list[dict[str, Any]]) -> float:
        records = _records(rt, items)  # validated untimed: the floor loads rows ready to store
        rt.store.checkpoint()
        return _copy(rt, records)

    def core_phase(items: list[dict[str, Any]]) -> float:
        rt.store.checkpoint()
        return _core(rt.ingestor, items)  # built (imports and all) before the clock starts

    def http_phase(items: list[dict[str, Any]]) -> float:
        rt.store.checkpoint()
        with api_process(rt.config.database, workers=server_workers) as url:
            return _http(url, items, clients)

    phases = {"copy_s": copy_phase, "core_s": core_phase, "http_s": http_phase}
    timed: list[dict[str, float]] = []
    firsts: list[str] = []  # the phase each round started with
    for number in range(rounds):
        # Each round starts with the next phase: every phase meets the log at each of the round's sizes
        # in turn (a phase that always went first would always load into the smallest log).
        names = list(phases)
        names = names[number % 3:] + names[:number % 3]
        seconds: dict[str, float] = {}
        for k, name in enumerate(names):
            seconds[name] = phases[name](inputs(3 * number + k))
            gc.unfreeze()
        timed.append({name: seconds[name] for name in phases})
        firsts.append(names[0][:-2])
        print(f"round {number + 1} of {rounds}: " + ", ".join(f"{name[:-2]} {seconds[name]:.2f} s" for name in names),
              file=sys.stderr, flush=True)
    copy_s, core_s, http_s = (sum(r[key] for r in timed) for key in phases)
    copy_rate, core_rate, http_rate = (events * rounds / total for total in (copy_s, core_s, http_s))
    return {
        "benchmark": "ingest",
        "database": rt.store.dialect,
        "events": events,
        "preload": preload,
        "preload_s": round(preload_s, 1),
        "log_before": log_before,
        "http_clients": clients,
        "server_workers": server_workers,
        "batch_size": 1000,
        "rounds": [{"first": first, **{key: round(seconds, 3) for key, seconds in r.items()}}
                   for first, r in zip(firsts, timed, strict=True)],
        # Every phase went first, second and third equally often: the ratios below compare like with like.
        "balanced": rounds % 3 == 0,
        "core_s": round(core_s, 3),
        "http_s": round(http_s, 3),
        "copy_s": round(copy_s, 3),
        **{f"{name[:-2]}_fastest_s": round(min(r[name] for r in timed), 3) for name in phases},
        "core_events_per_s": round(core_rate),
        "http_events_per_s": round(http_rate),
        "copy_events_per_s": round(copy_rate),
        "core_vs_copy": round(core_rate / copy_rate, 3),
        "http_vs_copy": round(http_rate / copy_rate, 3),
        "log_after": bench_log.events_footprint(rt.store),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
