"""Posters in real processes, on both backends: two running at once never double-post, and one
killed (SIGKILL) between posting and advancing its checkpoints leaves neither behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from datetime import timedelta

import psycopg
import pytest

from tally_pipeline.core.ledger import EntityKey, NonMonotonicCheckpoint
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.ledger.verify import verify
from tally_pipeline.store import open_store
from tally_pipeline_tests.ledger_data import DAY, HOUR, T0, Row, checkpoints, insert, model_usage, posted_total, vm
from tally_pipeline_tests.processes import SPAWN, run_processes

LAG, WINDOW = 900, 35
LAG_DELTA = timedelta(seconds=LAG)


def fleet(projects: int) -> list[Row]:
    return [Row(f"p{n:03d}", f"vm-{n}", T0 - DAY - n * HOUR, None, vm(vcpus=1 + n % 4)) for n in range(projects)]


def prepared(url: str, rows: list[Row]) -> None:
    store = open_store(url, migrate=True)
    insert(store, *rows)
    store.close()  # a DuckDB file must be free for the children


def wait_for_a_lock_waiter(url: str) -> bool:
    """Poll (no sleeping) until another backend of this database waits on a lock."""
    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).fetchone()[0]
            if waiting:
                return True
    return False


def poster(url: str, hours_after_t0: int, barrier, first, overlapped, results) -> None:
    """One poster process: start with the other, and (Postgres) hold its first batch's locks until
    the other process is seen waiting on them, so the two certainly overlap on the same rows."""
    store = open_store(url)

    def on_stage(stage: str, info: dict) -> None:
        if stage == "cycle_start":
            barrier.wait(timeout=60)
        elif stage == "batch_locked" and store.dialect == "postgres":
            with first.get_lock():
                leader, first.value = first.value == 0, 1
            if leader and wait_for_a_lock_waiter(url):
                overlapped.value = 1

    try:
        result = post_usage(
            store, default_registry(), now=T0 + hours_after_t0 * HOUR, ingest_lag=LAG, window_days=WINDOW,
            batch_size=15, on_stage=on_stage,
        )
        outcome = ("ok", [(k.cloud, k.project_id, k.meter) for k in result.posted], result.already_posted,
                   [s.reason for s in result.skipped])
    except NonMonotonicCheckpoint as exc:
        outcome = ("non_monotonic", [], 0, [str(exc)])
    finally:
        store.close()
    results.put(outcome)


def race(url: str, hours: tuple[int, int]) -> tuple[list[tuple], int]:
    barrier, first, overlapped = SPAWN.Barrier(2), SPAWN.Value("i", 0), SPAWN.Value("i", 0)
    outcomes = run_processes(poster, [(url, h, barrier, first, overlapped) for h in hours])
    return outcomes, overlapped.value


@pytest.mark.slow
def test_two_posters_at_once_never_double_post(store_url, registry) -> None:
    rows = fleet(20)  # 60 entities, 4 batches each
    prepared(store_url, rows)
    outcomes, overlapped = race(store_url, (0, 0))
    assert [o[0] for o in outcomes] == ["ok", "ok"]
    posted_by = Counter(key for _, posted, _, _ in outcomes for key in posted)
    assert len(posted_by) == 60 and set(posted_by.values()) == {1}  # each entity by exactly one
    assert sum(already for _, _, already, _ in outcomes) == 60  # …and found done by the other
    assert all(skipped == [] for *_, skipped in outcomes)
    if store_url.startswith("postgresql"):
        assert overlapped == 1  # the second poster really waited on the first one's row locks
    store = open_store(store_url)
    try:
        expected = model_usage(registry, rows, T0 - LAG_DELTA)
        assert posted_total(store) == expected
        assert store.query("SELECT count(*) FROM ledger_postings")[0][0] == 60
        assert verify(store, registry).ok
    finally:
        store.close()


@pytest.mark.slow
def test_an_older_and_a_newer_poster_at_once_keep_the_ledger_consistent(pg_url, registry) -> None:
    # Postgres only: with row locks the two interleave entity by entity (DuckDB serialises whole units)
    store_url = pg_url
    prepared(store_url, fleet(20))
    outcomes, _ = race(store_url, (2, 1))
    for status, _, _, skipped in outcomes:
        # the older poster either went first for some entities, or met the newer one's checkpoints:
        # refused as a whole, or entity by entity; nothing else may go wrong
        assert status in ("ok", "non_monotonic")
        assert status == "non_monotonic" or all(r.startswith("non_monotonic:") for r in skipped)
    store = open_store(store_url)
    try:
        clamps = {clamp for _, clamp in checkpoints(store).values()}
        assert clamps == {T0 + 2 * HOUR - LAG_DELTA}
        # the ledger is consistent; if the older poster finished last, its skips are what verify names
        assert verify(store, registry, include_history=False).ok
        assert {d.kind for d in verify(store, registry).discrepancies} <= {"skipped"}
    finally:
        store.close()


def killed_poster(url: str, ready) -> None:
    """Post in batches of 3 entities, one at a time; right after the second batch's postings are
    inserted (its checkpoints not yet advanced, its transaction open) say so and block until killed."""
    store = open_store(url)

    def on_stage(stage: str, info: dict) -> None:
        if stage == "batch_posted" and info["batch"] == 1:
            ready.set()
            threading.Event().wait()

    post_usage(
        store, default_registry(), now=T0, ingest_lag=LAG, window_days=WINDOW, batch_size=3, workers=1, on_stage=on_stage
    )


@pytest.mark.slow
def test_a_poster_killed_between_posting_and_advancing_leaves_neither(store_url, registry) -> None:
    rows = fleet(3)  # 9 entities: batches p000 | p001 | p002
    prepared(store_url, rows)
    ready = SPAWN.Event()
    child = SPAWN.Process(target=killed_poster, args=(store_url, ready))
    child.start()
    try:
        assert ready.wait(timeout=120), "the poster never reached the injected point"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL

    store = open_store(store_url)
    try:
        posted = posted_total(store)
        cps = checkpoints(store)
        assert {k.project_id for k in posted} == {"p000"}  # the first batch committed
        for key, (total, clamp) in cps.items():
            if key.project_id == "p000":
                assert clamp == T0 - LAG_DELTA
            else:  # the killed batch left no posting and no advanced checkpoint
                assert (total, clamp) == (0, None) and key not in posted
        assert verify(store, registry, include_history=False).ok  # the ledger's sums hold
        # …and the entities the killed cycle never posted are named, not taken as consistent
        unposted = {(d.project_id, d.kind) for d in verify(store, registry).discrepancies}
        assert unposted == {("p001", "never_posted"), ("p002", "never_posted")}
        # the next run completes the cycle: nothing lost, nothing twice
        again = post_usage(store, registry, now=T0, ingest_lag=LAG, window_days=WINDOW, batch_size=3)
        assert {k.project_id for k in again.posted} == {"p001", "p002"} and again.already_posted == 3
        assert posted_total(store) == model_usage(registry, rows, T0 - LAG_DELTA)
        assert verify(store, registry).ok
        assert EntityKey("c1", "p001", "vcpu_hours") in posted_total(store)
    finally:
        store.close()
