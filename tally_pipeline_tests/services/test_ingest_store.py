"""The ingest core on both stores: dedup, in-batch duplicates, conflicts, dead letter, atomic batches."""

from __future__ import annotations

import json

import pytest

from tally_pipeline.services.ingest import MAX_BATCH, BatchTooLarge, Ingestor
from tally_pipeline.store import open_store
from tally_pipeline_tests.events import event


def stored_ids(store) -> list[str]:
    return [row[0] for row in store.query("SELECT event_id FROM events ORDER BY event_id")]


def test_batch_outcomes_in_order(ingestor, store) -> None:
    a, b = event(), event()
    outcome = ingestor.ingest([a, {"bogus": 1}, b, a], origin="test")
    assert [r.status for r in outcome.results] == ["stored", "rejected", "stored", "duplicate"]
    assert [r.index for r in outcome.results] == [0, 1, 2, 3]
    assert (outcome.stored, outcome.duplicates, outcome.rejected) == (2, 1, 1)
    assert stored_ids(store) == sorted([a["event_id"], b["event_id"]])


def test_replay_is_all_duplicates_and_changes_nothing(ingestor, store) -> None:
    batch = [event() for _ in range(20)]
    ingestor.ingest(batch, origin="test")
    before = store.query("SELECT event_id, seq, received_at FROM events ORDER BY event_id")
    outcome = ingestor.ingest(list(reversed(batch)), origin="test")
    assert outcome.duplicates == 20 and outcome.stored == 0
    assert not any(r.conflict for r in outcome.results)
    assert store.query("SELECT event_id, seq, received_at FROM events ORDER BY event_id") == before
    assert store.rejected() == []


def test_event_stored_as_normalised_row(ingestor, store) -> None:
    e = event(occurred_at="2026-03-01T13:00:00+01:00", event_type="compute.instance.create.end")
    ingestor.ingest([e], origin="test")
    row = store.query(
        "SELECT event_type, verb, cloud, resource_type, resource_id, project_id, occurred_at, source "
        "FROM events WHERE event_id = %s",
        [e["event_id"]],
    )[0]
    assert row[:6] == ("compute.instance.create.end", "create", "region-one", "instance", e["resource_id"], "proj-a")
    assert row[6].isoformat() in ("2026-03-01T12:00:00+00:00",)
    assert row[7] == "collector"
    payload = store.query("SELECT payload FROM events WHERE event_id = %s", [e["event_id"]])[0][0]
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert payload == e["payload"]


def test_conflicting_duplicate_is_flagged_and_dead_lettered(ingestor, store) -> None:
    first = event(event_id="same-id")
    ingestor.ingest([first], origin="test")
    changed = dict(first, resource_id="another")
    outcome = ingestor.ingest([changed], origin="api")
    result = outcome.results[0]
    assert result.status == "duplicate" and result.conflict
    assert result.as_json()["conflict"] is True
    dead = store.rejected(reason="duplicate_conflict")
    assert len(dead) == 1 and dead[0].event_id == "same-id" and dead[0].origin == "api"
    assert json.loads(dead[0].raw) == changed
    # first write wins
    assert store.query("SELECT resource_id FROM events WHERE event_id = 'same-id'")[0][0] == first["resource_id"]


def test_conflict_inside_one_batch(ingestor, store) -> None:
    first = event(event_id="dup-in-batch")
    outcome = ingestor.ingest([first, dict(first, project_id="other"), first], origin="test")
    assert [(r.status, r.conflict) for r in outcome.results] == [
        ("stored", False), ("duplicate", True), ("duplicate", False)]
    assert len(store.rejected(reason="duplicate_conflict")) == 1


def test_every_rejection_is_in_the_dead_letter_with_reason(ingestor, store) -> None:
    items = [event(cloud="bad cloud"), event(occurred_at="2026-01-01T00:00:00"), 42, event(colour="x")]
    outcome = ingestor.ingest(items, origin="file:x.jsonl")
    assert outcome.rejected == 4
    dead = store.rejected()
    assert sorted(d.reason for d in dead) == sorted(r.reason for r in outcome.results)
    assert {d.origin for d in dead} == {"file:x.jsonl"}
    raws = [json.loads(d.raw) for d in dead]
    assert sorted(map(json.dumps, raws)) == sorted(map(json.dumps, items))


def test_forbidden_cloud_and_source(ingestor, store) -> None:
    outcome = ingestor.ingest(
        [event(cloud="mine"), event(cloud="theirs"), event(cloud="mine", source="reconciliation")],
        origin="api",
        may_write=lambda cloud: cloud == "mine",
    )
    assert [r.status for r in outcome.results] == ["stored", "rejected", "rejected"]
    assert [r.reason for r in outcome.results[1:]] == ["forbidden_cloud", "forbidden_source"]
    assert {d.reason for d in store.rejected()} == {"forbidden_cloud", "forbidden_source"}
    sync = ingestor.ingest([event(source="reconciliation")], origin="sync", sources=("reconciliation",))
    assert sync.stored == 1


def test_batch_limit(ingestor) -> None:
    with pytest.raises(BatchTooLarge):
        ingestor.ingest([event() for _ in range(MAX_BATCH + 1)], origin="test")


def test_stream_commits_batch_by_batch(ingestor, store) -> None:
    items = [event() for _ in range(2500)]
    outcomes = list(ingestor.ingest_stream(items, origin="test"))
    assert [o.stored for o in outcomes] == [1000, 1000, 500]
    assert store.event_count() == 2500


def test_dead_letter_pages_newest_first(ingestor, store) -> None:
    for i in range(5):
        ingestor.ingest([event(cloud="c-x", colour=i)], origin="test")
    page1 = store.rejected(cloud="c-x", limit=2)
    page2 = store.rejected(cloud="c-x", limit=2, before_id=page1[-1].id)
    page3 = store.rejected(cloud="c-x", limit=2, before_id=page2[-1].id)
    ids = [e.id for e in page1 + page2 + page3]
    assert ids == sorted(ids, reverse=True) and len(ids) == 5
    assert store.rejected(reason="no_such_reason") == []


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_failing_batch_commits_nothing(backend, pg_url, registry) -> None:
    """The batch is one transaction: if writing its dead-letter rows fails, its events are not kept."""
    store = open_store(pg_url, migrate=True)
    try:
        store.query  # noqa: B018
        with store.unit_of_work() as uow:
            uow.execute(
                "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
                "IF NEW.reason = 'unknown_field' THEN RAISE EXCEPTION 'dead letter broken'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            uow.execute("CREATE TRIGGER refuse BEFORE INSERT ON rejected_events FOR EACH ROW EXECUTE FUNCTION refuse()")
        ingestor = Ingestor(store, registry)
        with pytest.raises(Exception, match="dead letter broken"):
            ingestor.ingest([event(), event(colour="x")], origin="test")
        assert store.event_count() == 0
    finally:
        store.close()
