"""``tally serve --workers 2``: every scrape, whichever worker answers it, counts the whole server."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tally_pipeline.bench.common import free_port

from ..events import event
from ..faults import TOKEN, migrate, tokens_file, wait_until

EVENTS, BATCH, ROUND, MAX_ROUNDS = 1000, 20, 10, 40


def _stored(page: str) -> float:
    """The server's stored-events count, summed over clouds, as Prometheus would read it."""
    total = 0.0
    for line in page.splitlines():
        if line.startswith("tally_events_total{") and 'outcome="stored"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.slow
@pytest.mark.postgres
def test_successive_scrapes_of_two_workers_read_the_same_whole_server_count(pg_url: str, tmp_path: Path) -> None:
    port = free_port()
    counters = tmp_path / "metrics"
    counters.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(counters)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tally_pipeline", "serve", "--database", migrate(pg_url), "--port", str(port),
         "--tokens-file", str(tokens_file(tmp_path)), "--workers", "2", "--log-level", "warning"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                return False

        wait_until(healthy, "tally serve to answer", timeout=60)

        def post(start: int) -> int:
            batch = [event(event_id=f"w-{i}", resource_id=f"srv-{i}") for i in range(start, start + BATCH)]
            # A new connection for every batch, so the kernel hands them to both workers.
            with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                answer = http.post("/v1/events", json={"events": batch})
            assert answer.status_code == 200, answer.text
            return answer.json()["stored"]

        def workers() -> set[str]:
            # Each worker keeps its own file once it counts (the parent, which only starts them, counts nothing).
            return {f.stem for f in counters.glob("counter_*.db")} - {f"counter_{proc.pid}"}

        # The kernel, not the test, decides which worker accepts a connection, and one worker may take a
        # whole round. So rounds of concurrent batches go on until both workers have counted some of them.
        sent = 0
        with ThreadPoolExecutor(max_workers=8) as pool:
            for _ in range(MAX_ROUNDS):
                if sent >= EVENTS and len(workers()) == 2:
                    break
                sent += sum(pool.map(post, range(sent, sent + ROUND * BATCH, BATCH)))
        assert len(workers()) == 2, f"after {sent} events only {workers()} counted"
        scrapes = []
        for _ in range(8):  # new connections: successive scrapes land on either worker
            with httpx.Client(base_url=url, timeout=30) as http:
                scrapes.append(_stored(http.get("/metrics").text))
        assert scrapes == [float(sent)] * 8
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_one_process_counts_without_a_multiprocess_folder(tmp_path: Path) -> None:
    """The default single-process server keeps its counters in memory: no folder, the same page."""
    from starlette.testclient import TestClient

    from tally_pipeline.api.app import ApiContext, create_app
    from tally_pipeline.runtime import Runtime

    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    rt = Runtime.load(None, database=f"duckdb://{tmp_path / 'tally.duckdb'}")
    client = TestClient(create_app(ApiContext(store=rt.store, ingestor=rt.ingestor, runtime=rt)))
    client.post("/v1/events", json={"events": [event(), event(), {"bad": 1}]})
    page = client.get("/metrics").text
    rt.close()
    assert _stored(page) == 2.0
    assert "tally_store_up 1.0" in page
