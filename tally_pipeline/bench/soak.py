"""``tally bench soak``: ``tally serve`` in its own process, driven by concurrent collectors for a while.

Each client posts batches back to back over one keep-alive connection (loopback only): mostly new valid
events, a share of events it already sent (duplicates) and a share of invalid ones. The run is bounded
by time and by an event budget. Afterwards the store is checked against what was sent:

- every item of every 200 answer is accounted for (stored + duplicates + rejected = sent), and each
  answer says what the sender expects (new → stored, resent → duplicate, invalid → rejected);
- no event lost: every valid event_id sent is in ``events``, and nothing else of the run is;
- every invalid event is in ``rejected_events``;
- no request failed.

It reports batch latency (p50/p99/max), events per second, and the server's resident memory (VmRSS
from /proc) when ready, after a warm-up (the first tenth of the run), at the end and at its highest.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tally_pipeline.bench.common import percentile
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.store import open_store

# Growth of the server's RSS from the end of the warm-up to the end of the run that still counts as stable.
RSS_GROWTH_ALLOWED = 0.10
RSS_GROWTH_FLOOR_MB = 16.0
RESEND_POOL = 10_000  # answered events each client keeps to resend as duplicates


@dataclass
class ClientTally:
    """What one client sent and what it was told."""

    batches: int = 0
    sent: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    unexpected: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    valid_ids: list[str] = field(default_factory=list)  # new valid events of answered batches
    invalid_ids: list[str] = field(default_factory=list)  # invalid events of answered batches
    unanswered_ids: list[str] = field(default_factory=list)  # the batch whose request failed, if any


def _event(event_id: str, n: int, *, valid: bool) -> dict[str, Any]:
    size = {"gb": 10 + n % 500, "volume_type": "ssd"} if valid else {"gb": -1, "volume_type": "ssd"}
    return {
        "event_id": event_id,
        "event_type": "volume.create.end",
        "cloud": f"soak-{n % 3}",
        "resource_type": "volume",
        "resource_id": f"{event_id}-vol",
        "project_id": f"p{n % 17}",
        "occurred_at": "2026-01-01T00:00:00Z",
        "payload": {"size": size, "status": "available"},
    }


def _client(
    number: int,
    url: str,
    prefix: str,
    deadline: float,
    budget: int,
    batch_size: int,
    duplicates: float,
    invalid: float,
    seed: int,
    tally: ClientTally,
) -> None:
    rng = random.Random(seed * 1000 + number)
    answered_valid: list[dict[str, Any]] = []  # what may be resent as a duplicate: events the API confirmed
    n = 0
    with httpx.Client(timeout=60) as http:
        while time.monotonic() < deadline and tally.sent + batch_size <= budget:
            batch: list[dict[str, Any]] = []
            expect: list[str] = []
            new_valid: list[dict[str, Any]] = []
            new_invalid: list[str] = []
            for _ in range(batch_size):
                draw = rng.random()
                if draw < invalid:
                    event = _event(f"{prefix}-c{number}-bad-{n}", n, valid=False)
                    expect.append("rejected")
                    new_invalid.append(event["event_id"])
                elif draw < invalid + duplicates and answered_valid:
                    event = answered_valid[rng.randrange(len(answered_valid))]
                    expect.append("duplicate")
                else:
                    event = _event(f"{prefix}-c{number}-{n}", n, valid=True)
                    expect.append("stored")
                    new_valid.append(event)
                n += 1
                batch.append(event)
            body = orjson.dumps({"events": batch})
            started = time.perf_counter()
            try:
                response = http.post(f"{url}/v1/events", content=body, headers={"Content-Type": "application/json"})
                failure = None if response.status_code == 200 else f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            if failure is not None:
                tally.errors.append(failure)
                tally.unanswered_ids += [e["event_id"] for e in batch]
                return
            tally.latencies.append(time.perf_counter() - started)
            answer = orjson.loads(response.content)
            tally.batches += 1
            tally.sent += len(batch)
            tally.stored += answer["stored"]
            tally.duplicates += answer["duplicates"]
            tally.rejected += answer["rejected"]
            tally.unexpected += sum(1 for r, e in zip(answer["results"], expect) if r["status"] != e)
            tally.unexpected += abs(len(answer["results"]) - len(batch))
            for event in new_valid:  # a bounded sample keeps a long run's client memory flat
                if len(answered_valid) < RESEND_POOL:
                    answered_valid.append(event)
                else:
                    answered_valid[rng.randrange(RESEND_POOL)] = event
            tally.valid_ids += [e["event_id"] for e in new_valid]
            tally.invalid_ids += new_invalid


def _ids_like(store: Any, table: str, prefix: str, extra: str = "") -> set[str]:
    rows = store.query(f"SELECT event_id FROM {table} WHERE event_id LIKE %s {extra}", [prefix + "-%"])
    return {row[0] for row in rows}


def run(
    *,
    database: str | None,
    seconds: float,
    clients: int,
    batch_size: int = 500,
    duplicates: float = 0.05,
    invalid: float = 0.05,
    max_events: int = 20_000_000,
    seed: int = 1,
) -> dict[str, Any]:
    scratch = None
    if database is None:
        scratch = tempfile.TemporaryDirectory(prefix="tally-soak-")
        database = f"duckdb://{Path(scratch.name) / 'soak.duckdb'}"
    try:
        with open_store(database) as store:
            store.require_current_schema()
            dialect = store.dialect
        prefix = f"soak-{uuid.uuid4().hex[:10]}"
        tallies = [ClientTally() for _ in range(clients)]
        rss: dict[str, float] = {}
        samples: list[float] = []
        with ServeProcess(database) as server:
            server.start()
            rss["start"] = server.rss_kib() / 1024
            started = time.monotonic()
            deadline = started + seconds
            budget = max(batch_size, max_events // clients)
            threads = [
                threading.Thread(target=_client, args=(k, server.url, prefix, deadline, budget, batch_size,
                                                       duplicates, invalid, seed, tallies[k]), daemon=True)
                for k in range(clients)
            ]
            for thread in threads:
                thread.start()
            warmup_at = started + seconds / 10
            while any(t.is_alive() for t in threads):
                for thread in threads:
                    thread.join(timeout=0.5)  # sample memory twice a second while the clients run
                samples.append(server.rss_kib() / 1024)
                if "after_warmup" not in rss and time.monotonic() >= warmup_at:
                    rss["after_warmup"] = samples[-1]
            elapsed = time.monotonic() - started
            rss["end"] = server.rss_kib() / 1024
            rss.setdefault("after_warmup", rss["start"])
            rss["max"] = max([rss["end"], *samples])
        with open_store(database) as store:
            stored_ids = _ids_like(store, "events", prefix)
            dead_ids = _ids_like(store, "rejected_events", prefix, "AND reason = 'size_schema'")
    finally:
        if scratch is not None:
            scratch.cleanup()

    total = ClientTally()
    for t in tallies:
        for name in ("batches", "sent", "stored", "duplicates", "rejected", "unexpected"):
            setattr(total, name, getattr(total, name) + getattr(t, name))
        for name in ("errors", "latencies", "valid_ids", "invalid_ids", "unanswered_ids"):
            getattr(total, name).extend(getattr(t, name))
    valid, invalid_ids = set(total.valid_ids), set(total.invalid_ids)
    growth = rss["end"] - rss["after_warmup"]
    checks = {
        # every item of every answer accounted for, each as the sender expected
        "accounted": total.stored + total.duplicates + total.rejected == total.sent and total.unexpected == 0,
        # every valid event answered is stored, each stored once, and nothing of the run beyond what was sent
        "no_event_lost": valid <= stored_ids,
        "stored_once_each": total.stored == len(valid) == len(total.valid_ids),
        "nothing_unexpected_stored": stored_ids <= valid | set(total.unanswered_ids),
        "every_invalid_dead_lettered": invalid_ids <= dead_ids,
        "no_errors": not total.errors,
        "rss_stable": growth <= max(RSS_GROWTH_FLOOR_MB, RSS_GROWTH_ALLOWED * rss["after_warmup"]),
    }
    return {
        "benchmark": "soak",
        "database": dialect,
        "seconds": round(elapsed, 1),
        "clients": clients,
        "batch_size": batch_size,
        "duplicate_share": duplicates,
        "invalid_share": invalid,
        "batches": total.batches,
        "sent": total.sent,
        "stored": total.stored,
        "duplicates": total.duplicates,
        "rejected": total.rejected,
        "events_per_s": round(total.sent / elapsed) if elapsed else 0,
        "batch_latency_ms": {
            "p50": round(percentile(total.latencies, 0.50) * 1000, 1),
            "p99": round(percentile(total.latencies, 0.99) * 1000, 1),
            "max": round(max(total.latencies, default=0.0) * 1000, 1),
        },
        "server_rss_mb": {k: round(v, 1) for k, v in rss.items()},
        "server_rss_growth_after_warmup_mb": round(growth, 1),
        "errors": total.errors[:5],
        "checks": checks,
        "ok": all(checks.values()),
    }
