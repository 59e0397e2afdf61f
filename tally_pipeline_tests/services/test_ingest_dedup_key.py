"""Dedup stays exact with the hashed dedup key (Postgres: an exclusion constraint over a hash index
of the key): keys whose hashes collide are different events, and the key text is injective."""

from __future__ import annotations

from datetime import UTC, datetime

from tally_pipeline.core.envelope import EventRecord, validate_event
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline_tests.events import event


def _colliding_ids(store, cloud: str) -> tuple[str, str]:
    """Two event ids whose dedup keys in ``cloud`` have the same 32-bit hash (the hash index's own
    hash function, ``hashtext``): a birthday search over 300,000 candidates finds a few pairs."""
    rows = store.query(
        "SELECT min(id), max(id) FROM (SELECT 'collide-' || g AS id, "
        "hashtext(octet_length(%s::text)::text || ':' || %s || ('collide-' || g)) AS h "
        "FROM generate_series(1, 300000) AS g) AS s GROUP BY h HAVING count(*) > 1 ORDER BY 1 LIMIT 1",
        (cloud, cloud),
    )
    assert rows, "no hash collision among the candidates"
    return rows[0]


def test_two_ids_whose_dedup_hashes_collide_are_both_stored(pg_store, registry) -> None:
    a, b = _colliding_ids(pg_store, "c1")
    assert a != b
    ingestor = Ingestor(pg_store, registry)
    first = event(event_id=a, cloud="c1")
    assert ingestor.ingest([first], origin="test").results[0].status == "stored"
    # b hashes like the held a: the lookup and the constraint compare the key itself, so b is new.
    second = event(event_id=b, cloud="c1")
    outcome = ingestor.ingest([second, first], origin="test")
    assert [r.status for r in outcome.results] == ["stored", "duplicate"]
    # A changed copy of b conflicts with b, not with a.
    changed = dict(second, resource_id="other")
    outcome = ingestor.ingest([changed], origin="test")
    assert [(r.status, r.conflict) for r in outcome.results] == [("duplicate", True)]
    rows = pg_store.query("SELECT event_id, resource_id FROM events WHERE cloud = 'c1' ORDER BY event_id")
    assert rows == sorted([(a, first["resource_id"]), (b, second["resource_id"])])


def test_the_staged_path_stores_colliding_ids_and_refuses_only_real_copies(pg_store, registry) -> None:
    """The fallback a racing writer forces (INSERT … ON CONFLICT DO NOTHING) is exact too."""
    a, b = _colliding_ids(pg_store, "c1")
    records = [validate_event(event(event_id=i, cloud="c1"), registry) for i in (a, b)]
    assert all(isinstance(r, EventRecord) for r in records)
    now = datetime.now(UTC)
    first = pg_store.run(lambda uow: uow._insert_staged(records[:1], now))
    both = pg_store.run(lambda uow: uow._insert_staged(records, now))
    assert (first, both) == ({("c1", a)}, {("c1", b)})
    assert pg_store.event_count() == 2


def test_the_dedup_key_tells_apart_clouds_and_ids_that_concatenate_alike(store, registry) -> None:
    """("region-a", "b-1") and ("region-ab", "-1") are two events, though cloud + id reads the same."""
    ingestor = Ingestor(store, registry)
    one = event(event_id="b-1", cloud="region-a")
    two = event(event_id="-1", cloud="region-ab")
    assert [r.status for r in ingestor.ingest([one, two], origin="test").results] == ["stored", "stored"]
    assert [r.status for r in ingestor.ingest([two, one], origin="test").results] == ["duplicate", "duplicate"]
    assert store.event_count() == 2
