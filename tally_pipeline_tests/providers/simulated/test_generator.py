"""The simulator's ground truth: deterministic, well-formed lifecycles, and exact usage."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import orjson
import pytest

from tally_pipeline.core.registry import Meter
from tally_pipeline.providers.simulated import (
    SIMULATED_TYPES,
    DeliverySpec,
    GroundTruth,
    Interval,
    Lifecycle,
    Phase,
    SimulationSpec,
    TypeProfile,
    default_profiles,
    simulate,
)

START = datetime(2026, 1, 1, tzinfo=UTC)


def fingerprint(spec: SimulationSpec) -> bytes:
    """Everything a simulation produces, serialised: truth, generated events, deliveries."""
    sim = simulate(spec)
    return orjson.dumps({
        "truth": list(sim.truth),
        "generated": sim.stream.generated(),
        "deliveries": [[d.delivered_at, d.emitted_at, d.duplicate, d.event] for d in sim.stream.deliveries()],
    })


@pytest.fixture(scope="module")
def sim48():
    return simulate(SimulationSpec(clouds=("a", "b"), hours=48, seed=5))


def test_same_spec_gives_identical_output_and_another_seed_differs() -> None:
    spec = SimulationSpec(clouds=("a", "b"), hours=24, seed=11, delivery=DeliverySpec(loss=0.1, duplicates=0.1))
    first = fingerprint(spec)
    decoded = orjson.loads(first)
    assert decoded["truth"] and decoded["generated"] and decoded["deliveries"]
    assert first == fingerprint(spec)
    assert first != fingerprint(SimulationSpec(clouds=("a", "b"), hours=24, seed=12,
                                               delivery=DeliverySpec(loss=0.1, duplicates=0.1)))


def test_output_does_not_depend_on_the_process_hash_seed() -> None:
    # Set iteration order changes with PYTHONHASHSEED; nothing the simulator emits may depend on it.
    script = (
        "import hashlib, orjson\n"
        "from tally_pipeline.providers.simulated import simulate, SimulationSpec, DeliverySpec\n"
        "s = simulate(SimulationSpec(clouds=('a', 'b'), hours=12, seed=3, delivery=DeliverySpec(loss=0.2, duplicates=0.2)))\n"
        "data = orjson.dumps([list(s.truth), [[d.delivered_at, d.event] for d in s.stream.deliveries()]])\n"
        "print(hashlib.sha256(data).hexdigest())\n"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_delivery_settings_never_change_the_truth() -> None:
    clean = simulate(SimulationSpec(hours=24, seed=9))
    lossy = simulate(SimulationSpec(hours=24, seed=9, delivery=DeliverySpec(loss=0.5, duplicates=0.5, reorder=False)))
    assert orjson.dumps(list(clean.truth)) == orjson.dumps(list(lossy.truth))
    assert [e["event_id"] for e in clean.stream.generated()] == [e["event_id"] for e in lossy.stream.generated()]


def test_a_48h_run_has_a_few_hundred_changes_per_cloud_and_every_type(sim48) -> None:
    for cloud in ("a", "b"):
        counts = sim48.truth.change_counts(cloud)
        assert 200 <= sum(counts.values()) <= 800, counts
        assert counts["create"] > 50 and counts["delete"] > 50 and counts["update"] > 10
        for resource_type in SIMULATED_TYPES:
            assert sim48.truth.lifecycles(cloud, resource_type), resource_type
            in_window = [lc for lc in sim48.truth.lifecycles(cloud, resource_type) if lc.created_at >= sim48.start]
            assert in_window, f"no {resource_type} created inside the window"


def test_the_population_stays_near_its_target(sim48) -> None:
    for hour in range(0, 48, 6):
        at = sim48.start + timedelta(hours=hour)
        alive = sum(len(sim48.truth.alive_at("a", t, at)) for t in SIMULATED_TYPES)
        assert 30 <= alive <= 110, (hour, alive)


def test_the_cloud_is_warm_at_the_start(sim48) -> None:
    at_start = [lc for lc in sim48.truth.lifecycles("a") if lc.alive_at(sim48.start)]
    assert len(at_start) >= 40
    assert all(lc.created_at < sim48.start for lc in at_start)


def test_lifecycles_are_well_formed(sim48) -> None:
    ids = [lc.resource_id for lc in sim48.truth]
    assert len(ids) == len(set(ids))
    for lc in sim48.truth:
        assert lc.intervals[0].start == lc.created_at == lc.phases[0].at
        for earlier, later in zip(lc.intervals, lc.intervals[1:]):
            assert earlier.end == later.start and earlier.start < later.start
        assert lc.intervals[-1].end == lc.deleted_at
        assert all(i.project_id == lc.project_id for i in lc.intervals)
        assert [p.at for p in lc.phases] == sorted(p.at for p in lc.phases)
        if lc.deleted_at is not None:
            assert lc.deleted_at < sim48.end
            assert lc.phases[-1].at < lc.deleted_at
        else:
            assert lc.created_at < sim48.end


def test_sizes_change_as_each_service_allows(sim48) -> None:
    for lc in sim48.truth.lifecycles("a"):
        sizes = [i.size for i in lc.intervals]
        if lc.resource_type == "instance":
            # a new version is a resize (another flavor) or a power action (same flavor, other status)
            versions = [(i.size["flavor_name"], i.status) for i in lc.intervals]
            assert all(a != b for a, b in zip(versions, versions[1:]))
            assert all(a[0] != b[0] or a[1] != b[1] and "active" in (a[1], b[1])
                       for a, b in zip(versions, versions[1:]))
        elif lc.resource_type == "volume":
            assert all(a["gb"] < b["gb"] for a, b in zip(sizes, sizes[1:]))
        elif lc.resource_type == "image":
            assert [s["bytes"] is None for s in sizes] == [True, False]
        else:
            assert len(sizes) == 1


def test_churn_scales_the_number_of_changes() -> None:
    calm = simulate(SimulationSpec(hours=48, seed=2, churn=0.5)).truth.change_counts("sim")
    busy = simulate(SimulationSpec(hours=48, seed=2, churn=2.0)).truth.change_counts("sim")
    assert sum(busy.values()) > 2.5 * sum(calm.values())


def test_no_resources_means_an_empty_cloud() -> None:
    sim = simulate(SimulationSpec(resources=0, hours=12))
    assert len(sim.truth) == 0 and sim.stream.generated() == []


def test_invalid_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        SimulationSpec(clouds=("a", "a"))
    with pytest.raises(ValueError, match="no simulator"):
        SimulationSpec(profiles={**default_profiles(), "bucket": TypeProfile(0.1, 1.0)})
    with pytest.raises(ValueError, match="within"):
        DeliverySpec(loss=1.5)
    with pytest.raises(ValueError, match="unknown mode"):
        SimulationSpec(failing_types={"sim": {"volume": "explode"}})


# -- exact usage on a hand-built truth ---------------------------------------------------------------


def _hand_truth() -> GroundTruth:
    t = lambda h: START + timedelta(hours=h)  # noqa: E731
    vm = Lifecycle(
        cloud="c", resource_type="instance", resource_id="vm1", project_id="p1", name="vm",
        created_at=t(1), deleted_at=t(4),
        intervals=(
            Interval(t(1), t(2), "p1", {"flavor_name": "s", "vcpus": 2, "ram_mb": 1024, "disk_gb": 1}),
            Interval(t(2), t(4), "p1", {"flavor_name": "l", "vcpus": 8, "ram_mb": 4096, "disk_gb": 1}),
        ),
        phases=(Phase(t(1), "ACTIVE"),),
    )
    open_vm = Lifecycle(
        cloud="c", resource_type="instance", resource_id="vm2", project_id="p2", name="vm",
        created_at=t(3), deleted_at=None,
        intervals=(Interval(t(3), None, "p2", {"flavor_name": "s", "vcpus": 2, "ram_mb": 1024, "disk_gb": 1}),),
        phases=(Phase(t(3), "ACTIVE"),),
    )
    image = Lifecycle(
        cloud="c", resource_type="image", resource_id="img", project_id="p1", name="img",
        created_at=t(0), deleted_at=None,
        intervals=(Interval(t(0), t(1), "p1", {"bytes": None}), Interval(t(1), None, "p1", {"bytes": 2 * 1024**3})),
        phases=(Phase(t(0), "active"),),
    )
    return GroundTruth([vm, open_vm, image], start=START, end=t(6))


def test_resource_hours_are_exact_overlaps() -> None:
    truth = _hand_truth()
    # vm1 alive 1h..4h, vm2 from 3h on: over [0h, 5h) that is 3 + 2 hours.
    assert truth.resource_hours("c", "instance", START, START + timedelta(hours=5)) == Decimal(5)
    # [1h30, 3h30): vm1 2h, vm2 30 min.
    assert truth.resource_hours("c", "instance", START + timedelta(minutes=90), START + timedelta(minutes=210)) == Decimal("2.5")
    assert truth.resource_hours("c", "volume", START, START + timedelta(hours=5)) == 0


def test_meter_quantities_follow_size_and_divisor() -> None:
    truth = _hand_truth()
    window = (START, START + timedelta(hours=5))
    vcpu = Meter("vcpu_hours", "instance", "vCPU-hour", per="vcpus")
    # vm1: 1h at 2 + 2h at 8; vm2: 2h at 2.
    assert truth.quantity("c", vcpu, *window) == Decimal(22)
    assert truth.quantity("c", vcpu, *window, project_id="p2") == Decimal(4)
    image_gb = Meter("image_gb_hours", "image", "GiB-hour", per="bytes", divisor=1024**3)
    # queued (null bytes) for the first hour meters nothing, then 2 GiB for 4 hours.
    assert truth.quantity("c", image_gb, *window) == Decimal(8)


def test_alive_at_uses_the_index_and_agrees_with_a_scan(sim48) -> None:
    for minutes in range(-30, 49 * 60, 37):
        at = sim48.start + timedelta(minutes=minutes)
        for resource_type in SIMULATED_TYPES:
            scanned = {lc.resource_id for lc in sim48.truth.lifecycles("b", resource_type)
                       if lc.created_at <= at and (lc.deleted_at is None or at < lc.deleted_at)}
            indexed = [lc.resource_id for lc in sim48.truth.alive_at("b", resource_type, at)]
            assert set(indexed) == scanned and len(indexed) == len(scanned)



def test_instances_go_through_power_episodes_that_the_truth_and_the_phases_agree_on(sim48) -> None:
    """Power episodes (stopped, suspended, paused, offloaded) happen, each between two active
    stretches, and every truth interval's status is the power class of the phase shown at its start."""
    from tally_pipeline.providers.simulated.truth import POWER_STATUSES, power_class

    seen: set[str] = set()
    for lc in sim48.truth.lifecycles(resource_type="instance"):
        for interval in lc.intervals:
            phase = lc.phase_at(interval.start)
            assert phase is not None and power_class(phase.status) == interval.status
            seen.add(interval.status)
        assert lc.intervals[0].status == "active"
    assert POWER_STATUSES <= seen
