"""usage_daily: UTC days, recomputed whole, adding up exactly to cumulative usage."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.core.usage import to_micro
from tally_pipeline.services.ledger.daily import day_start, recompute_usage_daily
from tally_pipeline_tests.ledger_data import DAY, HOUR, T0, Row, insert, model_usage, vm


def daily(store) -> dict[tuple[EntityKey, date], int]:
    rows = store.query("SELECT cloud, project_id, meter, day, quantity FROM usage_daily")
    return {(EntityKey(c, p, m), d if not hasattr(d, "date") else d.date()): to_micro(q) for c, p, m, d, q in rows}


def test_an_interval_crossing_midnight_is_split_at_utc_midnight(store, registry) -> None:
    # 22:00 on day 0 to 03:00 on day 1: 2 hours, then 3 hours
    start = T0 - 2 * HOUR
    insert(store, Row("p1", "vm-1", start, T0 + 3 * HOUR, vm(vcpus=4)))
    result = recompute_usage_daily(store, registry, date(2026, 2, 28), date(2026, 3, 2), through=T0 + 10 * DAY)
    got = daily(store)
    vcpu = EntityKey("c1", "p1", "vcpu_hours")
    assert got[(vcpu, date(2026, 2, 28))] == 8_000_000
    assert got[(vcpu, date(2026, 3, 1))] == 12_000_000
    assert (vcpu, date(2026, 3, 2)) not in got  # no usage, no row
    assert result.rows == 6 and result.skipped == []
    units = dict(store.query("SELECT meter, min(unit) FROM usage_daily GROUP BY meter"))
    assert units == {"instance_hours": "hour", "vcpu_hours": "vCPU-hour", "ram_gb_hours": "GiB-hour"}


def test_recomputing_replaces_the_days_and_only_them(store, registry) -> None:
    row = Row("p1", "vm-1", T0, None, vm(vcpus=1))
    insert(store, row)
    recompute_usage_daily(store, registry, date(2026, 3, 1), date(2026, 3, 3), through=T0 + 5 * DAY)
    before = daily(store)
    recompute_usage_daily(store, registry, date(2026, 3, 1), date(2026, 3, 3), through=T0 + 5 * DAY)
    assert daily(store) == before  # idempotent
    # history changes: the server really lived from the middle of day 2 only
    store.run(lambda uow: uow.execute("UPDATE resource_intervals SET start_at = %s", [T0 + DAY + 12 * HOUR]))
    recompute_usage_daily(store, registry, date(2026, 3, 2))
    after = daily(store)
    vcpu = EntityKey("c1", "p1", "vcpu_hours")
    assert after[(vcpu, date(2026, 3, 1))] == 24_000_000  # day 1 was not recomputed: kept
    assert after[(vcpu, date(2026, 3, 2))] == 12_000_000
    assert after[(vcpu, date(2026, 3, 3))] == 24_000_000


def test_today_counts_up_to_through_and_later_days_are_empty(store, registry) -> None:
    insert(store, Row("p1", "vm-1", T0, None, vm(vcpus=1)))
    result = recompute_usage_daily(store, registry, date(2026, 3, 1), date(2026, 3, 5), through=T0 + 6 * HOUR)
    assert {d for _, d in daily(store)} == {date(2026, 3, 1)}
    assert daily(store)[(EntityKey("c1", "p1", "vcpu_hours"), date(2026, 3, 1))] == 6_000_000
    assert result.to_dict()["last_day"] == "2026-03-05"


def test_an_unusable_size_skips_that_entity_day_and_says_why(store, registry) -> None:
    insert(store, Row("p1", "vm-1", T0, None, vm(vcpus="two")), Row("p2", "vm-2", T0, None, vm(vcpus=2)))
    result = recompute_usage_daily(store, registry, date(2026, 3, 1), through=T0 + DAY)
    assert [(s.project_id, s.meter, s.day) for s in result.skipped] == [("p1", "vcpu_hours", date(2026, 3, 1))]
    assert "vcpus" in result.skipped[0].reason
    got = daily(store)
    assert (EntityKey("c1", "p1", "vcpu_hours"), date(2026, 3, 1)) not in got
    assert got[(EntityKey("c1", "p1", "instance_hours"), date(2026, 3, 1))] == 24_000_000
    assert got[(EntityKey("c1", "p2", "vcpu_hours"), date(2026, 3, 1))] == 48_000_000


def test_a_backwards_range_is_refused(store, registry) -> None:
    with pytest.raises(ValueError, match="first day 2026-03-02 is after the last day 2026-03-01"):  # a DayRangeError
        recompute_usage_daily(store, registry, date(2026, 3, 2), date(2026, 3, 1))


spans = st.lists(
    st.tuples(
        st.sampled_from(["p1", "p2"]),
        st.integers(0, 6 * 86_400 * 10**6),  # start, µs after T0
        st.one_of(st.none(), st.integers(0, 4 * 86_400 * 10**6)),
        st.integers(0, 16),
    ),
    max_size=6,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spans=spans, through_us=st.integers(0, 8 * 86_400 * 10**6))
def test_days_add_up_exactly_to_cumulative_usage(quick_store, registry, spans, through_us) -> None:
    store = quick_store
    store.run(lambda uow: uow.execute("DELETE FROM resource_intervals"))
    rows = [
        Row(project, f"vm-{n}", T0 + timedelta(microseconds=s), None if d is None else T0 + timedelta(microseconds=s + d), vm(vcpus=v))
        for n, (project, s, d, v) in enumerate(spans)
    ]
    insert(store, *rows)
    through = T0 + timedelta(microseconds=through_us)
    recompute_usage_daily(store, registry, date(2026, 3, 1), date(2026, 3, 10), through=through)
    summed: dict[EntityKey, int] = defaultdict(int)
    for (key, day), micro in daily(store).items():
        assert day_start(day) < through
        summed[key] += micro
    expected = {k: v for k, v in model_usage(registry, rows, through).items() if v}
    assert dict(summed) == expected
