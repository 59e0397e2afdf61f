"""``tally bench usage-api``: how fast the usage API answers over a ledger of N entities.

The benchmark builds its own tables (a throw-away schema on Postgres, a temporary file on DuckDB),
so it never touches the data of the database it is pointed at. The ledger holds N entities: one
tenant project of 1,000 resources (700 instances and 300 volumes: its four meters), the rest
projects of one instance each (three meters). Every interval began before the month and is still
open, and part of it lies before the ledger's window, so both accounts have postings. Two posting
cycles run inside the month, an hour apart; the requests come half an hour after the second, so
every entity has pending usage too.

Timed, through the app in this process (routing, auth, the store, JSON; no network), and for the
balance also as a plain call of the service (``current_service_*``: the store's work and the rules):
``current`` (``GET /v1/usage/{cloud}/{project}/current`` for the tenant), ``month_query`` (the
tenant's month grouped, with pending: ``GET /v1/usage?group=month&include=pending``), and
``month_page`` (the first page, 1000 rows, of the whole cloud's month, posted only).
"""

from __future__ import annotations

import gc
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.testclient import TestClient

from tally_pipeline.api.app import create_app
from tally_pipeline.api.http import ApiContext
from tally_pipeline.bench.common import percentile
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.usage import current_usage
from tally_pipeline.store import Store
from tally_pipeline.store.scratch import scratch_store

CLOUD = "bench"
TENANT = "tenant"
MONTH = datetime(2026, 3, 1, tzinfo=UTC)
FIRST_CYCLE = MONTH + timedelta(days=10)
ASKED_AT = FIRST_CYCLE + timedelta(hours=1, minutes=30)
LAG = 900.0
WINDOW_DAYS = 35
TENANT_INSTANCES, TENANT_VOLUMES = 700, 300
TENANT_ENTITIES = 4  # instance_hours, vcpu_hours, ram_gb_hours, volume_gb_hours

_INSTANCE = json.dumps({"flavor_name": "m1.small", "vcpus": 2, "ram_mb": 4096, "disk_gb": 20})
_VOLUME = json.dumps({"gb": 50, "volume_type": "ssd"})


def _intervals(entities: int) -> list[tuple[Any, ...]]:
    """``resource_intervals`` rows for ``entities`` entities: the tenant, then one-instance projects."""
    began = MONTH - timedelta(days=40)  # before the window of every cycle: part of it is aged out
    rows: list[tuple[Any, ...]] = []
    for n in range(TENANT_INSTANCES):
        rows.append((CLOUD, "instance", f"t-vm-{n:04d}", 1, 1, TENANT, _INSTANCE, began, None))
    for n in range(TENANT_VOLUMES):
        rows.append((CLOUD, "volume", f"t-vol-{n:04d}", 1, 1, TENANT, _VOLUME, began, None))
    for n in range((entities - TENANT_ENTITIES) // 3):
        rows.append((CLOUD, "instance", f"vm-{n:07d}", 1, 1, f"p{n:07d}", _INSTANCE, began, None))
    return rows


def _p(samples: list[float], share: float) -> float:
    return round(percentile(samples, share) * 1000, 2)


def _time_calls(call: Any, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    samples = []
    gc.collect()
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def _time(client: TestClient, path: str, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        assert client.get(path).status_code == 200
    samples = []
    gc.collect()
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(path)
        samples.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:200]}")
    return samples


def bench_usage_api(url: str, entities: int = 1_000_000, *, requests: int = 200, keep: bool = False) -> dict[str, Any]:
    """Run the benchmark against the database server ``url`` names; return the figures."""
    if entities < TENANT_ENTITIES + 3:
        raise ValueError(f"use at least {TENANT_ENTITIES + 3} entities")
    with scratch_store(url, keep=keep, prefix="tally_bench_usage") as store:
        return _run(store, entities, requests)


def _run(store: Store, entities: int, requests: int) -> dict[str, Any]:
    registry = default_registry()
    rows = _intervals(entities)
    started = time.perf_counter()
    store.load_intervals(rows)
    cycles = [post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS)
              for now in (FIRST_CYCLE, FIRST_CYCLE + timedelta(hours=1))]
    setup_s = time.perf_counter() - started
    made = int(store.query("SELECT count(*) FROM usage_checkpoints")[0][0])
    postings = int(store.query("SELECT count(*) FROM ledger_postings")[0][0])

    ctx = ApiContext(store=store, ingestor=Ingestor(store, registry), clock=lambda: ASKED_AT)
    month_to = (MONTH + timedelta(days=31)).strftime("%Y-%m-01T00:00:00Z")
    paths = {
        "current": f"/v1/usage/{CLOUD}/{TENANT}/current",
        "month_query": f"/v1/usage?cloud={CLOUD}&project_id={TENANT}&group=month&include=pending"
                       f"&from=2026-03-01T00:00:00Z&to={month_to}",
        "month_page": f"/v1/usage?cloud={CLOUD}&group=month&from=2026-03-01T00:00:00Z&to={month_to}&limit=1000",
    }
    # the service alone (store and rules, no HTTP): what the route adds is the difference
    service = _time_calls(lambda: current_usage(store, registry, now=ASKED_AT, ingest_lag=LAG, window_days=WINDOW_DAYS,
                                                cloud=CLOUD, project_id=TENANT), requests, warmup=10)
    with TestClient(create_app(ctx)) as client:
        balance = client.get(paths["current"]).json()
        current = _time(client, paths["current"], requests, warmup=10)
        month = _time(client, paths["month_query"], requests, warmup=10)
        page = _time(client, paths["month_page"], 3, warmup=1)  # a scan of the month: seconds at 1M entities
    return {
        "backend": store.dialect,
        "entities": made,
        "tenant_resources": TENANT_INSTANCES + TENANT_VOLUMES,
        "tenant_entities": TENANT_ENTITIES,
        "intervals": len(rows),
        "postings": postings,
        "cycles_posted": [c.postings for c in cycles],
        "setup_s": round(setup_s, 1),
        "requests": requests,
        "current_p50_ms": _p(current, 0.5),
        "current_p99_ms": _p(current, 0.99),
        "current_service_p50_ms": _p(service, 0.5),
        "current_service_p99_ms": _p(service, 0.99),
        "month_query_p50_ms": _p(month, 0.5),
        "month_query_p99_ms": _p(month, 0.99),
        "month_page_rows": 1000,
        "month_page_p50_ms": _p(page, 0.5),
        "month_page_p99_ms": _p(page, 0.99),
        "tenant_balance": balance["balances"],
    }
