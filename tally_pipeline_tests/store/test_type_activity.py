"""``collector_type_activity``: kept by the ingest transaction on both backends, and filled from the log by
its migration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import psycopg
import pytest

from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store, type_activity
from tally_pipeline.store.migrations import MIGRATIONS_TABLE, migrations_for
from tally_pipeline_tests.events import SIZES, event

T1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T2 = T1 + timedelta(minutes=7)


def volume(**overrides):
    return event(**{"event_type": "volume.create.end", "resource_type": "volume",
                    "payload": {"size": dict(SIZES["volume"])}, **overrides})


def rows(store) -> list[tuple]:
    return [(c, t, f.astimezone(UTC), last.astimezone(UTC), int(n)) for c, t, f, last, n in store.query(
        "SELECT cloud, resource_type, first_collector_event, last_collector_event, collector_events "
        "FROM collector_type_activity ORDER BY cloud, resource_type")]


def test_ingest_keeps_each_clouds_types_in_the_same_transaction(store, registry) -> None:
    now = [T1]
    ingestor = Ingestor(store, registry, clock=lambda: now[0])
    first = [event(), event(), volume(), event(cloud="region-two")]
    ingestor.ingest(first, origin="t")
    assert rows(store) == [("region-one", "instance", T1, T1, 2), ("region-one", "volume", T1, T1, 1),
                           ("region-two", "instance", T1, T1, 1)]
    now[0] = T2
    # duplicates and the sync's own events are not the collector's: they move nothing
    sync = volume(source="reconciliation", event_type="sync.create")
    outcome = ingestor.ingest([first[0], volume(), sync], origin="t", sources=("collector", "reconciliation"))
    assert (outcome.stored, outcome.duplicates) == (2, 1)
    assert rows(store) == [("region-one", "instance", T1, T1, 2), ("region-one", "volume", T1, T2, 2),
                           ("region-two", "instance", T1, T1, 1)]
    assert [(c, t, at.astimezone(UTC)) for c, t, at in type_activity.last_collector_events(store)] == [
        ("region-one", "instance", T1), ("region-one", "volume", T2), ("region-two", "instance", T1)]


def test_a_failed_batch_leaves_no_activity(store, registry, monkeypatch) -> None:
    def broken(uow, counts, at):
        raise RuntimeError("the database went away after the activity")

    monkeypatch.setattr(type_activity, "note", broken)
    with pytest.raises(RuntimeError, match="went away"):
        Ingestor(store, registry, clock=lambda: T1).ingest([volume()], origin="t")
    assert rows(store) == [] and store.query("SELECT count(*) FROM events")[0][0] == 0


def _migrate_to(url: str, dialect: str, below: int) -> None:
    """A database at the schema of the release before migration ``below``."""
    wanted = [m for m in migrations_for(dialect) if m.version < below]
    if dialect == "duckdb":
        con = duckdb.connect(url.removeprefix("duckdb://"))
        con.execute("SET TimeZone = 'UTC'")
        con.execute(MIGRATIONS_TABLE)
        for m in wanted:
            con.execute(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
        con.close()
        return
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(MIGRATIONS_TABLE)
        for m in wanted:
            con.execute(m.sql.encode())
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", [m.version, m.name])


def test_the_migration_fills_the_table_from_the_log(store_url, registry) -> None:
    dialect = "duckdb" if store_url.startswith("duckdb") else "postgres"
    _migrate_to(store_url, dialect, 17)
    with open_store(store_url, migrate=False) as old:
        old.run(lambda uow: uow.execute(
            "INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id, project_id, "
            "occurred_at, source, payload, content_hash, received_at) VALUES "
            "('a', 'volume.create.end', 'create', 'c1', 'volume', 'v1', 'p', %s, 'collector', '{}', 'h', %s), "
            "('b', 'volume.delete.end', 'delete', 'c1', 'volume', 'v1', 'p', %s, 'collector', '{}', 'h', %s), "
            "('c', 'sync.create', 'create', 'c1', 'image', 'i1', 'p', %s, 'reconciliation', '{}', 'h', %s)",
            (T1, T1, T2, T2, T2, T2)))
    with open_store(store_url, migrate=True) as store:
        assert rows(store) == [("c1", "volume", T1, T2, 2)]  # the sync's image is no collector event
