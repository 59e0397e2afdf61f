"""Projection tables on both backends: equal to the Python fold, incremental == rebuild, late events absorbed."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.fold import FoldEvent, fold
from tally_pipeline.services import projection, queries
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline.store.duckdb.projection import RESOURCE_KEY
from tally_pipeline.store.migrations import MIGRATIONS_TABLE, migrations_for
from tally_pipeline.store.projection_tables import INTERVAL_COLUMNS, STATE_COLUMNS

T0 = datetime(2026, 3, 1, tzinfo=UTC)
EVENT_TYPES = {
    "create": "volume.create.end",
    "update": "volume.resize.end",
    "delete": "volume.delete.end",
    "note": "volume.create.start",
}


def envelope(event_id: str, resource_id: str, verb: str, when: datetime, project: str | None, gb: int | None,
             cloud: str = "c1", status: str | None = None) -> dict:
    item = {
        "event_id": event_id,
        "event_type": EVENT_TYPES[verb],
        "cloud": cloud,
        "resource_type": "volume",
        "resource_id": resource_id,
        "occurred_at": when.isoformat(),
        "payload": {"size": {"gb": gb}} if gb is not None else {},
    }
    if status is not None:
        item["payload"]["status"] = status
    if project is not None:
        item["project_id"] = project
    return item


def random_history(rng: random.Random, prefix: str, resources: int, events: int) -> list[dict]:
    out = []
    for i in range(events):
        r = rng.randrange(resources)
        verb = rng.choice(["create", "create", "update", "update", "update", "delete", "note"])
        when = T0 + timedelta(minutes=rng.randrange(0, 600, 5))
        project = rng.choice(["p1", "p2"]) if verb == "create" else rng.choice(["p1", "p2", None]) if verb == "update" else None
        gb = rng.choice([10, 20, 30]) if verb in ("create", "update") else None
        # None and "" give no status (an update keeps the current one, a create starts with none)
        status = rng.choice([None, None, "", "active", "shutoff", "shelved_offloaded"])
        out.append(envelope(f"{prefix}-{i}", f"{prefix}-vol-{r}", verb, when, project, gb, status=status))
    return out


def table_rows(store) -> tuple[list, list]:
    """Both projection tables, ordered, with JSON normalised to sorted text (byte-comparable)."""
    def norm(value):
        if isinstance(value, str) and value.startswith("{"):
            value = json.loads(value)
        if isinstance(value, dict):
            return json.dumps(value, sort_keys=True)
        return value

    state = store.query(f"SELECT {', '.join(STATE_COLUMNS)} FROM current_resources ORDER BY cloud, resource_type, resource_id")
    intervals = store.query(f"SELECT {', '.join(INTERVAL_COLUMNS)} FROM resource_intervals "
                            "ORDER BY cloud, resource_type, resource_id, interval_no")
    check_duckdb_lookup_tables(store)
    return [tuple(map(norm, r)) for r in state], [tuple(map(norm, r)) for r in intervals]


def check_duckdb_lookup_tables(store) -> None:
    """On DuckDB: every projection row carries its resource's key, and ``folded_events`` is the folded log."""
    if store.dialect != "duckdb":
        return
    for table in ("current_resources", "resource_intervals", "folded_events"):
        wrong = store.query(f"SELECT count(*) FROM {table} WHERE resource_key IS DISTINCT FROM {RESOURCE_KEY}")
        assert wrong == [(0,)], table
    copied = store.query("SELECT cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, "
                         "size::VARCHAR, seq, status FROM folded_events ORDER BY seq")
    logged = store.query("SELECT cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, "
                         "json_extract(payload, '$.size')::VARCHAR, seq, "
                         "nullif(json_extract_string(payload, '$.status'), '') FROM events "
                         "WHERE seq <= (SELECT watermark FROM projection_state) ORDER BY seq")
    assert copied == logged


def python_fold_of(store) -> tuple[list, list]:
    """The same two tables computed by core.fold from the stored events."""
    rows = store.query("SELECT cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, payload, seq FROM events")
    by_key: dict = {}
    for cloud, rtype, rid, eid, verb, when, project, payload, seq in rows:
        payload = json.loads(payload) if isinstance(payload, str) else payload
        by_key.setdefault((cloud, rtype, rid), []).append(
            FoldEvent(eid, verb, when, project, payload.get("size"), seq, payload.get("status") or None))
    states, intervals = [], []
    for key in sorted(by_key):
        result = fold(by_key[key])
        s = result.state
        size = json.dumps(s.size, sort_keys=True) if s.size is not None else None
        states.append((*key, s.status, s.project_id, size, s.created_at, s.deleted_at, s.last_event_at, s.last_seq,
                       s.event_count, s.platform_status))
        for n, iv in enumerate(result.intervals):
            intervals.append((*key, n, iv.lifecycle_no, iv.project_id, json.dumps(iv.size, sort_keys=True), iv.start,
                              iv.end, iv.platform_status))
    return states, intervals


def test_projection_equals_the_python_fold(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    list(ingestor.ingest_stream(random_history(random.Random(7), "h", 40, 600), origin="t"))
    projection.refresh(store)
    assert table_rows(store) == python_fold_of(store)
    projection.rebuild(store)
    assert table_rows(store) == python_fold_of(store)


def test_a_rebuild_repairs_tables_that_went_wrong_and_keeps_what_is_right(store, registry) -> None:
    """A rebuild compares its re-fold with the stored tables (Postgres writes only the differences):
    rows edited, lost or invented by hand all come back as the fold says, and the rest stays."""
    list(Ingestor(store, registry).ingest_stream(random_history(random.Random(17), "r", 30, 400), origin="t"))
    projection.refresh(store)
    expected = python_fold_of(store)
    assert table_rows(store) == expected
    keys = store.query("SELECT cloud, resource_type, resource_id FROM current_resources ORDER BY 3")

    def damage(uow) -> None:
        (c0, t0, r0), (_, _, r1), (_, _, r2), (_, _, r3) = keys[:4]
        uow.execute("UPDATE resource_intervals SET size = %s WHERE resource_id = %s AND interval_no = 0",
                    ['{"gb": 999}', r0])
        uow.execute("UPDATE resource_intervals SET project_id = 'px' WHERE resource_id = %s", [r3])
        uow.execute("UPDATE current_resources SET size = %s WHERE resource_id = %s", ['{"gb": 998}', r3])
        uow.execute("DELETE FROM resource_intervals WHERE resource_id = %s", [r1])
        uow.execute("UPDATE current_resources SET status = 'unborn', event_count = 0, size = NULL "
                    "WHERE resource_id = %s", [r2])
        uow.execute("DELETE FROM current_resources WHERE resource_id = %s", [r1])
        uow.execute("UPDATE resource_intervals SET end_at = NULL WHERE resource_id = %s", [r2])
        uow.execute("INSERT INTO resource_intervals (cloud, resource_type, resource_id, interval_no, lifecycle_no, "
                    "project_id, size, start_at, end_at) VALUES (%s, %s, %s, 99, 0, 'p9', %s, %s, NULL)",
                    [c0, t0, r0, '{"gb": 1}', T0])
        uow.execute("INSERT INTO current_resources (cloud, resource_type, resource_id, status, last_event_at, "
                    "last_seq, event_count) VALUES ('c1', 'volume', 'never-seen', 'live', %s, 1, 1)", [T0])
    store.run(damage)
    if store.dialect == "duckdb":  # its rows carry their resource's key; the invented ones need one too
        store.run(lambda uow: uow.execute(f"UPDATE current_resources SET resource_key = {RESOURCE_KEY} "
                                          "WHERE resource_key IS NULL"))
        store.run(lambda uow: uow.execute(f"UPDATE resource_intervals SET resource_key = {RESOURCE_KEY} "
                                          "WHERE resource_key IS NULL"))
    assert table_rows(store) != expected
    untouched = keys[5][2]

    def versions() -> list:  # Postgres: the transaction that wrote each row of an undamaged resource
        if store.dialect != "postgres":
            return []
        return [store.query(f"SELECT xmin::text FROM {t} WHERE resource_id = %s ORDER BY 1", [untouched])
                for t in ("current_resources", "resource_intervals")]
    before = versions()
    projection.rebuild(store)
    assert table_rows(store) == expected
    assert versions() == before  # the rows that were right were not written again


def test_a_rebuild_rewrites_tables_where_most_rows_went_wrong(store, registry) -> None:
    """Most stored rows differing from the fold (Postgres then empties the table and writes it afresh)."""
    list(Ingestor(store, registry).ingest_stream(random_history(random.Random(23), "m", 20, 300), origin="t"))
    projection.refresh(store)
    expected = python_fold_of(store)
    store.run(lambda uow: uow.execute("UPDATE resource_intervals SET lifecycle_no = lifecycle_no + 7"))
    store.run(lambda uow: uow.execute("UPDATE current_resources SET event_count = event_count + 1 "
                                      "WHERE resource_id NOT LIKE '%%-1'"))
    assert table_rows(store) != expected
    projection.rebuild(store)
    assert table_rows(store) == expected


def test_a_rebuild_into_empty_tables_builds_them_with_every_index_they_had(pg_store, registry) -> None:
    """Postgres fills an empty (or emptied) table before building its indexes: afterwards it has the
    same indexes and constraints as before, an analyst's own included, and they hold."""
    store = pg_store
    list(Ingestor(store, registry).ingest_stream(random_history(random.Random(29), "e", 20, 300), origin="t"))
    store.run(lambda uow: uow.execute("CREATE INDEX analyst_by_start ON resource_intervals (start_at DESC)"))
    catalogue = ("SELECT c.relname, i.relname, pg_get_indexdef(x.indexrelid), "
                 "coalesce((SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k WHERE k.conindid = x.indexrelid), '') "
                 "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid "
                 "WHERE c.relname IN ('current_resources', 'resource_intervals') ORDER BY 1, 2")
    before = store.query(catalogue)
    assert len(before) == 5 and any(row[1] == "analyst_by_start" for row in before)
    projection.refresh(store)
    expected = python_fold_of(store)
    for first_build in (True, False):  # into emptied tables, then over tables whose every row is wrong
        if first_build:
            store.run(lambda uow: (uow.execute("TRUNCATE resource_intervals"), uow.execute("TRUNCATE current_resources")))
        else:
            store.run(lambda uow: uow.execute("UPDATE resource_intervals SET lifecycle_no = lifecycle_no + 7"))
        projection.rebuild(store)
        assert table_rows(store) == expected
        assert store.query(catalogue) == before
    with pytest.raises(Exception, match="resource_intervals_pkey"):
        store.run(lambda uow: uow.execute("INSERT INTO resource_intervals SELECT * FROM resource_intervals LIMIT 1"))


@pytest.mark.slow
def test_large_refresh_folds_in_sql_and_equals_small_refreshes(tmp_path, store_url, registry, monkeypatch) -> None:
    """Bulk refreshes fold in SQL and small ones in Python, on each backend; both give the same tables."""
    history = random_history(random.Random(3), "s", 50, 700)
    tables = []
    for limit in (0, 10**9):  # 0: every refresh takes the SQL path; huge: every refresh folds in Python
        monkeypatch.setattr(projection, "PYTHON_FOLD_MAX", limit)
        url = f"duckdb://{tmp_path / f'l{limit}.duckdb'}" if store_url.startswith("duckdb") else store_url
        store = open_store(url, migrate=True)
        try:
            ingestor = Ingestor(store, registry)
            prefix = f"s{limit}"
            for start in range(0, len(history), 100):
                batch = [dict(item, event_id=f"{prefix}-{item['event_id']}") for item in history[start:start + 100]]
                ingestor.ingest(batch, origin="t")
                projection.refresh(store)
            tables.append(table_rows(store))
            if not store_url.startswith("duckdb"):  # one Postgres database: start the next pass empty
                store.run(lambda uow: uow.execute("TRUNCATE events, current_resources, resource_intervals"))
                store.run(lambda uow: uow.execute("UPDATE projection_state SET watermark = 0"))
        finally:
            store.close()
    strip_seq = lambda rows: [r[:9] + r[10:] for r in rows]  # noqa: E731 - seq differs between the passes
    assert strip_seq(tables[0][0]) == strip_seq(tables[1][0])
    assert tables[0][1] == tables[1][1]


@pytest.mark.parametrize("touched", [6, 70])
def test_a_bulk_refresh_of_few_or_most_resources_equals_the_python_fold(store, registry, monkeypatch,
                                                                        touched) -> None:
    """A bulk refresh folds in SQL either the touched resources' histories (a few of those stored)
    or everything, writing only what differs (most of them): both give the Python fold's tables."""
    rng = random.Random(touched)
    ingestor = Ingestor(store, registry)
    list(ingestor.ingest_stream(random_history(rng, "b", 80, 800), origin="t"))
    projection.refresh(store)
    monkeypatch.setattr(projection, "PYTHON_FOLD_MAX", 0)  # every refresh below is a bulk one
    late = [item for item in random_history(rng, "late", 80, 600) if int(item["resource_id"].split("-")[-1]) < touched]
    ingestor.ingest([dict(item, resource_id=item["resource_id"].replace("late", "b")) for item in late], origin="t")
    refreshed = projection.refresh(store)
    assert refreshed.resources == len({item["resource_id"] for item in late})
    assert table_rows(store) == python_fold_of(store)


def test_later_events_resume_the_stored_fold_and_only_late_ones_refold_history(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    hours = lambda n: T0 + timedelta(hours=n)  # noqa: E731
    ingestor.ingest([envelope("a-1", "a", "create", hours(0), "p1", 10),
                     envelope("b-1", "b", "create", hours(0), "p1", 10),
                     envelope("b-2", "b", "delete", hours(1), None, None),
                     envelope("z-1", "z", "create", hours(0), "p1", 10),
                     envelope("z-2", "z", "delete", hours(0), None, None),
                     envelope("u-1", "u", "update", hours(0), "p1", 10)], origin="t")
    first = projection.refresh(store)
    assert (first.resources, first.resumed, first.refolded) == (4, 0, 0)  # all new: folded from pending events
    # Later than everything each has seen: folded onto the stored state (a: live, b: deleted, u: unborn).
    ingestor.ingest([envelope("a-2", "a", "update", hours(2), None, 20),
                     envelope("b-3", "b", "create", hours(3), "p2", 30),
                     envelope("u-2", "u", "create", hours(2), "p2", 10)], origin="t")
    later = projection.refresh(store)
    assert (later.resources, later.resumed, later.refolded) == (3, 3, 0)
    # Late (older than the latest folded), at the same instant as the latest, and a deleted resource
    # whose last lifecycle kept no interval: their histories are re-folded.
    ingestor.ingest([envelope("a-0", "a", "update", hours(1), None, 30),
                     envelope("u-3", "u", "note", hours(2), None, None),
                     envelope("z-3", "z", "create", hours(5), "p1", 10)], origin="t")
    late = projection.refresh(store)
    assert (late.resources, late.resumed, late.refolded) == (3, 0, 3)
    assert table_rows(store) == python_fold_of(store)
    assert [(i["start"], i["end"], i["size"]) for i in queries.lifecycle(store, "c1", "volume", "a")] == [
        (hours(0), hours(1), {"gb": 10}), (hours(1), hours(2), {"gb": 30}), (hours(2), None, {"gb": 20})]
    assert [(i["lifecycle"], i["start"]) for i in queries.lifecycle(store, "c1", "volume", "b")] == [
        (0, hours(0)), (1, hours(3))]
    assert [(i["lifecycle"], i["start"]) for i in queries.lifecycle(store, "c1", "volume", "z")] == [(1, hours(5))]


@pytest.mark.slow
def test_incremental_refresh_equals_rebuild_after_late_batches(store, registry) -> None:
    rng = random.Random(11)
    ingestor = Ingestor(store, registry)
    history = random_history(rng, "late", 60, 900)
    rng.shuffle(history)  # arrival order has nothing to do with occurred_at
    for start in range(0, len(history), 75):
        ingestor.ingest(history[start:start + 75], origin="t")
        result = projection.refresh(store)
        assert result.resources > 0
    incremental = table_rows(store)
    assert projection.refresh(store).resources == 0  # nothing pending
    projection.rebuild(store)
    assert table_rows(store) == incremental
    assert incremental == python_fold_of(store)


def test_only_touched_resources_are_refolded(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    ingestor.ingest([envelope(f"t-{i}", f"t-vol-{i}", "create", T0, "p1", 10) for i in range(30)], origin="t")
    assert projection.refresh(store).resources == 30
    ingestor.ingest([envelope("t-late", "t-vol-3", "delete", T0 + timedelta(hours=1), None, None),
                     envelope("t-late2", "t-vol-7", "note", T0, None, None)], origin="t")
    assert projection.refresh(store).resources == 2


def test_a_real_delete_arriving_after_a_sync_delete_ends_the_lifecycle_at_the_real_time(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    ingestor.ingest([envelope("r-1", "r-vol", "create", T0, "p1", 10)], origin="t")
    poll_time = T0 + timedelta(hours=5)
    sync_delete = dict(envelope("r-sync", "r-vol", "delete", poll_time, None, None), event_type="sync.delete",
                       source="reconciliation")
    ingestor.ingest([sync_delete], origin="sync:c1", sources=("reconciliation",))
    assert queries.lifecycle(store, "c1", "volume", "r-vol")[0]["end"] == poll_time
    real = T0 + timedelta(hours=2)
    ingestor.ingest([envelope("r-real", "r-vol", "delete", real, None, None)], origin="t")
    intervals = queries.lifecycle(store, "c1", "volume", "r-vol")
    assert [(i["start"], i["end"]) for i in intervals] == [(T0, real)]
    assert queries.resource_state(store, "c1", "volume", "r-vol")["deleted_at"] == real


def test_queries_read_their_writes(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    ingestor.ingest([envelope("w-1", "w-vol", "create", T0, "p1", 10)], origin="t")
    # no explicit refresh: the query folds what is pending before answering
    page = queries.inventory(store, cloud="c1")
    assert [r["resource_id"] for r in page.resources] == ["w-vol"]
    ingestor.ingest([envelope("w-2", "w-vol", "delete", T0 + timedelta(hours=1), None, None)], origin="t")
    assert queries.inventory(store, cloud="c1").resources == []
    as_of = queries.inventory(store, cloud="c1", as_of=T0 + timedelta(minutes=30)).resources
    assert [(r["resource_id"], r["size"], r["created_at"]) for r in as_of] == [("w-vol", {"gb": 10}, T0)]


def test_history_in_fold_order(store, registry) -> None:
    ingestor = Ingestor(store, registry)
    items = [envelope("o-3", "o-vol", "delete", T0, None, None), envelope("o-2", "o-vol", "update", T0, None, 20),
             envelope("o-1", "o-vol", "create", T0, "p1", 10), envelope("o-0", "o-vol", "note", T0, None, None)]
    ingestor.ingest(items, origin="t")
    history = queries.history(store, "c1", "volume", "o-vol")
    assert [(e["event_id"], e["verb"]) for e in history] == [("o-1", "create"), ("o-2", "update"), ("o-0", "note"), ("o-3", "delete")]
    assert all(e["received_at"] is not None for e in history)
    assert queries.history(store, "c1", "volume", "nope") is None
    assert queries.lifecycle(store, "c1", "volume", "nope") is None


def test_both_backends_project_the_same_tables(tmp_path, pg_url, registry) -> None:
    history = random_history(random.Random(5), "x", 30, 400)
    results = []
    for url in (f"duckdb://{tmp_path / 'a.duckdb'}", pg_url):
        store = open_store(url, migrate=True)
        try:
            list(Ingestor(store, registry).ingest_stream(history, origin="t"))
            projection.refresh(store)
            results.append(table_rows(store))
        finally:
            store.close()
    duck, pg = results
    def strip_seq(rows):  # seq values depend on batch order per backend
        return [r[:9] + r[10:] for r in rows]

    assert strip_seq(duck[0]) == strip_seq(pg[0])
    assert duck[1] == pg[1]


@st.composite
def small_histories(draw):
    n = draw(st.integers(min_value=1, max_value=25))
    items = []
    for i in range(n):
        verb = draw(st.sampled_from(["create", "update", "delete", "note"]))
        minute = draw(st.integers(min_value=0, max_value=20))
        project = draw(st.sampled_from(["p1", "p2"])) if verb == "create" else (
            draw(st.sampled_from(["p1", None])) if verb == "update" else None)
        gb = draw(st.sampled_from([1, 2])) if verb in ("create", "update") else None
        rid = draw(st.sampled_from(["a", "b", "c"]))
        status = draw(st.sampled_from([None, "", "active", "shutoff"])) if verb in ("create", "update") else None
        items.append((i, rid, verb, minute, project, gb, status))
    return items


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(small_histories())
def test_duckdb_sql_fold_equals_python_fold(registry, spec) -> None:
    """The SQL fold and core.fold agree on arbitrary histories, ties included."""
    store = open_store("duckdb://:memory:")
    prefix = uuid.uuid4().hex[:6]
    items = [envelope(f"{prefix}-{i:02d}", f"{prefix}-{rid}", verb, T0 + timedelta(minutes=m), project, gb,
                      status=status)
             for i, rid, verb, m, project, gb, status in spec]
    Ingestor(store, registry).ingest(items, origin="t")
    projection.rebuild(store)  # the SQL fold (small refreshes fold in Python)
    assert table_rows(store) == python_fold_of(store)
    store.close()


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(small_histories(), st.randoms(use_true_random=False), st.integers(min_value=1, max_value=6))
def test_incremental_refresh_in_any_batches_equals_the_python_fold_and_the_sql_rebuild(store, registry, spec, rng,
                                                                                         batch) -> None:
    """Every refresh path (new, resumed, re-folded) and the SQL rebuild agree with core.fold, on both backends.

    Events arrive in a random order, a few per refresh, so later events resume stored folds and
    earlier ones re-fold histories. One store serves every example (fresh ids each time).
    """
    prefix = uuid.uuid4().hex[:6]
    items = [envelope(f"{prefix}-{i:02d}", f"{prefix}-{rid}", verb, T0 + timedelta(minutes=m), project, gb,
                      status=status)
             for i, rid, verb, m, project, gb, status in spec]
    rng.shuffle(items)
    ingestor = Ingestor(store, registry)
    for start in range(0, len(items), batch):
        ingestor.ingest(items[start:start + batch], origin="t")
        projection.refresh(store)
    expected = python_fold_of(store)
    assert table_rows(store) == expected
    projection.rebuild(store)
    assert table_rows(store) == expected


def refresh_in_batches(store, registry, items: list[dict], batch: int, *, python_fold_max: int | None = None) -> None:
    """Ingest ``items`` ``batch`` at a time, refreshing after each; with ``python_fold_max`` 0 every
    refresh is a bulk one (folded in SQL)."""
    ingestor = Ingestor(store, registry)
    limit = projection.PYTHON_FOLD_MAX
    projection.PYTHON_FOLD_MAX = limit if python_fold_max is None else python_fold_max
    try:
        for start in range(0, len(items), batch):
            ingestor.ingest(items[start:start + batch], origin="t")
            projection.refresh(store)
    finally:
        projection.PYTHON_FOLD_MAX = limit


_DAMAGE = (
    "DELETE FROM resource_intervals WHERE resource_id = %s AND interval_no = 0",
    "UPDATE resource_intervals SET size = '{\"gb\": 7}' WHERE resource_id = %s",
    "UPDATE resource_intervals SET lifecycle_no = lifecycle_no + 1, end_at = NULL WHERE resource_id = %s",
    "UPDATE current_resources SET status = 'unborn', event_count = event_count + 1 WHERE resource_id = %s",
    "DELETE FROM current_resources WHERE resource_id = %s",
)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(small_histories(), st.randoms(use_true_random=False), st.integers(min_value=1, max_value=6),
       st.lists(st.tuples(st.sampled_from(range(len(_DAMAGE))), st.sampled_from(["a", "b", "c"])), max_size=3))
def test_bulk_refreshes_and_a_rebuild_over_damaged_tables_equal_the_python_fold(store, registry, spec, rng, batch,
                                                                                damage) -> None:
    """Every refresh a bulk one (SQL: the touched histories, or everything written where it
    differs), then some resources' rows damaged and a rebuild: each time core.fold's tables.

    One store serves every example, so the later ones damage a few rows of many (Postgres then
    writes only what differs; while most rows differ it writes the tables afresh)."""
    prefix = uuid.uuid4().hex[:6]
    items = [envelope(f"{prefix}-{i:02d}", f"{prefix}-{rid}", verb, T0 + timedelta(minutes=m), project, gb,
                      status=status)
             for i, rid, verb, m, project, gb, status in spec]
    rng.shuffle(items)
    refresh_in_batches(store, registry, items, batch, python_fold_max=0)
    expected = python_fold_of(store)
    assert table_rows(store) == expected
    for n, rid in damage:
        store.run(lambda uow, n=n, rid=rid: uow.execute(_DAMAGE[n], [f"{prefix}-{rid}"]))
    projection.rebuild(store)
    assert table_rows(store) == expected


# Every resource below shares one of two resource keys (by the parity of its id's length).
SHARED_KEYS_MACRO = "CREATE OR REPLACE MACRO tally_resource_key(cloud, resource_type, resource_id) AS length(resource_id) % 2"


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(small_histories(), st.randoms(use_true_random=False), st.integers(min_value=1, max_value=6), st.booleans())
def test_duckdb_resources_that_share_a_resource_key_are_folded_apart(registry, spec, rng, batch, bulk) -> None:
    """DuckDB finds stored rows by resource key, which resources may share: each is still its own fold.

    Here every resource shares its key with others, on the Python path (resume, re-fold) and the
    SQL one (``bulk``), so every lookup and delete meets rows of other resources.
    """
    store = open_store("duckdb://:memory:")
    store.run(lambda uow: uow.execute(SHARED_KEYS_MACRO))
    prefix = uuid.uuid4().hex[:6]
    items = [envelope(f"{prefix}-{i:02d}", f"{prefix}-{rid * (1 + i % 2)}", verb, T0 + timedelta(minutes=m), project, gb,
                      status=status)
             for i, rid, verb, m, project, gb, status in spec]
    rng.shuffle(items)
    refresh_in_batches(store, registry, items, batch, python_fold_max=0 if bulk else None)
    expected = python_fold_of(store)
    assert table_rows(store) == expected
    projection.rebuild(store)
    assert table_rows(store) == expected
    store.close()


def test_duckdb_folded_events_are_copied_again_above_a_watermark_moved_back(registry) -> None:
    """A migration that moves the watermark back (as 0007 did) leaves nothing copied twice."""
    store = open_store("duckdb://:memory:")
    ingestor = Ingestor(store, registry)
    ingestor.ingest(random_history(random.Random(9), "w", 10, 80), origin="t")
    projection.refresh(store)
    store.run(lambda uow: uow.execute("UPDATE projection_state SET watermark = 30"))
    ingestor.ingest(random_history(random.Random(10), "v", 10, 40), origin="t")
    assert projection.refresh(store).resources > 0
    assert table_rows(store) == python_fold_of(store)  # and folded_events is the log up to the watermark
    store.close()


def test_duckdb_migration_0012_keys_a_folded_projection(tmp_path, registry) -> None:
    """A database folded before migration 0012 gets its resource keys and folded events, and refreshes on."""
    url = f"duckdb://{tmp_path / 'old.duckdb'}"
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    con.execute("SET TimeZone = 'UTC'")
    con.execute(MIGRATIONS_TABLE)
    for m in migrations_for("duckdb"):
        if m.version < 12:
            con.execute(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
    # Today's ingest also keeps collector_type_activity (0017): made here for the old rows to be written, and
    # dropped before the upgrade, which makes it again from the log.
    con.execute(next(m for m in migrations_for("duckdb") if m.version == 17).sql)
    con.close()
    with open_store(url, migrate=False) as old:
        ingestor = Ingestor(old, registry)
        ingestor.ingest(random_history(random.Random(21), "m", 15, 150), origin="t")
        states, intervals = python_fold_of(old)  # what the release before 0012 had folded
        old_state, old_interval = STATE_COLUMNS[:-1], INTERVAL_COLUMNS[:-1]  # before 0016: no platform_status
        old.run(lambda uow: uow.executemany(
            f"INSERT INTO current_resources ({', '.join(old_state)}) VALUES ({', '.join(['?'] * len(old_state))})",
            [row[:-1] for row in states]))
        old.run(lambda uow: uow.executemany(
            f"INSERT INTO resource_intervals ({', '.join(old_interval)}) "
            f"VALUES ({', '.join(['?'] * len(old_interval))})", [row[:-1] for row in intervals]))
        old.run(lambda uow: uow.execute("UPDATE projection_state SET watermark = (SELECT max(seq) FROM events)"))
        ingestor.ingest(random_history(random.Random(22), "n", 15, 50), origin="t")  # not folded yet
        kept = old.query("SELECT * FROM collector_type_activity ORDER BY ALL")
        assert kept
        old.run(lambda uow: uow.execute("DROP TABLE collector_type_activity"))
    with open_store(url, migrate=True) as store:
        assert store.query("SELECT * FROM collector_type_activity ORDER BY ALL") == kept  # 0017 from the log
        # 0016 empties the projection for a fold with platform status: the refresh copies the whole log
        assert projection.refresh(store).resources > 0
        check_duckdb_lookup_tables(store)
        assert store.query("SELECT count(*) FROM folded_events")[0][0] == 200
        assert table_rows(store) == python_fold_of(store)


def test_duckdb_rebuild_copies_the_log_again_when_the_copy_is_not_it(registry) -> None:
    """A rebuild folds ``folded_events``; rows lost from it behind the projection's back are copied again."""
    store = open_store("duckdb://:memory:")
    Ingestor(store, registry).ingest(random_history(random.Random(12), "r", 10, 80), origin="t")
    projection.refresh(store)
    store.run(lambda uow: uow.execute("DELETE FROM folded_events WHERE seq % 7 = 0"))
    projection.rebuild(store)
    assert table_rows(store) == python_fold_of(store)  # and folded_events is the whole log again
    store.close()


def test_duckdb_folds_in_sql_leave_the_memory_limit_as_they_found_it(registry, monkeypatch) -> None:
    """The SQL fold lowers DuckDB's ``memory_limit`` while it runs; a long-lived store folds many
    times, and every fold must put back the same limit (a value read back as text is rounded
    down, so setting that would shrink the limit a little with each fold)."""
    store = open_store("duckdb://:memory:")
    limit = lambda: store.query("SELECT current_setting('memory_limit')")[0][0]  # noqa: E731
    before = limit()
    ingestor = Ingestor(store, registry)
    monkeypatch.setattr(projection, "PYTHON_FOLD_MAX", 0)  # every refresh below folds in SQL
    for batch in range(4):
        ingestor.ingest(random_history(random.Random(40 + batch), f"m{batch}", 5, 30), origin="t")
        assert projection.refresh(store).resources > 0
        projection.rebuild(store)
    assert limit() == before
    assert table_rows(store) == python_fold_of(store)
    store.close()
