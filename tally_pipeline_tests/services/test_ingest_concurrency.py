"""Writers racing the same event_ids store each exactly once, on both backends; any replay order converges."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import UTC, datetime

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline.store.postgres.store import PostgresUnitOfWork
from tally_pipeline_tests.events import event
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.processes import SPAWN, run_processes


def _events(prefix: str, n: int) -> list[dict]:
    return [event(event_id=f"{prefix}-{i}", resource_id=f"{prefix}-r{i % 37}") for i in range(n)]


def _writer(url: str, prefix: str, n: int, worker: int, barrier, results) -> None:
    """One process: ingest an overlapping, reordered view of the same events, in batches."""
    store = open_store(url)
    ingestor = Ingestor(store, default_registry())
    items = _events(prefix, n)
    # Each worker sends every event, starting at a different offset, in batches of 250.
    offset = worker * n // 4
    ordered = items[offset:] + items[:offset]
    barrier.wait()
    stored = []
    for start in range(0, len(ordered), 250):
        outcome = ingestor.ingest(ordered[start:start + 250], origin=f"worker-{worker}")
        stored += [r.event_id for r in outcome.results if r.status == "stored"]
    store.close()
    results.put((worker, stored))


def _race(url: str, workers: int, n: int) -> tuple[str, Counter]:
    prefix = uuid.uuid4().hex[:8]
    barrier = SPAWN.Barrier(workers)
    collected = run_processes(_writer, [(url, prefix, n, w, barrier) for w in range(workers)])
    stored_by = Counter(eid for _, ids in collected for eid in ids)
    return prefix, stored_by


@pytest.mark.slow
def test_processes_racing_on_postgres_store_each_event_once(pg_url) -> None:
    open_store(pg_url, migrate=True).close()
    prefix, stored_by = _race(pg_url, workers=4, n=2000)
    store = open_store(pg_url)
    try:
        rows = store.query("SELECT event_id FROM events WHERE event_id LIKE %s", [f"{prefix}-%"])
    finally:
        store.close()
    assert len(rows) == 2000
    # every event was reported "stored" by exactly one writer; the others saw duplicates
    assert set(stored_by) == {r[0] for r in rows}
    assert set(stored_by.values()) == {1}


@pytest.mark.slow
def test_processes_sharing_a_duckdb_file_each_event_once(tmp_path) -> None:
    url = f"duckdb://{tmp_path / 'shared.duckdb'}"
    open_store(url).close()
    prefix, stored_by = _race(url, workers=3, n=600)
    store = open_store(url)
    rows = store.query("SELECT event_id FROM events")
    assert len(rows) == 600 and set(stored_by) == {r[0] for r in rows} and set(stored_by.values()) == {1}


def test_threads_racing_in_one_process_each_event_once(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    items = _events(uuid.uuid4().hex[:8], 500)
    barrier = threading.Barrier(4)
    stored: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            barrier.wait()
            order = items[worker * 100:] + items[:worker * 100]
            for start in range(0, len(order), 100):
                outcome = ingestor.ingest(order[start:start + 100], origin="t")
                with lock:
                    stored.extend(r.event_id for r in outcome.results if r.status == "stored")
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert Counter(stored) == Counter({e["event_id"]: 1 for e in items})
    assert store.event_count() == 500


@st.composite
def deliveries(draw):
    """A set of events, then a delivery: each event sent one or more times, in any order, in any batches."""
    n = draw(st.integers(min_value=1, max_value=40))
    copies = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=n, max_size=n))
    sends = [i for i, c in enumerate(copies) for _ in range(c)]
    order = draw(st.permutations(sends))
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(order) - 1)), max_size=6)))
    return n, list(order), cuts


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(deliveries())
def test_any_interleaving_and_duplication_yields_exactly_the_set(store, registry, delivery) -> None:
    n, order, cuts = delivery
    prefix = uuid.uuid4().hex[:10]
    items = [event(event_id=f"{prefix}-{i}", resource_id=f"{prefix}-r{i % 5}") for i in range(n)]
    ingestor = Ingestor(store, registry)
    bounds = [0, *cuts, len(order)]
    statuses: Counter = Counter()
    for lo, hi in zip(bounds, bounds[1:]):
        if lo < hi:
            outcome = ingestor.ingest([items[i] for i in order[lo:hi]], origin="prop")
            statuses.update(r.status for r in outcome.results)
    rows = store.query("SELECT event_id FROM events WHERE event_id LIKE %s", [f"{prefix}-%"])
    assert sorted(r[0] for r in rows) == sorted(e["event_id"] for e in items)
    assert statuses["stored"] == n and statuses["duplicate"] == len(order) - n and statuses["rejected"] == 0


def test_postgres_fast_path_falls_back_when_a_racing_writer_takes_an_id(pg_url, registry) -> None:
    """Writer B copies straight into events while writer A holds one of its ids uncommitted. When A
    commits, B's copy fails on the key, rolls back to its savepoint and stores the rest through ON CONFLICT."""
    store = open_store(pg_url, migrate=True)
    holder = psycopg.connect(pg_url, application_name="racing-writer")
    watcher = psycopg.connect(pg_url, autocommit=True)
    try:
        contested, other = event(event_id="race-x"), event(event_id="race-y")
        records = [r for _, r in Ingestor(store, registry).prepare([contested], origin="a").accepted]
        result: dict = {}
        with holder.transaction():  # A's row, uncommitted until the block ends
            PostgresUnitOfWork(holder).insert_events(records, datetime.now(UTC))
            writer = threading.Thread(target=lambda: result.setdefault(
                "b", Ingestor(store, registry).ingest([contested, other], origin="b")))
            writer.start()
            wait_until(lambda: watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'COPY events%'"
            ).fetchall(), "writer B to block on the contested key")
        writer.join(timeout=60)
        assert [(r.event_id, r.status) for r in result["b"].results] == [("race-x", "duplicate"), ("race-y", "stored")]
        assert sorted(r[0] for r in store.query("SELECT event_id FROM events")) == ["race-x", "race-y"]
    finally:
        holder.close()
        watcher.close()
        store.close()
