"""Postgres finds a resource's events through a hash of its key (``events_by_resource``, migration
0013): every reader reaches that index, and answers stay exact when hashes collide."""

from __future__ import annotations

import pytest

from tally_pipeline.services import projection, queries
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store.postgres import resource_key
from tally_pipeline.store.postgres.projection import PostgresProjectionTables, history_sql
from tally_pipeline.store.resource_reads import resource_history
from tally_pipeline_tests.events import event

_LARGE = {"flavor_name": "m1.large", "vcpus": 4, "ram_mb": 8192, "disk_gb": 80}


def _resize(resource_id: str, at: str) -> dict:
    return event(resource_id=resource_id, event_type="compute.instance.resize.confirm.end", occurred_at=at,
                 payload={"size": dict(_LARGE)})


def _tables(store) -> tuple[list, list]:
    return (store.query("SELECT * FROM current_resources ORDER BY 1, 2, 3"),
            store.query("SELECT * FROM resource_intervals ORDER BY 1, 2, 3, 4"))


def _plan(store, sql: str, params: list) -> str:
    def explain(uow) -> str:
        uow.execute("SET LOCAL enable_seqscan = off")  # a tiny table: ask only whether the index is usable
        return "\n".join(r[0] for r in uow.fetchall(f"EXPLAIN {sql}", params))
    return store.run(explain)


def test_a_resource_history_and_the_refold_read_the_hash_index(pg_store, registry) -> None:
    Ingestor(pg_store, registry).ingest([event(resource_id="a"), event(resource_id="b")], origin="test")
    where, params = pg_store.resource_events_filter(("region-one", "instance", "a"))
    assert "Index Scan using events_by_resource" in _plan(pg_store, f"SELECT * FROM events WHERE {where}", params)

    def refold_plan(uow) -> str:
        uow.execute("SET LOCAL enable_seqscan = off")
        PostgresProjectionTables(uow, 0)._keys_table("_refold", [("region-one", "instance", "a")])
        on = resource_key.same_resource("e", "k")
        return "\n".join(r[0] for r in uow.fetchall(f"EXPLAIN SELECT * FROM _refold k JOIN events e ON {on}"))
    assert "using events_by_resource" in pg_store.run(refold_plan)


def test_resources_whose_hashes_collide_keep_their_own_histories(pg_store, registry, monkeypatch) -> None:
    """Every key hashing alike (the worst case of a collision): readers tell them apart by the key itself."""
    monkeypatch.setattr(resource_key, "resource_hash", lambda *columns: "0::bigint")
    ingestor = Ingestor(pg_store, registry)
    ingestor.ingest([event(resource_id="a", occurred_at="2026-03-01T10:00:00Z"),
                     event(resource_id="b", occurred_at="2026-03-01T10:00:00Z"),
                     _resize("a", "2026-03-01T14:00:00Z")], origin="test")
    projection.refresh(pg_store)
    # late events for both: each resource is re-folded from its own history only
    ingestor.ingest([_resize("a", "2026-03-01T12:00:00Z"), _resize("b", "2026-03-01T09:00:00Z")], origin="test")
    refreshed = projection.refresh(pg_store)
    assert refreshed.refolded == 2
    after_refresh = _tables(pg_store)
    projection.rebuild(pg_store)
    assert _tables(pg_store) == after_refresh
    history = queries.history(pg_store, "region-one", "instance", "a")
    assert history is not None
    assert [(e["resource_id"], e["occurred_at"].hour) for e in history] == [("a", 10), ("a", 12), ("a", 14)]
    assert len(resource_history(pg_store, ("region-one", "instance", "b"))) == 2
    # b's late resize is before its create: it stays at the size it was created with
    lifecycle = queries.lifecycle(pg_store, "region-one", "instance", "b")
    assert lifecycle is not None and [i["size"]["flavor_name"] for i in lifecycle] == ["m1.small"]


def _generated_log(events: int, resources: int) -> str:
    return (
        "INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id, project_id, "
        "occurred_at, source, payload, content_hash, received_at) "
        "SELECT 'g-' || g, 'compute.instance.update', 'update', 'region-one', 'instance', 'srv-' || mod(g, "
        f"{resources}), 'p', timestamptz '2026-01-01' + g * interval '1 second', 'collector', "
        f"'{{\"size\": {{\"vcpus\": 1}}}}'::jsonb, md5(g::text), now() FROM generate_series(1, {events}) AS g"
    )


@pytest.mark.slow
def test_the_refold_probes_the_index_even_on_a_log_not_yet_analysed(pg_store) -> None:
    """A bulk-loaded log has no statistics until autovacuum gets to it: the planner then guesses 0.5 %
    of the log per key, and a plain join of 400 keys was planned as a hash join over the whole log."""
    pg_store.run(lambda uow: uow.execute("ALTER TABLE events SET (autovacuum_enabled = false)"))
    pg_store.run(lambda uow: uow.execute(_generated_log(200_000, 20_000)))
    assert pg_store.query("SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables "
                          "WHERE relname = 'events'") == [(None, None)]
    keys = [("region-one", "instance", f"srv-{n}") for n in range(0, 20_000, 50)]

    def plan(uow) -> str:
        PostgresProjectionTables(uow, 0)._keys_table("_refold", keys)
        return "\n".join(r[0] for r in uow.fetchall(f"EXPLAIN {history_sql('_refold')}"))
    text = pg_store.run(plan)
    assert "events_by_resource" in text and "Seq Scan on events" not in text, text

    def read(uow) -> list:
        return list(PostgresProjectionTables(uow, 0).histories(keys))
    rows = pg_store.run(read)
    assert len(rows) == 400 * 10 and {row[2] for row in rows} == {key[2] for key in keys}
