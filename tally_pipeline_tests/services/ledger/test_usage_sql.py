"""The meter rule in SQL equals the rule in Python, to the micro-unit, on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.usage import MAX_METER_VALUE
from tally_pipeline.services.ledger.usage import cumulative_usage
from tally_pipeline_tests.ledger_data import T0, Row, insert, model_usage, vm

# every kind of value about equally likely, so each unusable kind shows up in most runs
value = st.one_of(
    st.integers(0, 64),
    st.integers(0, MAX_METER_VALUE - 1),
    st.none(),
    *(st.just(v) for v in ["two", 1.5, 4.0, True, False, -1, MAX_METER_VALUE, [3]]),
)


@st.composite
def sizes(draw, rtype: str):
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from([[1, 2], "small", 7]))  # not an object at all
    if rtype == "instance":
        size = vm(vcpus=draw(value), ram_mb=draw(value))
    elif rtype == "volume":
        size = {"gb": draw(value), "volume_type": "ssd"}
    else:
        size = {"bytes": draw(value)}
    if draw(st.booleans()):  # an absent field counts like a null one
        size.pop(draw(st.sampled_from(sorted(size))))
    return size


offsets = st.integers(min_value=-60 * 86_400 * 10**6, max_value=60 * 86_400 * 10**6)
# mostly after the intervals began, so their sizes are read
late = st.integers(min_value=-10 * 86_400 * 10**6, max_value=90 * 86_400 * 10**6)


@st.composite
def rows(draw):
    out = []
    for n in range(draw(st.integers(0, 10))):
        rtype = draw(st.sampled_from(["instance", "instance", "volume", "image", "floating_ip"]))
        start = T0 + timedelta(microseconds=draw(offsets))
        length = draw(st.one_of(st.none(), st.integers(-10**9, 20 * 86_400 * 10**6)))
        size = {} if rtype == "floating_ip" else draw(sizes(rtype))
        out.append(
            Row(
                project_id=draw(st.sampled_from(["p1", "p2", "p3"])),
                resource_id=f"r{n}",
                start=start,
                end=None if length is None else start + timedelta(microseconds=length),
                size=size,
                resource_type=rtype,
                cloud=draw(st.sampled_from(["c1", "c2"])),
                platform_status=draw(st.sampled_from([None, "active", "shutoff", "shelved_offloaded", "a,b"])),
            )
        )
    return out


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows(), through=late.map(lambda us: T0 + timedelta(microseconds=us)))
def test_sql_usage_equals_python_usage(quick_store, registry, data, through) -> None:
    store = quick_store
    store.run(lambda uow: uow.execute("DELETE FROM resource_intervals"))
    insert(store, *data)
    expected = model_usage(registry, data, through)
    got = cumulative_usage(store, registry, through)
    assert got.micro == {k: v for k, v in expected.items() if v is not None}
    assert set(got.unusable) == {k for k, v in expected.items() if v is None}


# statuses some meters do not bill: an interval in one uses nothing and its size is not read
POLICY = {"vcpu_hours": ["shutoff", "shelved_offloaded"], "ram_gb_hours": ["shelved_offloaded"],
          "volume_gb_hours": ["a", "b"]}


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows(), through=late.map(lambda us: T0 + timedelta(microseconds=us)))
def test_sql_usage_equals_python_usage_under_a_status_policy(quick_store, registry, data, through) -> None:
    store = quick_store
    priced = registry.with_unbilled_statuses(POLICY)
    store.run(lambda uow: uow.execute("DELETE FROM resource_intervals"))
    insert(store, *data)
    expected = model_usage(priced, data, through)
    got = cumulative_usage(store, priced, through)
    assert got.micro == {k: v for k, v in expected.items() if v is not None}
    assert set(got.unusable) == {k for k, v in expected.items() if v is None}


def test_sql_reports_which_size_is_unusable(store, registry) -> None:
    insert(store, Row("p1", "vm-7", T0, None, vm(vcpus="two")))
    got = cumulative_usage(store, registry, T0 + timedelta(hours=1))
    reasons = set(got.unusable.values())
    assert reasons == {'instance/vm-7: vcpus = "two" is not an integer in [0, 10^18)'}
    # the meters that do not read vcpus are unaffected: 1 hour; 4 GiB for 1 hour
    assert {(k.meter, v) for k, v in got.micro.items()} == {("instance_hours", 1_000_000), ("ram_gb_hours", 4_000_000)}


def test_each_store_hands_out_the_usage_sql_of_its_dialect(quick_store) -> None:
    sql = quick_store.usage_sql()
    assert sql.dialect == quick_store.dialect
