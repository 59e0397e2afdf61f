"""The embedded DuckDB store under the concurrency the API and Dagster produce (issue #26): one real
``tally serve`` answering health checks in a loop beside concurrent posts, two store objects on one file
in one process, and a second process on the same file, which waits (or gets a clear 503), never a 500."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline_tests.collector_api import volume_event
from tally_pipeline_tests.faults import TOKEN, migrate, tokens_file
from tally_pipeline_tests.processes import SPAWN

POSTERS = 2
POSTS_EACH = 60


def _post_loop(url: str, prefix: int, statuses: Counter[int], lock: threading.Lock) -> None:
    with httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for n in range(POSTS_EACH):
            try:
                status = http.post("/v1/events", json={"events": [volume_event(prefix + n * 5 + k) for k in range(5)]}).status_code
            except httpx.HTTPError:
                status = -1  # no answer at all
            with lock:
                statuses[status] += 1


@pytest.mark.slow
def test_health_checks_beside_concurrent_posts_never_500(tmp_path: Path) -> None:
    url = migrate(f"duckdb://{tmp_path / 'tally.duckdb'}")
    statuses: Counter[int] = Counter()
    health: Counter[int] = Counter()
    lock = threading.Lock()
    done = threading.Event()
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as server:
        server.start()

        def health_loop() -> None:  # back to back, as a load balancer's check at its fastest
            with httpx.Client(base_url=server.url, timeout=60) as http:
                while not done.is_set():
                    status = http.get("/healthz").status_code
                    with lock:
                        health[status] += 1

        checker = threading.Thread(target=health_loop)
        posters = [threading.Thread(target=_post_loop, args=(server.url, i * 100_000, statuses, lock)) for i in range(POSTERS)]
        checker.start()
        for thread in posters:
            thread.start()
        for thread in posters:
            thread.join()
        done.set()
        checker.join()
        log = server.log_tail(20_000)
    assert statuses == Counter({200: POSTERS * POSTS_EACH}), (statuses, log)
    assert set(health) == {200} and health[200] > 0, (health, log)
    with open_store(url) as store:
        assert store.event_count() == POSTERS * POSTS_EACH * 5


@pytest.mark.slow
def test_two_store_objects_on_one_file_in_two_threads(tmp_path: Path) -> None:
    url = migrate(f"duckdb://{tmp_path / 'tally.duckdb'}")
    errors: list[BaseException] = []
    with open_store(url) as first, open_store(url) as second:

        def write(store, prefix: int) -> None:
            ingestor = Ingestor(store, default_registry())
            try:
                for n in range(40):
                    outcome = ingestor.ingest([volume_event(prefix + n)], origin="api")
                    assert outcome.stored == 1
                    store.ping()
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(s, p)) for s, p in ((first, 0), (second, 1000))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert first.event_count() == 80


def _ingest_directly(url: str, first: int, count: int, results) -> None:
    """Another process on the same file: a ``tally ingest`` or a Dagster step, one unit of work per item."""
    try:
        with open_store(url) as store:
            ingestor = Ingestor(store, default_registry())
            stored = sum(ingestor.ingest([volume_event(first + n)], origin="file:other").stored for n in range(count))
        results.put(("ok", stored))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        results.put(("error", repr(exc)))


@pytest.mark.slow
def test_two_processes_on_one_file_wait_for_each_other(tmp_path: Path) -> None:
    """The API and a second process writing the same file: each waits for the other's unit of work to
    end (a 503 ``store_unavailable`` naming the lock only after the wait budget): never a 500, no loss."""
    url = migrate(f"duckdb://{tmp_path / 'tally.duckdb'}")
    posts = 40
    answers: Counter[tuple[int, str | None]] = Counter()
    posted = 0
    with ServeProcess(url, tokens_file=tokens_file(tmp_path), log_path=tmp_path / "serve.log") as server:
        server.start()
        results = SPAWN.Queue()
        other = SPAWN.Process(target=_ingest_directly, args=(url, 500_000, posts, results))
        other.start()
        with httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            for n in range(posts):
                response = http.post("/v1/events", json={"events": [volume_event(n)]})
                answers[(response.status_code, response.json().get("error"))] += 1
                posted += response.status_code == 200 and response.json()["stored"]
                health = http.get("/healthz")
                answers[(health.status_code, health.json().get("error"))] += 1
        outcome = results.get(timeout=300)
        other.join(timeout=60)
        log = server.log_tail(20_000)
    assert other.exitcode == 0 and outcome == ("ok", posts), outcome
    assert set(answers) <= {(200, None), (503, "store_unavailable")}, (answers, log)
    assert answers[(200, None)] > 0
    with open_store(url) as store:  # the file opens cleanly and holds every write that was answered
        assert store.event_count() == posts + posted
