"""Event ids are scoped per cloud: dedup by (cloud, event_id), no cross-cloud shadowing or oracle,
the conflict rule within a cloud, and the migration of a database keyed by event_id alone."""

from __future__ import annotations

import duckdb
import psycopg
from starlette.testclient import TestClient

from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline.store.migrations import MIGRATIONS_TABLE, migrations_for
from tally_pipeline_tests.api_setup import bearer, build_api, token_for
from tally_pipeline_tests.events import event


def test_the_same_id_in_two_clouds_is_two_events(ingestor, store) -> None:
    a = event(event_id="shared-id", cloud="c1")
    b = event(event_id="shared-id", cloud="c2")
    outcome = ingestor.ingest([a, b], origin="test")
    assert [r.status for r in outcome.results] == ["stored", "stored"]
    later = ingestor.ingest([event(event_id="shared-id", cloud="c3")], origin="test")
    assert later.results[0].status == "stored"
    rows = store.query("SELECT cloud, resource_id FROM events WHERE event_id = 'shared-id' ORDER BY cloud")
    assert rows == [("c1", a["resource_id"]), ("c2", b["resource_id"]), ("c3", rows[2][1])]
    assert store.rejected() == []  # different clouds: no conflict either


def test_a_known_id_sent_for_another_cloud_never_shadows_it(ingestor, store) -> None:
    """Cloud c2's real event arriving after another writer used its id in c1 is stored, not a duplicate."""
    ingestor.ingest([event(event_id="victim", cloud="c1", resource_id="junk")], origin="api")
    real = event(event_id="victim", cloud="c2")
    assert ingestor.ingest([real], origin="api").results[0].status == "stored"
    assert store.query("SELECT resource_id FROM events WHERE cloud = 'c2' AND event_id = 'victim'") == [
        (real["resource_id"],)
    ]


def test_the_conflict_rule_holds_within_a_cloud(ingestor, store) -> None:
    first = event(event_id="same", cloud="c1")
    ingestor.ingest([first, event(event_id="same", cloud="c2")], origin="test")
    changed = dict(first, resource_id="other")
    outcome = ingestor.ingest([changed, changed], origin="api")
    assert [(r.status, r.conflict) for r in outcome.results] == [("duplicate", True), ("duplicate", True)]
    dead = store.rejected(reason="duplicate_conflict")
    assert {(d.cloud, d.event_id) for d in dead} == {("c1", "same")}


def test_a_token_for_one_cloud_learns_nothing_about_another(store) -> None:
    api = build_api(store)
    client = TestClient(api.app)
    held = event(event_id="secret-id", cloud="other")
    assert client.post("/v1/events", json={"events": [held]}, headers=bearer(token_for("ingest:other"))).status_code == 200
    c1 = bearer(token_for("ingest:c1"))
    probe = client.post("/v1/events", json={"events": [event(event_id="secret-id", cloud="c1"),
                                                        event(event_id="never-seen", cloud="c1")]}, headers=c1).json()
    assert [r["status"] for r in probe["results"]] == ["stored", "stored"]  # same answer, held or not
    across = client.post("/v1/events", json={"events": [dict(held, resource_id="x"),
                                                         event(event_id="never-seen-2", cloud="other")]}, headers=c1)
    assert [r["reason"] for r in across.json()["results"]] == ["forbidden_cloud", "forbidden_cloud"]
    history = client.get(f"/v1/resources/other/instance/{held['resource_id']}/events", headers=bearer(token_for("read")))
    assert [e["event_id"] for e in history.json()["events"]] == ["secret-id"]


def _apply_up_to(store_url: str, version: int) -> None:
    """Bring a new database to the schema of migration ``version`` (as an older release left it)."""
    dialect = "duckdb" if store_url.startswith("duckdb://") else "postgres"
    wanted = [m for m in migrations_for(dialect) if m.version <= version]
    if dialect == "duckdb":
        con = duckdb.connect(store_url.removeprefix("duckdb://"))
        con.execute("SET TimeZone = 'UTC'")
        con.execute(MIGRATIONS_TABLE)
        for m in wanted:
            con.execute(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
        con.close()
        return
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute(MIGRATIONS_TABLE)
        for m in wanted:
            conn.execute(m.sql)
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (m.version, m.name))


def test_a_database_keyed_by_event_id_alone_is_migrated(store_url, registry) -> None:
    _apply_up_to(store_url, 6)
    with open_store(store_url, migrate=False) as old:
        # An older release's ingest: the event log keyed by event_id alone.
        old.run(lambda uow: uow.execute(
            "INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id, project_id, "
            "occurred_at, source, payload, content_hash, received_at) VALUES "
            "('e1', 'compute.instance.create.end', 'create', 'c1', 'instance', 'srv-1', 'p', "
            "'2026-03-01T00:00:00Z', 'collector', '{\"size\": {\"flavor_name\": \"m\", \"vcpus\": 1, "
            "\"ram_mb\": 1, \"disk_gb\": 1}}', 'h', '2026-03-01T00:00:00Z')"))
        before = old.query("SELECT seq, event_id, cloud FROM events")
        assert "0007_cloud_scoped_events.sql" in old.pending_migrations()
        assert "0007_cloud_scoped_events.sql" in old.migrate()
        assert old.query("SELECT seq, event_id, cloud FROM events") == before
    with open_store(store_url, migrate=False) as store:
        outcome = Ingestor(store, registry).ingest(
            [event(event_id="e1", cloud="c2"), event(event_id="e1", cloud="c1")], origin="test")
        assert [r.status for r in outcome.results] == ["stored", "duplicate"]
        seqs = store.query("SELECT cloud, seq FROM events ORDER BY cloud")
        assert seqs[0] == ("c1", before[0][0]) and seqs[1][1] > before[0][0]  # the sequence goes on
