"""The collector against the real ingest API (``tally_pipeline.api``) served by uvicorn, on DuckDB and Postgres."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.api.auth import Principal, TokenBook, digest
from tally_pipeline.collector import Collector, CollectorAuthError
from tally_pipeline.collector.backoff import Backoff
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import Store
from tally_pipeline_tests.collector_api import TOKEN, LoopbackServer, volume_event, wait_for_outcome

C1_ONLY = "collector-c1-only-token"


def real_app(store: Store, *, max_body_bytes: int = 5 * 1024 * 1024) -> Starlette:
    tokens = TokenBook([
        (digest(TOKEN), Principal("collector", frozenset({"ingest:*"}))),
        (digest(C1_ONLY), Principal("c1 collector", frozenset({"ingest:c1"}))),
    ])
    ctx = ApiContext(store=store, ingestor=Ingestor(store, default_registry()), tokens=tokens,
                     max_body_bytes=max_body_bytes)
    return create_app(ctx)


@pytest.fixture
def served(store: Store) -> Iterator[LoopbackServer]:
    with LoopbackServer(real_app(store)) as srv:
        yield srv.start()


def stored_ids(store: Store) -> Counter[str]:
    return Counter(row[0] for row in store.query("SELECT event_id FROM events"))


def rejected_reasons(store: Store) -> Counter[str]:
    return Counter(row[0] for row in store.query("SELECT reason FROM rejected_events"))


@pytest.mark.slow
def test_through_an_outage_every_event_is_stored_exactly_once(store: Store, tmp_path: Path):
    valid = [volume_event(i) for i in range(2300)]
    invalid = [volume_event(10_000 + i, payload={"size": {"gb": -1}}) for i in range(30)]
    with LoopbackServer(real_app(store)) as srv:  # bound, not yet listening: the API is down
        with Collector(srv.url, TOKEN, tmp_path, backoff=Backoff(base=0.02, max_delay=0.1), idle_interval=0.1) as c:
            c.submit_many(valid[:1500])
            c.submit_many(invalid)
            c.start()
            assert wait_for_outcome(c, "unavailable")
            for event in valid[1500:]:
                c.submit(event)
            c.submit_many(valid[:200])  # resubmitted: the API absorbs them as duplicates
            assert c.buffered() == 1500 + 30 + 800 + 200
            srv.start()  # the API comes up on the same port
            assert c.wait_until_empty(timeout=120)
            local_rejects = c.rejected()
    ids = stored_ids(store)
    assert set(ids) == {e["event_id"] for e in valid}
    assert set(ids.values()) == {1}
    assert rejected_reasons(store) == Counter({"size_schema": 30})
    assert sorted(r.event_id for r in local_rejects) == sorted(e["event_id"] for e in invalid)
    assert {r.reason for r in local_rejects} == {"size_schema"}


def test_a_body_over_the_apis_limit_is_split_and_an_event_too_large_alone_is_kept_locally(store, tmp_path):
    with LoopbackServer(real_app(store, max_body_bytes=20_000)) as srv:
        srv.start()
        huge = volume_event(999, payload={"size": {"gb": 1}, "blob": "x" * 25_000})
        with Collector(srv.url, TOKEN, tmp_path) as c:
            c.submit_many([*(volume_event(i) for i in range(300)), huge])
            report = c.drain()
            assert report.remaining == 0
            (kept,) = c.rejected()
    assert report.stored == 300 and report.rejected_locally == 1
    assert kept.event_id == "ev-000999" and kept.reason == "event_too_large" and "20000" in kept.message
    ids = stored_ids(store)
    assert len(ids) == 300 and "ev-000999" not in ids


def test_resending_delivered_events_is_absorbed(served, store, tmp_path):
    events = [volume_event(i) for i in range(50)]
    with Collector(served.url, TOKEN, tmp_path / "a") as first, Collector(served.url, TOKEN, tmp_path / "b") as second:
        first.submit_many(events)
        second.submit_many(events)
        second.submit(volume_event(3, resource_id="changed"))  # same event_id, other content
        a = first.drain()
        b = second.drain()
    assert (a.stored, a.duplicates) == (50, 0)
    assert (b.stored, b.duplicates, b.conflicts) == (0, 51, 1)
    assert set(stored_ids(store).values()) == {1} and len(stored_ids(store)) == 50
    assert rejected_reasons(store) == Counter({"duplicate_conflict": 1})


def test_an_event_for_a_cloud_the_token_may_not_write_is_rejected_not_retried(served, store, tmp_path):
    with Collector(served.url, C1_ONLY, tmp_path) as c:
        c.submit_many([volume_event(1, cloud="c1"), volume_event(2, cloud="c2")])
        report = c.drain()
        (rejected,) = c.rejected()
    assert report.remaining == 0 and report.stored == 1 and report.rejected == 1
    assert rejected.event_id == "ev-000002" and rejected.reason == "forbidden_cloud"
    assert set(stored_ids(store)) == {"ev-000001"}


def test_an_unknown_token_stops_the_sender_with_everything_kept(served, store, tmp_path):
    with Collector(served.url, "not-a-known-token", tmp_path) as c:
        c.submit_many(volume_event(i) for i in range(5))
        with pytest.raises(CollectorAuthError, match="401"):
            c.drain(retry_for=60)
        assert c.buffered() == 5
    assert stored_ids(store) == Counter()
