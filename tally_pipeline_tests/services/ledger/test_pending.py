"""Pending usage (``GET /v1/usage?include=pending``) is exactly what the next posting cycle posts, on
random histories with late events (inside the window, in the band between two cycles' boundaries,
and before the window: aged out), corrections and deletes, on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.core.usage import to_micro
from tally_pipeline.schemas import default_registry
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.usage import usage_page
from tally_pipeline.store import Store, open_store
from tally_pipeline.store.ledger_reads import Scope
from tally_pipeline_tests.services.test_projection import envelope

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LAG = timedelta(minutes=15)
WINDOW_DAYS = 2
NOW1, NOW2 = T0 + timedelta(hours=60), T0 + timedelta(hours=100)  # boundaries T0+12h, then T0+52h

event = st.tuples(
    st.integers(0, 3),  # resource
    st.sampled_from(["create", "create", "update", "update", "delete"]),
    st.integers(0, 99),  # hour after T0
    st.sampled_from(["p1", "p2"]),
    st.sampled_from([1, 5, 20]),
)


def events_of(batch: str, drawn: list[tuple[int, str, int, str, int]]) -> list[dict]:
    out = []
    for n, (resource, verb, hour, project, gb) in enumerate(drawn):
        out.append(envelope(f"{batch}{n}", f"v{resource}", verb, T0 + timedelta(hours=hour, minutes=7 * n % 60),
                            project if verb != "delete" else None, gb if verb != "delete" else None))
    return out


@contextmanager
def fresh_store(backend: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    if backend == "duckdb":
        url = "duckdb://:memory:"
    else:
        databases = request.getfixturevalue("pg_databases")
        url = databases.create()
    store = open_store(url, migrate=True)
    try:
        yield store
    finally:
        store.close()
        if backend == "postgres":
            databases.drop_soon(url)


def pending(store: Store, now: datetime) -> dict[tuple[EntityKey, str], int]:
    page = usage_page(store, default_registry(), now=now, ingest_lag=LAG, window_days=WINDOW_DAYS, scope=Scope(),
                      include_pending=True, limit=1000)
    assert page.next_key is None
    return {(EntityKey(r.cloud, r.project_id, r.meter), r.account): r.micro for r in page.rows if r.provisional}


def posted_at(store: Store, clamp: datetime) -> dict[tuple[EntityKey, str], int]:
    rows = store.query("SELECT cloud, project_id, meter, account, amount FROM ledger_postings WHERE clamp = %s", [clamp])
    return {(EntityKey(c, p, m), a): to_micro(amount) for c, p, m, a, amount in rows}


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_pending_equals_the_next_cycles_postings(backend: str, request: pytest.FixtureRequest) -> None:
    registry = default_registry()

    @given(first=st.lists(event, min_size=1, max_size=12), late=st.lists(event, max_size=12))
    @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def holds(first, late) -> None:
        with fresh_store(backend, request) as store:
            ingestor = Ingestor(store, registry)
            ingestor.ingest(events_of("a", first), origin="t")
            assert (expected := pending(store, NOW1)) == pending(store, NOW1)  # reading posts nothing
            projection.refresh(store)
            one = post_usage(store, registry, now=NOW1, ingest_lag=LAG, window_days=WINDOW_DAYS)
            assert posted_at(store, one.clamp) == expected

            ingestor.ingest(events_of("b", late), origin="t")  # late, corrections, aged out
            expected = pending(store, NOW2)
            projection.refresh(store)
            two = post_usage(store, registry, now=NOW2, ingest_lag=LAG, window_days=WINDOW_DAYS)
            assert two.clean
            assert posted_at(store, two.clamp) == expected
            assert pending(store, NOW2) == {}

    holds()
