"""Delta arithmetic in pure Python: the split into usage and aged_out, the guards, the posting keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally_pipeline.core.ledger import (
    Checkpoint,
    CycleWindow,
    EntityKey,
    EntityTotals,
    NonMonotonicCheckpoint,
    PostingKey,
    plan_delta,
    posting_keys,
    split_boundary,
)
from tally_pipeline.core.registry import Meter
from tally_pipeline.core.usage import Interval, cumulative_usage_micro

NOW = datetime(2026, 3, 1, tzinfo=UTC)
KEY = EntityKey("c1", "p1", "instance_hours")
HOURS = Meter("instance_hours", "instance", "hour")
H = 1_000_000  # one hour of instance_hours, in micro-units


def window(now: datetime = NOW, lag: float = 900, days: int = 35) -> CycleWindow:
    return CycleWindow.at(now, ingest_lag=lag, window_days=days)


def test_the_window_is_derived_from_now() -> None:
    w = window()
    assert w.clamp == NOW - timedelta(minutes=15)
    assert w.window_start == NOW - timedelta(days=35)
    assert w.boundary == w.window_start
    # a lag longer than the window: nothing before the clamp can be "in the window" after it
    short = CycleWindow.at(NOW, ingest_lag=timedelta(days=2), window_days=1)
    assert short.boundary == short.clamp == NOW - timedelta(days=2)


def test_window_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="ingest_lag"):
        CycleWindow.at(NOW, ingest_lag=-1, window_days=3)
    with pytest.raises(ValueError, match="window_days"):
        CycleWindow.at(NOW, ingest_lag=0, window_days=0)


def test_a_new_entity_posts_its_total_and_ages_out_what_is_dated_before_the_window() -> None:
    w = window()
    delta = plan_delta(Checkpoint(), EntityTotals(through_clamp=50 * H, through_checkpoint_boundary=8 * H, through_boundary=8 * H), w)
    assert (delta.usage, delta.aged_out) == (42 * H, 8 * H)
    assert delta.checkpoint == Checkpoint(total=50 * H, clamp=w.clamp, boundary=w.boundary, aged_before=8 * H)


def test_the_next_cycle_posts_the_increase_and_nothing_aged_out_when_old_history_is_unchanged() -> None:
    first, second = window(), window(NOW + timedelta(hours=1))
    cp = plan_delta(Checkpoint(), EntityTotals(50 * H, 8 * H, 8 * H), first).checkpoint
    # one more hour at the end; the new boundary has also moved an hour on
    delta = plan_delta(cp, EntityTotals(51 * H, 8 * H, 9 * H), second)
    assert (delta.usage, delta.aged_out) == (H, 0)
    assert delta.checkpoint.aged_before == 9 * H and delta.checkpoint.boundary == second.boundary


def test_a_straggler_dated_before_the_checkpoints_boundary_goes_to_aged_out() -> None:
    first, second = window(), window(NOW + timedelta(hours=1))
    cp = plan_delta(Checkpoint(), EntityTotals(50 * H, 8 * H, 8 * H), first).checkpoint
    # a resource that lived 3 hours, 60 days ago, arrives late: +3 h before the boundary
    delta = plan_delta(cp, EntityTotals(54 * H, 11 * H, 12 * H), second)
    assert (delta.usage, delta.aged_out) == (H, 3 * H)


def test_a_correction_posts_a_negative_delta() -> None:
    first, second = window(), window(NOW + timedelta(hours=1))
    cp = plan_delta(Checkpoint(), EntityTotals(50 * H, 8 * H, 8 * H), first).checkpoint
    # a synthetic delete closes the resource 10 hours before the last clamp
    delta = plan_delta(cp, EntityTotals(40 * H, 8 * H, 8 * H), second)
    assert (delta.usage, delta.aged_out) == (-10 * H, 0)
    assert delta.amounts() == [("usage", -10 * H)]


def test_a_rerun_at_the_same_clamp_posts_nothing() -> None:
    w = window()
    cp = plan_delta(Checkpoint(), EntityTotals(50 * H, 8 * H, 8 * H), w).checkpoint
    assert plan_delta(cp, EntityTotals(70 * H, 8 * H, 8 * H), w) is None


def test_a_clamp_before_the_checkpoint_is_refused() -> None:
    cp = plan_delta(Checkpoint(), EntityTotals(50 * H, 8 * H, 8 * H), window()).checkpoint
    with pytest.raises(NonMonotonicCheckpoint, match="never moves backwards") as caught:
        plan_delta(cp, EntityTotals(49 * H, 8 * H, 8 * H), window(NOW - timedelta(seconds=1)), KEY)
    assert caught.value.entity == KEY and caught.value.checkpoint_clamp == cp.clamp


def test_zero_amounts_are_not_posted_and_keys_name_entity_clamp_and_account() -> None:
    w = window()
    delta = plan_delta(Checkpoint(), EntityTotals(5 * H, 0, 0), w)
    keys = posting_keys(KEY, delta, w.clamp)
    assert keys == [(PostingKey(KEY, w.clamp, "usage"), 5 * H)]
    assert str(keys[0][0]) == "c1/p1/instance_hours@2026-02-28T23:45:00Z#usage"


def test_a_checkpoint_dated_before_this_window_is_split_at_this_cycles_boundary() -> None:
    # posted once at NOW; the next cycle 40 days later has its window start past that clamp
    first = window()
    checkpoint = Checkpoint(total=10 * H, clamp=first.clamp, boundary=first.boundary, aged_before=2 * H)
    later = CycleWindow.at(NOW + timedelta(days=40), ingest_lag=900, window_days=35)
    # U(later clamp) = 10 h posted + 3 h new in [old clamp, later boundary) + 1 h inside the window
    delta = plan_delta(checkpoint, EntityTotals(14 * H, 2 * H, 13 * H), later)
    assert (delta.aged_out, delta.usage) == (3 * H, 1 * H)


def test_the_split_uses_the_checkpoints_own_boundary() -> None:
    w = window()
    earlier = NOW - timedelta(days=40)
    assert split_boundary(Checkpoint(total=1, clamp=w.clamp, boundary=earlier), w) == earlier
    assert split_boundary(Checkpoint(), w) == w.boundary


# A model run: random history edits between cycles, totals from core.usage, deltas from plan_delta.
edits = st.lists(
    st.tuples(
        st.integers(0, 3),  # resource
        st.integers(-80 * 24, 10 * 24),  # start, hours from NOW
        st.one_of(st.none(), st.integers(0, 30 * 24)),  # length in hours, None while open
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(edits, st.integers(0, 72)), min_size=1, max_size=8))
def test_postings_always_sum_to_usage_through_the_checkpoint(steps) -> None:
    history: dict[int, Interval] = {}
    checkpoint, now = Checkpoint(), NOW
    posted = {"usage": 0, "aged_out": 0}
    for changes, advance_hours in steps:
        for resource, start_h, length_h in changes:
            start = NOW + timedelta(hours=start_h)
            end = None if length_h is None else start + timedelta(hours=length_h)
            history[resource] = Interval(start, end, {})
        now += timedelta(hours=advance_hours)
        w = window(now)
        usage = lambda t: cumulative_usage_micro(HOURS, history.values(), t)  # noqa: E731
        totals = EntityTotals(usage(w.clamp), usage(split_boundary(checkpoint, w)), usage(w.boundary))
        delta = plan_delta(checkpoint, totals, w)
        if delta is None:  # a zero-hour step re-runs the cycle
            continue
        for account, amount in delta.amounts():
            posted[account] += amount
        checkpoint = delta.checkpoint
        assert posted["usage"] + posted["aged_out"] == checkpoint.total == usage(w.clamp)
