"""Faults of the database under a running ``tally serve``: its connections cut mid-batch
(``pg_terminate_backend``), and its PostgreSQL server crashed mid-batch and started again (a private,
throw-away server: the machine's shared one is never restarted). The API answers 503, never 500 and never
half a batch; it recovers without a restart; nothing it accepted is lost."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.collector import Collector
from tally_pipeline.collector.backoff import Backoff
from tally_pipeline.store.postgres.locks import INGEST_LOCK
from tally_pipeline_tests.api.private_postgres import PrivatePostgres
from tally_pipeline_tests.collector_api import wait_for_outcome
from tally_pipeline_tests.faults import (
    FAULT_APP,
    TOKEN,
    dead_letter,
    events,
    holds_lock_on,
    ids_of,
    invalid,
    migrate,
    session,
    stored_ids,
    tokens_file,
    wait_for_blocked,
)


def post(base: str, batch: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{base}/v1/events", json={"events": batch}, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=60)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


def blocked_batch(pool: ThreadPoolExecutor, server: ServeProcess, batch: list[dict[str, Any]],
                  watcher: psycopg.Connection, query_starts: str) -> tuple[Future[httpx.Response], int]:
    """Post ``batch`` in the background and return once the API's transaction waits on a lock the test holds,
    in the statement starting ``query_starts``; returns the answer's future and the waiting backend's pid."""
    answer = pool.submit(post, server.url, batch)
    return answer, wait_for_blocked(watcher, query_starts)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "store_unavailable"
    assert response.headers["Retry-After"].isdigit()


@pytest.mark.slow
def test_connections_cut_mid_batch_answer_503_and_the_api_recovers_by_itself(
    pg_url: str, tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    url = migrate(pg_url)
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as server, \
            session(url) as watcher, session(url) as locker:
        server.start()
        pid_before = server.pid

        # 1. Cut while the batch waits before its first write (behind the ingest lock, held here exclusively).
        first_valid, second_valid = events("cut1", 300), events("cut2", 300)
        first = first_valid + invalid("cut1", 3)
        locker.execute("SELECT pg_advisory_lock(%s)", (INGEST_LOCK,))
        answer, backend = blocked_batch(pool, server, first, watcher, "SELECT pg_advisory_xact_lock_shared")
        # pg_terminate_backend in the select list runs only on the rows the WHERE kept; inside the WHERE the
        # planner may call it before the other conditions, on every process of the shared server.
        killed = [row[0] for row in watcher.execute(
            "SELECT pid FROM (SELECT pid, pg_terminate_backend(pid) AS cut FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name <> %s AND backend_type = 'client backend') AS t "
            "WHERE cut", (FAULT_APP,))]
        assert backend in killed
        locker.execute("SELECT pg_advisory_unlock(%s)", (INGEST_LOCK,))
        assert_unavailable(answer.result(60))

        # 2. Cut after the events are inserted, while the dead-letter rows wait (rejected_events locked here).
        second = second_valid + invalid("cut2", 3)
        with locker.transaction():
            locker.execute("LOCK TABLE rejected_events IN EXCLUSIVE MODE")
            answer, backend = blocked_batch(pool, server, second, watcher, "COPY rejected_events")
            assert holds_lock_on(watcher, backend, "events", "RowExclusiveLock"), "the events should be written"
            watcher.execute("SELECT pg_terminate_backend(%s)", (backend,))
        assert_unavailable(answer.result(60))

        # Nothing of either batch was kept: not an event, not a dead-letter row.
        assert stored_ids(url) == [] and dead_letter(url) == []

        # 3. Every idle pooled connection cut between requests: the next request must not notice.
        idle = watcher.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND application_name <> %s AND backend_type = 'client backend'",
                               (FAULT_APP,)).fetchone()[0]
        assert idle >= 1, "the API's pool should hold a connection"
        for batch in (first, second):  # the collector's retry of both refused batches
            response = post(server.url, batch)
            assert response.status_code == 200, response.text
            assert Counter(r["status"] for r in response.json()["results"]) == Counter({"stored": 300, "rejected": 3})
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        assert server.alive() and server.pid == pid_before, "the API recovered without a restart"
        metrics = httpx.get(f"{server.url}/metrics").text
        assert "tally_store_errors_total 2.0" in metrics
    assert Counter(stored_ids(url)) == Counter(ids_of([first_valid, second_valid]))
    assert Counter(reason for reason, _ in dead_letter(url)) == Counter({"size_schema": 6})


@pytest.mark.slow
def test_postgres_crashed_mid_batch_and_restarted_the_api_recovers_and_nothing_accepted_is_lost(
    private_postgres: PrivatePostgres, tmp_path: Path, pool: ThreadPoolExecutor
) -> None:
    url = migrate(private_postgres.create_database("tally"))
    before, during, after = events("pre", 500), events("mid", 400), events("post", 300)
    in_flight = events("flight", 200) + invalid("flight", 2)
    server = ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log")
    try:
        server.start()
        pid_before = server.pid
        with Collector(server.url, TOKEN, tmp_path / "buffer", batch_size=100,
                       backoff=Backoff(base=0.05, max_delay=0.5), idle_interval=0.05) as collector:
            collector.start()
            collector.submit_many(before)
            assert collector.wait_until_empty(timeout=60)

            # A batch is mid-transaction (its events written, its dead-letter rows waiting) when Postgres crashes.
            watcher, locker = session(url), session(url)
            try:
                locker.execute("BEGIN")
                locker.execute("LOCK TABLE rejected_events IN EXCLUSIVE MODE")
                answer, backend = blocked_batch(pool, server, in_flight, watcher, "COPY rejected_events")
                assert holds_lock_on(watcher, backend, "events", "RowExclusiveLock")
                private_postgres.stop("immediate")
            finally:
                watcher.close()
                locker.close()
            assert_unavailable(answer.result(60))

            # While it is down: the API answers 503 (health too), the collector keeps everything.
            collector.submit_many(during)
            health = pool.submit(httpx.get, f"{server.url}/healthz", timeout=60)
            assert wait_for_outcome(collector, "unavailable", timeout=60)
            assert health.result(60).status_code == 503
            assert collector.buffered() == len(during)

            private_postgres.start()
            # The first request after the restart is served: the pool reconnects on demand, not on a backoff
            # schedule grown during the outage.
            retried = post(server.url, in_flight)
            assert retried.status_code == 200, retried.text
            assert retried.json()["stored"] == 200 and retried.json()["rejected"] == 2
            collector.submit_many(in_flight + after)  # and resent by a collector too: absorbed as duplicates
            assert collector.wait_until_empty(timeout=90), collector.status().sender
            assert httpx.get(f"{server.url}/healthz").status_code == 200
            assert server.alive() and server.pid == pid_before, "the API recovered without a restart"
    finally:
        server.stop()
    stored = Counter(stored_ids(url))
    assert set(stored) == ids_of([before, during, in_flight[:200], after])
    assert set(stored.values()) == {1}
    assert Counter(reason for reason, _ in dead_letter(url)) == Counter({"size_schema": 4})  # sent twice
