"""The poster's invariants, on both backends: postings sum to usage through the checkpoint, re-runs
post nothing, old usage lands in aged_out, checkpoints never move backwards, bad entities are skipped."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.ledger.verify import verify
from tally_pipeline_tests.ledger_data import (
    DAY,
    HOUR,
    T0,
    Row,
    checkpoints,
    insert,
    model_usage,
    posted_total,
    posting_count,
    postings,
    replace_row,
    vm,
)

LAG = timedelta(minutes=15)
WINDOW = 35


def cycle(store, registry, now, **kwargs):
    return post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW, **kwargs)


def assert_ledger_matches_usage(store, registry, rows) -> None:
    """Invariant (1): for every entity, postings (both accounts) = usage through its checkpoint's clamp."""
    cps = checkpoints(store)
    totals = posted_total(store)
    for key, (total, clamp) in cps.items():
        if clamp is None:
            assert totals.get(key, 0) == 0 == total
            continue
        expected = model_usage(registry, rows, clamp).get(key, 0)
        assert totals.get(key, 0) == total == expected, key
    assert verify(store, registry).ok


def fleet() -> list[Row]:
    return [
        Row("p1", "vm-1", T0 - 2 * DAY, None, vm(vcpus=2, ram_mb=2048)),
        Row("p1", "vm-2", T0 - 3 * HOUR, T0 - HOUR, vm(vcpus=8, ram_mb=16384)),
        Row("p2", "vol-1", T0 - DAY, None, {"gb": 100, "volume_type": None}, resource_type="volume"),
        Row("p3", "img-1", T0 - DAY, None, {"bytes": 3 * 2**30}, resource_type="image"),
        Row("p3", "fip-1", T0 - DAY, None, {}, resource_type="floating_ip"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 2, 5000])
def test_after_a_cycle_postings_sum_to_usage_through_the_checkpoint(store, registry, batch_size) -> None:
    rows = fleet()
    insert(store, *rows)
    result = cycle(store, registry, T0, batch_size=batch_size)
    clamp = T0 - LAG
    assert result.clamp == clamp
    assert_ledger_matches_usage(store, registry, rows)
    # spot-check against hand arithmetic: vm-1 ran 47h45m with 2 vCPUs, vm-2 2h with 8
    assert posted_total(store)[EntityKey("c1", "p1", "vcpu_hours")] == 2 * 47_750_000 + 8 * 2_000_000
    assert posted_total(store)[EntityKey("c1", "p2", "volume_gb_hours")] == 100 * 23_750_000
    assert len(result.posted) == 6 and result.skipped == [] and result.entities == 6
    assert result.total("usage", "vcpu_hours") == Decimal("111.5") and result.total("aged_out") == 0
    # the next cycle posts only the increase: an hour more for what still runs
    cycle(store, registry, T0 + HOUR, batch_size=batch_size)
    assert_ledger_matches_usage(store, registry, rows)
    assert postings(store)[(EntityKey("c1", "p1", "instance_hours"), "usage")] == 50_750_000


def test_a_rerun_posts_nothing(store, registry) -> None:
    rows = fleet()
    insert(store, *rows)
    cycle(store, registry, T0)
    count, ledger = posting_count(store), postings(store)
    # even with history changed meanwhile, the same clamp posts nothing: the next clamp will
    insert(store, Row("p1", "vm-3", T0 - 5 * HOUR, None, vm()))
    again = cycle(store, registry, T0)
    assert posting_count(store) == count and postings(store) == ledger
    assert again.posted == [] and again.postings == 0 and again.already_posted == 6
    later = cycle(store, registry, T0 + HOUR)
    assert EntityKey("c1", "p1", "vcpu_hours") in later.posted
    assert_ledger_matches_usage(store, registry, [*rows, Row("p1", "vm-3", T0 - 5 * HOUR, None, vm())])


def test_usage_dated_before_the_window_lands_in_aged_out(store, registry) -> None:
    window_start = T0 - WINDOW * DAY
    old = Row("p1", "vm-old", window_start - 10 * HOUR, window_start + 2 * HOUR, vm(vcpus=1))
    insert(store, old)
    first = cycle(store, registry, T0)
    hours = EntityKey("c1", "p1", "instance_hours")
    assert postings(store)[(hours, "aged_out")] == 10_000_000
    assert postings(store)[(hours, "usage")] == 2_000_000
    assert first.total("aged_out", "instance_hours") == 10

    # a far-late straggler: a server that lived 3 hours, 50 days ago, is reported only now
    straggler = Row("p1", "vm-ghost", T0 - 50 * DAY, T0 - 50 * DAY + 3 * HOUR, vm(vcpus=4))
    insert(store, straggler)
    second = cycle(store, registry, T0 + HOUR)
    assert postings(store)[(hours, "aged_out")] == 13_000_000  # never dropped
    assert postings(store)[(hours, "usage")] == 2_000_000  # the old server ended long ago: no new usage
    assert second.total("aged_out", "vcpu_hours") == 12
    assert_ledger_matches_usage(store, registry, [old, straggler])


def test_a_checkpoint_never_moves_backwards(store, registry) -> None:
    rows = fleet()
    insert(store, *rows)
    cycle(store, registry, T0)
    before, count = checkpoints(store), posting_count(store)
    earlier = cycle(store, registry, T0 - timedelta(seconds=1))
    assert earlier.posted == [] and len(earlier.skipped) == 6
    assert all(s.code == "non_monotonic" and "never moves backwards" in s.reason for s in earlier.skipped)
    assert checkpoints(store) == before and posting_count(store) == count


def test_an_entity_ahead_of_the_clamp_is_skipped_and_every_other_entity_posts(store, registry) -> None:
    rows = fleet()
    insert(store, *rows)
    cycle(store, registry, T0, entities=[EntityKey("c1", "p2", "volume_gb_hours")])
    # vol-1's entity is posted through T0's clamp; a cycle an hour earlier must still post the rest
    result = cycle(store, registry, T0 - HOUR)
    assert [(s.project_id, s.meter, s.code) for s in result.skipped] == [("p2", "volume_gb_hours", "non_monotonic")]
    assert len(result.posted) == 5
    assert checkpoints(store)[EntityKey("c1", "p1", "instance_hours")][1] == T0 - HOUR - LAG
    assert checkpoints(store)[EntityKey("c1", "p2", "volume_gb_hours")][1] == T0 - LAG


def test_a_correction_dated_earlier_posts_a_credit(store, registry) -> None:
    rows = fleet()
    insert(store, *rows)
    cycle(store, registry, T0)
    # reconciliation learns vm-1 was really deleted 10 hours before the clamp it was billed to
    closed = replace_row(store, rows[0], end=T0 - LAG - 10 * HOUR)
    result = cycle(store, registry, T0 + HOUR)
    hours = EntityKey("c1", "p1", "instance_hours")
    assert result.total("usage", "instance_hours") == -10
    assert hours in result.posted
    amounts = store.query(
        "SELECT amount FROM ledger_postings WHERE project_id = 'p1' AND meter = 'instance_hours' ORDER BY clamp"
    )
    assert [str(a) for (a,) in amounts] == ["49.750000", "-10.000000"]
    assert_ledger_matches_usage(store, registry, [closed, *rows[1:]])


def test_an_entity_whose_history_vanished_is_credited_to_zero(store, registry) -> None:
    rows = fleet()
    insert(store, *rows)
    cycle(store, registry, T0)
    store.run(lambda uow: uow.execute("DELETE FROM resource_intervals WHERE project_id = 'p2'"))
    cycle(store, registry, T0 + HOUR)
    assert posted_total(store)[EntityKey("c1", "p2", "volume_gb_hours")] == 0
    assert_ledger_matches_usage(store, registry, [r for r in rows if r.project_id != "p2"])


def test_an_unusable_interval_is_excluded_and_the_rest_of_its_entity_is_billed(store, registry) -> None:
    good = Row("p9", "vm-good", T0 - DAY, None, vm(vcpus=4))
    rows = [*fleet(), good, Row("p9", "vm-bad", T0 - DAY, None, vm(vcpus="two"), interval_no=1)]
    insert(store, *rows)
    result = cycle(store, registry, T0, batch_size=2)
    bad = EntityKey("c1", "p9", "vcpu_hours")
    assert result.skipped == []
    assert [(s.project_id, s.meter, s.code, s.excluded) for s in result.excluded] == [("p9", "vcpu_hours", "bad_size", 1)]
    assert result.excluded[0].reason.startswith("bad_size: instance/vm-bad: vcpus")
    # the entity is billed for vm-good: 4 vCPUs over the day up to the clamp
    assert posted_total(store)[bad] == model_usage(registry, [good], T0 - LAG)[bad] == 4 * 23_750_000
    assert bad in result.posted and len(result.posted) == 9
    # the exclusion stays visible: verify fails, naming the entity and why
    report = verify(store, registry)
    assert {(d.project_id, d.meter, d.kind) for d in report.discrepancies} == {
        ("p9", "vcpu_hours", "unreadable_usage"), ("p9", "vcpu_hours", "skipped")}
    assert not report.audit().passed and not report.audit().blocking
    # once the size is corrected, the next cycle posts the difference and verify is clean again
    fixed = replace_row(store, rows[-1], size=vm(vcpus=2))
    later = cycle(store, registry, T0 + HOUR)
    assert later.clean
    assert_ledger_matches_usage(store, registry, [*rows[:-1], fixed])


def test_a_meter_no_longer_registered_is_skipped_not_credited(store, registry) -> None:
    insert(store, *fleet())
    cycle(store, registry, T0)
    store.run(
        lambda uow: uow.execute(
            "INSERT INTO usage_checkpoints (cloud, project_id, meter, total, clamp) VALUES ('c1', 'p1', 'gpu_hours', 5, %s)",
            [T0 - LAG],
        )
    )
    result = cycle(store, registry, T0 + HOUR)
    assert [(s.meter, s.reason.split(":")[0]) for s in result.skipped] == [("gpu_hours", "unknown_meter")]


def test_the_result_is_json_able(store, registry) -> None:
    import json

    insert(store, *fleet())
    result = cycle(store, registry, T0)
    out = json.loads(json.dumps(result.to_dict(entities=True)))
    assert out["posted"] == 6 and len(out["posted_entities"]) == 6
    assert out["clamp"] == "2026-02-28T23:45:00Z"
    assert out["totals"]["usage"]["instance_hours"] == "49.750000"  # vm-1 47.75 h + vm-2 2 h
    assert out["totals"]["usage"]["image_gb_hours"] == "71.250000"  # 3 GiB × 23.75 h


def test_an_entity_advanced_past_the_clamp_meanwhile_is_skipped_as_non_monotonic(store, registry) -> None:
    rows = fleet()
    insert(store, *rows)
    later = T0 + HOUR

    def newer_cycle_runs_meanwhile(stage, info):
        # after this (older) cycle listed its entities, a newer cycle posts them all
        if stage == "listed":
            cycle(store, registry, later)

    result = cycle(store, registry, T0, on_stage=newer_cycle_runs_meanwhile)
    assert result.posted == [] and len(result.skipped) == 6
    assert all(s.reason.startswith("non_monotonic:") for s in result.skipped)
    assert {clamp for _, clamp in checkpoints(store).values()} == {later - LAG}
    # the ledger is consistent; the skips of the cycle that finished last stay visible
    report = verify(store, registry)
    assert {d.kind for d in report.discrepancies} == {"skipped"} and len(report.discrepancies) == 6
    assert verify(store, registry, include_history=False).ok
    cycle(store, registry, later + HOUR)
    assert_ledger_matches_usage(store, registry, rows)


def test_a_poster_paused_past_the_window_splits_at_this_cycles_own_window_start(store, registry) -> None:
    """window_days = 1 and a pause of 3 days: everything dated before now − 1 day is aged out, however
    long ago the last cycle's boundary was (today it was split at that boundary: all of it "usage")."""
    vm_1 = Row("p1", "vm-1", T0 - 3 * DAY, None, vm(vcpus=1))
    insert(store, vm_1)
    post_usage(store, registry, now=T0, ingest_lag=LAG, window_days=1)
    hours = EntityKey("c1", "p1", "instance_hours")
    assert postings(store)[(hours, "aged_out")] == 48_000_000  # [T0 − 3 d, T0 − 1 d)
    # while the poster is paused, a straggler dated inside the old window arrives: 2 h, 12 h before T0
    straggler = Row("p1", "vm-late", T0 - 12 * HOUR, T0 - 10 * HOUR, vm(vcpus=1))
    insert(store, straggler)
    later = T0 + 3 * DAY
    result = post_usage(store, registry, now=later, ingest_lag=LAG, window_days=1)
    # dated before later − 1 day: vm-1 from the old clamp (T0 − 15 min) to T0 + 2 d, and the straggler
    assert result.total("aged_out", "instance_hours") == Decimal("48.25") + 2
    assert result.total("usage", "instance_hours") == Decimal("23.75")  # [T0 + 2 d, later − 15 min)
    assert_ledger_matches_usage(store, registry, [vm_1, straggler])


def test_postgres_starts_posting_from_the_first_chunk_of_the_listing(pg_store, pg_url, registry) -> None:
    """On Postgres the listing streams: when the cycle has its first batch's keys, the rest are still on
    the server (a cursor open in a transaction of its own), and every entity is posted all the same."""
    import psycopg

    from tally_pipeline_tests.faults import cursor_sessions

    rows = fleet()
    insert(pg_store, *rows)
    cycle(pg_store, registry, T0)  # opens the six checkpoints: the next cycle lists all six
    seen = []

    def at_listed(stage, info):
        if stage != "listed":
            return
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            seen.append((info["entities"], [(state, query.split()[0])
                                            for state, query in cursor_sessions(watcher, "tally_query_chunks")]))

    result = cycle(pg_store, registry, T0 + HOUR, batch_size=2, workers=2, on_stage=at_listed)
    assert seen == [(2, [("idle in transaction", "FETCH")])]
    assert len(result.posted) == 6 and result.entities == 6 and result.skipped == []
    assert_ledger_matches_usage(pg_store, registry, rows)
