"""``tally serve`` while its database cannot be reached: ``/metrics`` still answers with the process counters
(the store errors among them) and leaves the store's gauges out; the database password, which the server's
URL carries, shows in no line the server prints, before, during or after the outage."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from tally_pipeline.api import app as api_app
from tally_pipeline.bench.serve_process import ServeProcess
from tally_pipeline.store import open_store
from tally_pipeline_tests.api_setup import build_api
from tally_pipeline_tests.faults import TOKEN, events, migrate, tokens_file, wait_until
from tally_pipeline_tests.holds import NEVER, Held

GIVE_UP = 60.0  # a bound for giving up on an answer, never a measurement
PASSWORD = "Sup3r-s3cret-pw-4242"  # the test server trusts every local login, so any password connects


def with_password(url: str) -> str:
    user, rest = url.removeprefix("postgresql://").split("@", 1)
    return f"postgresql://{user}:{PASSWORD}@{rest}"


@contextmanager
def unreachable(url: str, admin_dsn: str) -> Iterator[None]:
    """The database refuses new connections and its open ones are cut; reachable again on exit."""
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        try:
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def scrape(server: ServeProcess) -> tuple[int, str]:
    response = httpx.get(f"{server.url}/metrics", timeout=GIVE_UP)
    return response.status_code, response.text


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[ServeProcess]:
    config = tmp_path / "tally.yaml"
    config.write_text("clouds:\n  region-one: {provider: simulated}\n")
    with ServeProcess(with_password(migrate(pg_url)), tokens_file=tokens_file(tmp_path), config=config,
                      log_path=tmp_path / "serve.log", log_level="info") as proc:
        proc.start()
        yield proc


@pytest.mark.slow
def test_metrics_answer_while_the_database_is_down(server: ServeProcess, pg_url: str, postgres_server: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    stored = httpx.post(f"{server.url}/v1/events", json={"events": events("up", 3)}, headers=auth, timeout=30)
    assert stored.status_code == 200
    status, page = scrape(server)
    assert status == 200 and "tally_store_up 1" in page and "tally_sync_configured" in page

    with unreachable(pg_url, postgres_server):
        refused = httpx.post(f"{server.url}/v1/events", json={"events": events("down", 3)}, headers=auth, timeout=60)
        assert refused.status_code == 503
        assert PASSWORD not in refused.text
        status, page = scrape(server)
        assert status == 200, page  # that it does not wait for the store: the test below, on a held read
        assert "tally_store_errors_total 1.0" in page
        assert 'tally_events_total{cloud="other",outcome="stored"} 3.0' in page
        assert "tally_store_up 0.0" in page
        assert "tally_sync_" not in page and "tally_cloud_" not in page, "no gauge read from the store"

    wait_until(lambda: "tally_store_up 1.0" in scrape(server)[1], "the store gauges to come back", timeout=60)
    log = server.log_tail(1_000_000)
    assert "store unavailable" in log and "/metrics without the store's gauges" in log
    assert "postgresql://postgres:***@" in log, "the start-up line names the database, password masked"
    assert PASSWORD not in log


def test_a_scrape_answers_without_the_store_while_its_reads_are_held(
        monkeypatch: pytest.MonkeyPatch, serve_app: Callable[[object], str]) -> None:
    """A store that does not answer (down, its pool waiting 10 s for every query) must not hold ``/metrics``:
    the scrape answers with the process counters and without the store's gauges while the store's reads
    are provably still in progress (held here until the scrape has its answer). A scrape that waited for
    the store would get no answer while they are held; the bound only detects that. Nothing is timed."""
    reads = Held(api_app.store_families, hold=True)
    monkeypatch.setattr(api_app, "store_families", reads)
    with open_store("duckdb://:memory:", migrate=True) as store:
        url = serve_app(build_api(store).app)
        try:
            response = httpx.get(f"{url}/metrics", timeout=NEVER / 4)
            assert reads.entered.is_set() and not reads.release.is_set()  # the read was under way throughout
            assert reads.on_loop == [False] and threading.main_thread().name not in reads.threads
        finally:
            reads.release.set()
        # The abandoned read finishes on its own; the store stays open until it has.
        assert reads.returned.wait(NEVER)
    assert response.status_code == 200
    assert "tally_store_up 0.0" in response.text  # said so, on the page
    assert "tally_sync_" not in response.text and "tally_cloud_" not in response.text, "a gauge read from the store"
