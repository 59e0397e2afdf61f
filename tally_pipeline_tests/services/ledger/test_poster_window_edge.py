"""The aged-out split when the poster pauses for less than the window: usage dated before
``now − window_days`` goes to ``aged_out`` whenever it arrives, also when it falls between the
previous cycle's boundary and this one's.

Everything here goes the production way: events through the ingest core, the projection refreshed,
then the poster. The oracle is independent of the poster's bookkeeping: it remembers the events each
cycle posted from and, folding them again in Python, knows exactly what had been posted before any
instant (``core.fold`` and ``core.usage``, which other tests hold equal to both stores).
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.fold import FoldEvent, fold
from tally_pipeline.core.ledger import CycleWindow, EntityKey
from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline.core.usage import Interval, interval_usage_micro
from tally_pipeline.core.verbs import verb_of
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.ledger.verify import verify
from tally_pipeline_tests.faults import wait_until
from tally_pipeline_tests.ledger_data import postings

T = datetime(2026, 3, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
LAG = HOUR
WINDOW_DAYS = 2
GB_HOURS = "volume_gb_hours"
_ids = itertools.count()


def volume(verb: str, resource_id: str, when: datetime, *, project: str | None = "p1", gb: int | None = None) -> dict:
    types = {"create": "volume.create.end", "update": "volume.resize.end", "delete": "volume.delete.end"}
    item: dict[str, Any] = {
        "event_id": f"e-{next(_ids)}", "event_type": types[verb], "cloud": "c1", "resource_type": "volume",
        "resource_id": resource_id, "occurred_at": when.isoformat(),
        "payload": {"size": {"gb": gb, "volume_type": "ssd"}} if gb is not None else {},
    }
    if project is not None:
        item["project_id"] = project
    return item


def usage_through(registry, items: list[dict], through: datetime) -> dict[EntityKey, int]:
    """Micro-units per entity through ``through``, folded in Python from the events; an entity with an
    interval begun before ``through`` is listed even when its usage is zero (the poster opens it)."""
    by_resource: dict[tuple, list[FoldEvent]] = defaultdict(list)
    for item in items:
        size = item["payload"].get("size")
        by_resource[(item["cloud"], item["resource_type"], item["resource_id"])].append(
            FoldEvent(item["event_id"], verb_of(item["event_type"]), parse_rfc3339(item["occurred_at"]),
                      item.get("project_id"), size))
    meters = [m for m in registry.meters() if m.resource_type == "volume"]
    out: dict[EntityKey, int] = defaultdict(int)
    for (cloud, _, _), events in by_resource.items():
        for iv in fold(events).intervals:
            if iv.start >= through:
                continue
            for meter in meters:
                out[EntityKey(cloud, iv.project_id, meter.name)] += interval_usage_micro(
                    meter, Interval(iv.start, iv.end, iv.size), through)
    return out


def ingest_and_post(store, registry, items: list[dict], now: datetime):
    if items:
        outcome = Ingestor(store, registry).ingest(items, origin="test")
        assert outcome.stored == len(items), outcome
    projection.refresh(store)
    return post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS, batch_size=2)


def test_a_straggler_between_the_last_and_this_window_start_is_aged_out(quick_store, registry) -> None:
    """A one-day pause, shorter than the two-day window. Meanwhile a volume that lived across the
    new window start arrives, and a late delete ends a billed volume inside the band between the two
    window starts. The part of each change dated before ``now − 2 days`` is ``aged_out``."""
    store = quick_store
    vol_a = volume("create", "vol-a", T - 120 * HOUR, gb=2)
    first = ingest_and_post(store, registry, [vol_a], now=T)
    assert first.total("aged_out", GB_HOURS) == 2 * 72  # [T − 5 d, T − 2 d)
    assert first.total("usage", GB_HOURS) == 2 * 47  # [T − 2 d, T − 1 h)

    late = [
        volume("create", "vol-b", T - 26 * HOUR, gb=4), volume("delete", "vol-b", T - 20 * HOUR, project=None),
        volume("delete", "vol-a", T - 40 * HOUR, project=None),
    ]
    second = ingest_and_post(store, registry, late, now=T + 24 * HOUR)
    # before T − 1 d: vol-b's 2 h gained (+8), vol-a's [T − 40 h, T − 24 h) withdrawn (−32)
    assert second.total("aged_out", GB_HOURS) == Decimal(8 - 32)
    # inside the window: vol-b's [T − 24 h, T − 20 h) (+16), vol-a's [T − 24 h, T − 1 h) credited (−46)
    assert second.total("usage", GB_HOURS) == Decimal(16 - 46)
    assert verify(store, registry).ok


def test_a_cycle_with_nothing_new_dates_nothing_late(quick_store, registry) -> None:
    """Without events since the last cycle no history is read again, and the split is the old one."""
    store = quick_store
    ingest_and_post(store, registry, [volume("create", "vol-a", T - 120 * HOUR, gb=3)], now=T)
    second = ingest_and_post(store, registry, [], now=T + 5 * HOUR)
    assert second.total("aged_out", GB_HOURS) == 0
    assert second.total("usage", GB_HOURS) == 3 * 5


@pytest.mark.postgres
def test_a_refresh_waits_for_a_posting_batch_so_its_checkpoints_record_what_it_read(pg_store, pg_url, registry) -> None:
    """A refresh that starts while a batch is open (the API refreshes on every query) waits for it.
    Were it to commit between the batch's statements, the totals would include events its recorded
    watermark does not, and the next cycle would date them a second time."""
    store = pg_store
    items = [volume("create", "vol-a", T - 120 * HOUR, gb=2)]
    ingest_and_post(store, registry, items, now=T)
    straggler = [volume("create", "vol-b", T - 47 * HOUR, gb=5), volume("delete", "vol-b", T - 45 * HOUR, project=None)]
    refreshed = threading.Event()

    def ingest_and_refresh() -> None:
        Ingestor(store, registry).ingest(straggler, origin="test")
        projection.refresh(store)
        refreshed.set()

    def blocked_on_the_projection_lock(watcher: psycopg.Connection) -> bool:
        return bool(watcher.execute(
            "SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE d.datname = current_database()"
            " AND l.locktype = 'advisory' AND NOT l.granted").fetchone())

    racer = threading.Thread(target=ingest_and_refresh)

    def on_stage(stage: str, info: dict) -> None:
        if stage != "batch_locked":
            return
        racer.start()
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            wait_until(lambda: refreshed.is_set() or blocked_on_the_projection_lock(watcher),
                       "the refresh to finish or to wait for the batch")
        assert not refreshed.is_set(), "a refresh committed inside an open posting batch"

    second = post_usage(store, registry, now=T + HOUR, ingest_lag=LAG, window_days=WINDOW_DAYS, on_stage=on_stage)
    racer.join(timeout=60)
    assert refreshed.is_set()
    assert second.total("usage", GB_HOURS) == 2  # vol-a's hour; the straggler was not folded yet

    third = post_usage(store, registry, now=T + 24 * HOUR, ingest_lag=LAG, window_days=WINDOW_DAYS)
    # [T − 47 h, T − 45 h) lies before this window (T − 24 h) and was never posted: aged out, once
    assert third.total("aged_out", GB_HOURS) == 5 * 2
    assert third.total("usage", GB_HOURS) == 2 * 23  # vol-a, [T, T + 23 h)


hours = st.integers(min_value=-8 * 24, max_value=4 * 24)
operations = st.one_of(
    st.tuples(st.just("create"), st.integers(0, 5), hours, st.integers(0, 9), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("update"), st.integers(0, 5), hours, st.integers(0, 9), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("delete"), st.integers(0, 5), hours),
    st.tuples(st.just("cycle"), st.sampled_from([0, 1, 5, 24, 30, 49])),
)


class Oracle:
    """What each account must hold: per entity, ``aged_out`` = usage now dated before this cycle's
    boundary minus what was posted dated before it (the history it was last posted from, through
    that cycle's clamp). An entity is posted at every cycle from the first whose clamp follows the
    start of one of its intervals, except a re-run at the clamp it was last posted at."""

    def __init__(self, registry):
        self.registry = registry
        self.posted_from: dict[EntityKey, tuple[tuple[dict, ...], datetime]] = {}
        self.postings: dict[tuple[EntityKey, str], int] = defaultdict(int)

    def cycle(self, items: list[dict], window: CycleWindow) -> None:
        now_c = usage_through(self.registry, items, window.clamp)
        now_b = usage_through(self.registry, items, window.boundary)
        snapshot = tuple(items)
        for key in set(now_c) | set(self.posted_from):
            posted_before_b = total = 0
            if key in self.posted_from:
                then, clamp = self.posted_from[key]
                if clamp == window.clamp:
                    continue
                total = usage_through(self.registry, list(then), clamp).get(key, 0)
                posted_before_b = usage_through(self.registry, list(then), min(window.boundary, clamp)).get(key, 0)
            aged = now_b.get(key, 0) - posted_before_b
            self.postings[(key, "aged_out")] += aged
            self.postings[(key, "usage")] += now_c.get(key, 0) - total - aged
            self.posted_from[key] = (snapshot, window.clamp)


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(operations, min_size=1, max_size=14))
def test_random_histories_age_out_exactly_what_is_dated_before_the_window(quick_store, registry, ops) -> None:
    store = quick_store
    for table in ("events", "current_resources", "resource_intervals", "ledger_postings", "usage_checkpoints"):
        store.run(lambda uow, table=table: uow.execute(f"DELETE FROM {table}"))
    store.run(lambda uow: uow.execute("UPDATE projection_state SET watermark = 0"))
    items: list[dict] = []
    oracle = Oracle(registry)
    now, pending = T, []
    for op in [*ops, ("cycle", 1)]:
        if op[0] == "create" or op[0] == "update":
            _, n, at, gb, project = op
            pending.append(volume(op[0], f"vol-{n}", T + at * HOUR, gb=gb, project=project))
        elif op[0] == "delete":
            pending.append(volume("delete", f"vol-{op[1]}", T + op[2] * HOUR, project=None))
        else:
            now += op[1] * HOUR
            ingest_and_post(store, registry, pending, now)
            items += pending
            pending = []
            oracle.cycle(items, CycleWindow.at(now, ingest_lag=LAG, window_days=WINDOW_DAYS))
            assert {k: v for k, v in postings(store).items() if v} == {k: v for k, v in oracle.postings.items() if v}, ops


def test_only_a_checkpoint_inside_the_window_with_a_recorded_watermark_reads_late_usage() -> None:
    from tally_pipeline.core.ledger import Checkpoint, late_span

    window = CycleWindow.at(T + 24 * HOUR, ingest_lag=LAG, window_days=WINDOW_DAYS)  # boundary T − 24 h
    inside = Checkpoint(100, T - HOUR, T - 48 * HOUR, 40, watermark=7)
    assert late_span(inside, window, watermark=9) == (7, T - 48 * HOUR)
    assert late_span(inside, window, watermark=7) is None  # nothing folded since
    assert late_span(inside._replace(watermark=None), window, watermark=9) is None  # posted before 0009
    assert late_span(inside._replace(clamp=T - 30 * HOUR), window, watermark=9) is None  # paused past the window
    assert late_span(Checkpoint(), window, watermark=9) is None  # never posted
