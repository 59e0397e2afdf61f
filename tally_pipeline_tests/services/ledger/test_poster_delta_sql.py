"""The delta computed in SQL (``store.ledger_delta``, Postgres) against the Python rule it restates.

Checkpoints are written directly in any state a ledger can be in (never posted, posted inside the
window or before its boundary, already at the clamp, past it, totals above the usage so the delta
is negative, watermarks old and new) next to random intervals of several meters, and ``late``
values for some entities (some naming another span, which must not apply). One batch is posted by
the store's statement; its postings, advanced checkpoints and report must be what
``core.ledger.plan_delta`` / ``needs_posting`` / ``late_span`` say for the same checkpoints and
totals (read as the Python path reads them).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from datetime import timedelta
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.ledger import (
    CycleWindow,
    EntityKey,
    EntityTotals,
    NonMonotonicCheckpoint,
    late_span,
    needs_posting,
    plan_delta,
)
from tally_pipeline.core.usage import to_micro
from tally_pipeline.store import ledger_checkpoints, ledger_delta
from tally_pipeline.store.ledger_delta import LateRow, lock_and_survey, post_deltas
from tally_pipeline.store.usage_reads import batch_totals
from tally_pipeline.store.usage_sql import compose
from tally_pipeline_tests.ledger_data import HOUR, T0, vm

WINDOW_DAYS = 2
WINDOW = CycleWindow.at(T0, ingest_lag=HOUR, window_days=WINDOW_DAYS)
WATERMARK = 50
PROJECTS = ("p0", "p1", "p2", "p3")
#: Several meters per resource type: an instance is three entities, a volume one.
METERS = {"instance": ("instance_hours", "ram_gb_hours", "vcpu_hours"), "volume": ("volume_gb_hours",)}

# instants around the cycle's own: before its boundary, inside the window, at and past its clamp
instants = st.sampled_from([
    WINDOW.boundary - 30 * HOUR, WINDOW.boundary - HOUR, WINDOW.boundary, WINDOW.boundary + 5 * HOUR,
    WINDOW.clamp - 2 * HOUR, WINDOW.clamp - timedelta(microseconds=1), WINDOW.clamp, WINDOW.clamp + HOUR,
])
checkpoint_states = st.one_of(
    st.just(None),  # first posting: a checkpoint never posted
    st.fixed_dictionaries({
        "total": st.integers(0, 10**12) | st.just(0),
        "clamp": instants,
        "boundary": st.none() | instants,
        "aged_before": st.integers(-(10**9), 10**12),
        "watermark": st.none() | st.sampled_from([0, 10, WATERMARK, WATERMARK + 1]),
    }),
    # posted inside the window with an earlier boundary, events folded since: late usage applies
    st.fixed_dictionaries({
        "total": st.integers(0, 10**12),
        "clamp": st.sampled_from([WINDOW.boundary + 5 * HOUR, WINDOW.clamp - 2 * HOUR]),
        "boundary": st.sampled_from([WINDOW.boundary - 30 * HOUR, WINDOW.boundary - HOUR]),
        "aged_before": st.integers(0, 10**12),
        "watermark": st.sampled_from([0, 10]),
    }),
)
intervals = st.lists(
    st.tuples(
        st.sampled_from(["instance", "volume"]),
        st.sampled_from(PROJECTS),
        st.integers(-90, 30),  # start, hours from the boundary
        st.none() | st.integers(1, 200),  # length in hours (None: open)
        st.integers(0, 64),  # size
        st.booleans(),  # an unusable size
    ),
    max_size=8,
)
ENTITIES = len(PROJECTS) * 4
#: Per entity: no late row, or (micro, whether the row names the entity's own span, else another).
lates = st.lists(st.none() | st.tuples(st.integers(-(10**9), 10**9), st.booleans()),
                 min_size=ENTITIES, max_size=ENTITIES)


def _seed(store: Any, checkpoints: dict[EntityKey, dict[str, Any] | None], rows: list[tuple[Any, ...]]) -> None:
    def work(uow: Any) -> None:
        uow.execute("DELETE FROM ledger_postings")
        uow.execute("DELETE FROM usage_checkpoints")
        uow.execute("DELETE FROM resource_intervals")
        for n, (rtype, project, start, length, size, unusable) in enumerate(rows):
            begun = WINDOW.boundary + start * HOUR
            body = ({"gb": "lots"} if rtype == "volume" else vm(vcpus="many")) if unusable else (
                {"gb": size} if rtype == "volume" else vm(vcpus=size, ram_mb=size * 512))
            uow.execute(
                "INSERT INTO resource_intervals (cloud, resource_type, resource_id, interval_no, lifecycle_no,"
                " project_id, size, start_at, end_at) VALUES ('c1', %s, %s, 1, 1, %s, CAST(%s AS JSON), %s, %s)",
                [rtype, f"r{n}", project, json.dumps(body), begun, None if length is None else begun + length * HOUR],
            )
        for key, state in checkpoints.items():
            if state is None:
                uow.execute("INSERT INTO usage_checkpoints (cloud, project_id, meter) VALUES (%s, %s, %s)", list(key))
                continue
            uow.execute(
                "INSERT INTO usage_checkpoints (cloud, project_id, meter, total, clamp, aged_boundary, aged_before,"
                " watermark) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                [*key, Decimal(state["total"]).scaleb(-6), state["clamp"], state["boundary"],
                 Decimal(state["aged_before"]).scaleb(-6), state["watermark"]],
            )

    store.run(work)


def _expected(store: Any, sql: Any, meters: Any, keys: list[EntityKey], late: list[LateRow]) -> dict[str, Any]:
    """What the Python path makes of the same rows: per entity, its postings and new checkpoint."""
    def read(uow: Any) -> Any:
        return ledger_checkpoints.lock_batch(uow, sql, keys), batch_totals(uow, sql, meters, WINDOW, keys)

    checkpoints, (totals, bad) = store.run(read)
    out: dict[str, Any] = {"postings": {}, "checkpoints": {}, "unchanged": set(), "settled": {}, "bad": set()}
    for key in keys:
        checkpoint = checkpoints[key]
        try:
            if not needs_posting(checkpoint.clamp, WINDOW, key):
                out["settled"][key] = "already"
                continue
        except NonMonotonicCheckpoint:
            out["settled"][key] = "non_monotonic"
            continue
        span = late_span(checkpoint, WINDOW, WATERMARK)
        extra = sum(r.micro for r in late if r.key == key and (r.since, r.start) == span)
        delta = plan_delta(checkpoint, totals.get(key, EntityTotals(0, 0, 0)), WINDOW, key, late=extra,
                           watermark=WATERMARK)
        assert delta is not None
        out["checkpoints"][key] = delta.checkpoint
        for account, amount in delta.amounts():
            out["postings"][(key, account)] = amount
        if not delta.amounts():
            out["unchanged"].add(key)
        if key in bad:
            out["bad"].add(key)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=st.lists(checkpoint_states, min_size=ENTITIES, max_size=ENTITIES),
       rows=intervals, late=lates, left_out=st.sets(st.integers(0, ENTITIES - 1), max_size=3))
def test_the_sql_delta_is_the_python_rule(pg_store, registry, states, rows, late, left_out) -> None:
    listed = sorted(EntityKey("c1", project, meter) for project in PROJECTS for ms in METERS.values() for meter in ms)
    checkpoints = dict(zip(listed, states, strict=True))
    _seed(pg_store, checkpoints, rows)
    # the batch may leave out entities of its key range (filtered out, or opened since the listing)
    keys = [key for n, key in enumerate(listed) if n not in left_out]
    assume(keys)
    sql = pg_store.usage_sql()
    meters = sql.meters(registry.meters())
    late_rows = []
    for key, given_late in zip(listed, late, strict=True):
        if given_late is None:
            continue
        micro, matching = given_late
        state = checkpoints[key] or {}
        since, start = state.get("watermark"), state.get("boundary")
        if not matching or since is None or start is None:  # a span this entity's checkpoint has not:
            # another watermark, at the checkpoint's own boundary where it has one
            since, start = (since or 0) + 1, start or WINDOW.boundary - 3 * HOUR
        late_rows.append(LateRow(key, since, start, micro))

    expected = _expected(pg_store, sql, meters, keys, late_rows)

    def post(uow: Any) -> Any:
        with ExitStack() as stack:
            survey = lock_and_survey(uow, sql, keys, WINDOW, WATERMARK)
            posted = post_deltas(uow, stack, sql, meters, WINDOW, "cycle", keys, WATERMARK, late_rows,
                                 exact=survey.exact)
        return survey, posted

    survey, posted = pg_store.run(post)

    assert survey.exact == (keys == [key for key in listed if keys[0] <= key <= keys[-1]])
    assert {EntityKey(*key) for key, _ in survey.settled} & set(keys) == set(expected["settled"])
    postings = {
        (EntityKey(c, p, m), account): to_micro(amount)
        for c, p, m, account, amount in pg_store.query(
            "SELECT cloud, project_id, meter, account, amount FROM ledger_postings WHERE clamp = %s", [WINDOW.clamp])
    }
    assert postings == expected["postings"]
    advanced = {
        EntityKey(c, p, m): (to_micro(total), clamp, boundary, to_micro(before), watermark)
        for c, p, m, total, clamp, boundary, before, watermark in pg_store.query(
            "SELECT cloud, project_id, meter, total, clamp, aged_boundary, aged_before, watermark"
            " FROM usage_checkpoints WHERE cycle_id = 'cycle'")
    }
    assert advanced == {key: tuple(c) for key, c in expected["checkpoints"].items()}
    assert posted.advanced == len(expected["checkpoints"])
    assert {EntityKey(*key) for key in posted.unchanged} == expected["unchanged"]
    assert {EntityKey(*key) for key, _, _ in posted.bad} == expected["bad"]
    assert posted.postings == len(expected["postings"])
    sums: dict[str, dict[str, int]] = {}
    for (key, account), amount in expected["postings"].items():
        sums.setdefault(account, {})[key.meter] = sums.get(account, {}).get(key.meter, 0) + amount
    assert posted.sums == sums


def test_the_late_spans_are_those_of_the_checkpoints_that_need_late_usage(pg_store) -> None:
    keys = [EntityKey("c1", "p0", meter) for meter in METERS["instance"]]
    inside = WINDOW.boundary + 5 * HOUR
    states: dict[EntityKey, dict[str, Any] | None] = {
        keys[0]: {"total": 5, "clamp": inside, "boundary": WINDOW.boundary - HOUR, "aged_before": 1, "watermark": 10},
        keys[1]: {"total": 5, "clamp": inside, "boundary": WINDOW.boundary - HOUR, "aged_before": 1,
                  "watermark": WATERMARK},  # read at this watermark: nothing folded since
        keys[2]: {"total": 5, "clamp": WINDOW.clamp, "boundary": WINDOW.boundary - HOUR, "aged_before": 1,
                  "watermark": 10},  # already at the clamp
    }
    _seed(pg_store, states, [])
    sql = pg_store.usage_sql()
    survey = pg_store.run(lambda uow: lock_and_survey(uow, sql, keys, WINDOW, WATERMARK))
    assert survey.late_spans == [(10, WINDOW.boundary - HOUR)]
    assert survey.settled == [(tuple(keys[2]), WINDOW.clamp)]
    assert [late_span(c, WINDOW, WATERMARK) for c in (
        _checkpoint(states[keys[0]]), _checkpoint(states[keys[1]]))] == [(10, WINDOW.boundary - HOUR), None]


def _checkpoint(state: dict[str, Any] | None) -> Any:
    from tally_pipeline.core.ledger import Checkpoint

    assert state is not None
    return Checkpoint(state["total"], state["clamp"], state["boundary"], state["aged_before"], state["watermark"])


def test_a_cycle_posts_the_same_ledger_either_way(pg_url, registry) -> None:
    """Whole cycles (opening, steady, a correction that makes deltas negative) by both paths on one
    database, one after the other from the same state: the same postings and checkpoints."""
    from tally_pipeline.services.ledger.poster import post_usage
    from tally_pipeline.store import open_store

    store = open_store(pg_url, migrate=True)
    try:
        _seed(store, {}, [("instance", "p0", -40, None, 4, False), ("instance", "p1", -5, 20, 2, False),
                          ("volume", "p2", 3, None, 100, False), ("volume", "p3", -1, None, 0, True)])

        def state() -> Any:
            return (
                sorted(store.query("SELECT cloud, project_id, meter, account, amount, clamp FROM ledger_postings")),
                sorted(store.query("SELECT cloud, project_id, meter, total, clamp, aged_boundary, aged_before"
                                   " FROM usage_checkpoints")),
            )

        results = {}
        for in_sql in (False, True):
            store.run(lambda uow: (uow.execute("DELETE FROM ledger_postings"), uow.execute("DELETE FROM usage_checkpoints")))
            summaries = []
            for hours, correct in ((0, False), (1, False), (2, True)):
                if correct:  # the running instance's size was lower than recorded: usage drops
                    store.run(lambda uow: uow.execute(
                        "UPDATE resource_intervals SET size = CAST(%s AS JSON) WHERE project_id = 'p0'",
                        [json.dumps(vm(vcpus=1, ram_mb=512))]))
                result = post_usage(store, registry, now=T0 + hours * HOUR, ingest_lag=HOUR, window_days=WINDOW_DAYS,
                                    batch_size=4, deltas_in_sql=in_sql)
                summary = result.to_dict(entities=True)
                for name in ("cycle_id",):
                    summary.pop(name)
                summaries.append(summary)
            results[in_sql] = (summaries, state())
            store.run(lambda uow: uow.execute(
                "UPDATE resource_intervals SET size = CAST(%s AS JSON) WHERE project_id = 'p0'",
                [json.dumps(vm(vcpus=4, ram_mb=2048))]))
        assert results[True] == results[False]
        negative = [row for row in results[True][1][0] if row[4] < 0]
        assert negative, "the correction made no negative posting"
        assert results[True][0][0]["excluded"], "the unusable volume was not reported"
    finally:
        store.close()


def test_the_batch_bound_leaves_the_index_scan_to_the_range(pg_store) -> None:
    """The exact bound filters the batch's range; it is no index condition, so the btree's scan stops
    at the range's end instead of reading every later checkpoint of the cloud."""
    pg_store.run(lambda uow: uow.execute(
        "INSERT INTO usage_checkpoints (cloud, project_id, meter) SELECT 'c1', 'p' || lpad(g::text, 6, '0'), m"
        " FROM generate_series(0, 9999) g, (VALUES ('instance.hours'), ('instance.vcpu_hours')) v(m)"))
    pg_store.run(lambda uow: uow.execute("ANALYZE usage_checkpoints"))
    keys = [EntityKey("c1", f"p{n:06d}", m) for n in range(100, 600) for m in ("instance.hours", "instance.vcpu_hours")]
    sql = pg_store.usage_sql()
    where = compose(ledger_delta.exact_bound(keys), ledger_checkpoints.batch_range(sql, keys, exact=False))
    [(plan,)] = pg_store.query(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM usage_checkpoints c"
                               f" WHERE TRUE {where.sql}", where.params)
    plan = plan if isinstance(plan, list) else json.loads(plan)
    nodes, scans = [plan[0]["Plan"]], []
    while nodes:
        node = nodes.pop()
        nodes += node.get("Plans", [])
        if "Index Cond" in node:
            scans.append(node)
    assert scans and all("ROW(" not in scan["Index Cond"] for scan in scans)
    assert sum(scan["Actual Rows"] for scan in scans) == len(keys)
    # 1,000 of 20,000 keys, near the start: a few leaf pages, not the rest of the index (about 100)
    assert max(scan["Shared Hit Blocks"] + scan.get("Shared Read Blocks", 0) for scan in scans) < 30
