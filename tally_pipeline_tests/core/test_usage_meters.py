"""Meters in pure Python: the value a size gives, usage of an interval through an instant, exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally_pipeline.core.registry import Meter
from tally_pipeline.core.usage import (
    MAX_METER_VALUE,
    Interval,
    MeterValueError,
    cumulative_usage_micro,
    epoch_us,
    from_epoch_us,
    interval_usage_micro,
    meter_value,
    to_micro,
    to_units,
)
from tally_pipeline.schemas import default_registry

T = datetime(2026, 1, 1, tzinfo=UTC)
HOURS = Meter("instance_hours", "instance", "hour")
VCPU = Meter("vcpu_hours", "instance", "vCPU-hour", per="vcpus")
RAM = Meter("ram_gb_hours", "instance", "GiB-hour", per="ram_mb", divisor=1024)
IMAGE = Meter("image_gb_hours", "image", "GiB-hour", per="bytes", divisor=1073741824)


def test_default_meters_are_the_designed_ones() -> None:
    names = {(m.resource_type, m.name, m.per, m.divisor) for m in default_registry().meters()}
    assert names == {
        ("floating_ip", "floating_ip_hours", None, 1),
        ("image", "image_gb_hours", "bytes", 1073741824),
        ("instance", "instance_hours", None, 1),
        ("instance", "ram_gb_hours", "ram_mb", 1024),
        ("instance", "vcpu_hours", "vcpus", 1),
        ("load_balancer", "load_balancer_hours", None, 1),
        ("volume", "volume_gb_hours", "gb", 1),
    }


def test_meter_value_reads_the_per_field_and_counts_absent_or_null_as_zero() -> None:
    assert meter_value(HOURS, {"anything": "x"}) == 1
    assert meter_value(HOURS, "not even an object") == 1  # a meter without `per` never reads the size
    assert meter_value(VCPU, {"vcpus": 8}) == 8
    assert meter_value(VCPU, {"vcpus": None}) == 0
    assert meter_value(VCPU, {}) == 0
    assert meter_value(VCPU, {"vcpus": MAX_METER_VALUE - 1}) == MAX_METER_VALUE - 1


@pytest.mark.parametrize("bad", ["two", 1.5, 4.0, True, -1, MAX_METER_VALUE, [2], {"n": 2}])
def test_meter_value_rejects_what_is_not_a_non_negative_integer(bad) -> None:
    with pytest.raises(MeterValueError, match="vcpus"):
        meter_value(VCPU, {"vcpus": bad})


def test_meter_value_rejects_a_size_that_is_not_an_object() -> None:
    with pytest.raises(MeterValueError, match="not an object"):
        meter_value(VCPU, [1, 2])


def test_usage_is_rate_times_hours_in_micro_units() -> None:
    ninety_minutes = Interval(T, T + timedelta(minutes=90), {"vcpus": 2, "ram_mb": 3072})
    through = T + timedelta(days=1)
    assert interval_usage_micro(HOURS, ninety_minutes, through) == 1_500_000
    assert interval_usage_micro(VCPU, ninety_minutes, through) == 3_000_000
    assert interval_usage_micro(RAM, ninety_minutes, through) == 4_500_000  # 3 GiB × 1.5 h


def test_an_open_interval_counts_through_the_instant_and_a_closed_one_stops_at_its_end() -> None:
    size = {"vcpus": 4}
    assert interval_usage_micro(VCPU, Interval(T, None, size), T + timedelta(hours=2)) == 8_000_000
    closed = Interval(T, T + timedelta(hours=1), size)
    assert interval_usage_micro(VCPU, closed, T + timedelta(minutes=30)) == 2_000_000
    assert interval_usage_micro(VCPU, closed, T + timedelta(hours=5)) == 4_000_000


def test_an_interval_not_begun_by_the_instant_uses_nothing_and_its_size_is_not_read() -> None:
    later = Interval(T + timedelta(hours=1), None, {"vcpus": "two"})
    assert interval_usage_micro(VCPU, later, T + timedelta(hours=1)) == 0
    with pytest.raises(MeterValueError):
        interval_usage_micro(VCPU, later, T + timedelta(hours=1, microseconds=1))


def test_an_interval_ending_before_it_starts_uses_nothing() -> None:
    assert interval_usage_micro(HOURS, Interval(T, T - timedelta(hours=1), {}), T + timedelta(hours=3)) == 0


def test_usage_is_truncated_per_interval_to_whole_micro_units() -> None:
    # one byte for an hour is 1/2^30 GiB-hour: far below a micro-unit, so nothing
    one_byte = Interval(T, T + timedelta(hours=1), {"bytes": 1})
    assert interval_usage_micro(IMAGE, one_byte, T + timedelta(hours=2)) == 0
    # 1 vCPU for 1 µs is 1/3600 of a micro-unit; 3601 µs is 1.0003 micro-units → 1
    assert interval_usage_micro(VCPU, Interval(T, T + timedelta(microseconds=3601), {"vcpus": 1}), T + timedelta(1)) == 1
    # two intervals each below a micro-unit stay 0: the truncation is per interval, not per sum
    tiny = [Interval(T, T + timedelta(microseconds=3599), {"vcpus": 1})] * 2
    assert cumulative_usage_micro(VCPU, tiny, T + timedelta(days=1)) == 0


instants = st.integers(min_value=epoch_us(T) - 10**13, max_value=epoch_us(T) + 10**13).map(from_epoch_us)


@given(
    start=instants,
    length_us=st.integers(min_value=0, max_value=10**13),
    open_=st.booleans(),
    through=instants,
    value=st.integers(min_value=0, max_value=MAX_METER_VALUE - 1),
    divisor=st.integers(min_value=1, max_value=2**40),
)
def test_usage_equals_the_exact_rational_rule_rounded_down(start, length_us, open_, through, value, divisor) -> None:
    meter = Meter("m", "t", "u", per="n", divisor=divisor)
    end = None if open_ else start + timedelta(microseconds=length_us)
    stop = through if end is None else min(end, through)
    hours = Fraction(max(0, epoch_us(stop) - epoch_us(start)), 3600 * 10**6) if start < through else Fraction(0)
    expected = int(value * hours / divisor * 10**6)  # int() of a non-negative Fraction floors
    assert interval_usage_micro(meter, Interval(start, end, {"n": value}), through) == expected


@given(start=instants, a=st.integers(0, 10**12), b=st.integers(0, 10**12), value=st.integers(0, 10**6))
def test_usage_never_decreases_as_the_instant_moves_on(start, a, b, value) -> None:
    interval = Interval(start, None, {"vcpus": value})
    early, late = sorted((a, b))
    assert interval_usage_micro(VCPU, interval, start + timedelta(microseconds=early)) <= interval_usage_micro(
        VCPU, interval, start + timedelta(microseconds=late)
    )


@given(st.integers(min_value=-(10**37), max_value=10**37))
def test_micro_units_and_decimals_convert_exactly(micro) -> None:
    amount = to_units(micro)
    assert amount.as_tuple().exponent == -6
    assert to_micro(amount) == micro
    assert to_micro(str(amount)) == micro


def test_more_than_six_decimals_is_not_an_amount() -> None:
    with pytest.raises(ValueError, match="six decimal places"):
        to_micro(Decimal("0.0000001"))
