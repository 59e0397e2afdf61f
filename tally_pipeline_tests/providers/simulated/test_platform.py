"""The simulated platform's view: listings that match the truth, transitional statuses, deleted servers, faults."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tally_pipeline.providers.openstack.statuses import in_transition
from tally_pipeline.providers.simulated import SIMULATED_TYPES, SimulatedPlatform, SimulationSpec, simulate

SECOND = timedelta(seconds=1)
SETTLED = {
    # VERIFY_RESIZE runs on the new flavor; the power statuses are settled too (nothing in progress)
    "instance": {"ACTIVE", "VERIFY_RESIZE", "SHUTOFF", "SUSPENDED", "PAUSED", "SHELVED_OFFLOADED"},
    "volume": {"available", "in-use"},
    "floating_ip": {"ACTIVE", "DOWN"},
    "image": {"active"},
    "load_balancer": {"ACTIVE"},
}


@pytest.fixture(scope="module")
def sim():
    return simulate(SimulationSpec(clouds=("a", "b"), hours=48, seed=17))


def shown(sim, lc, at):
    """The record the platform lists for one lifecycle at an instant, or None."""
    matches = [r for r in sim.platform.records(lc.cloud, lc.resource_type, at) if r.resource_id == lc.resource_id]
    assert len(matches) <= 1
    return matches[0] if matches else None


def test_listings_hold_exactly_the_resources_the_truth_has_alive(sim) -> None:
    for minutes in range(-20, 49 * 60, 23):
        at = sim.start + timedelta(minutes=minutes)
        for cloud in sim.clouds:
            for resource_type in SIMULATED_TYPES:
                records = sim.platform.records(cloud, resource_type, at)
                truth = {lc.resource_id: lc for lc in sim.truth
                         if lc.cloud == cloud and lc.resource_type == resource_type
                         and lc.created_at <= at and (lc.deleted_at is None or at < lc.deleted_at)}
                assert sorted(r.resource_id for r in records) == sorted(truth)
                for record in records:
                    lc = truth[record.resource_id]
                    interval = next(i for i in reversed(lc.intervals) if i.start <= at)
                    assert record.resource_type == resource_type
                    assert record.size == interval.size and record.project_id == interval.project_id
                    assert record.created_at == lc.created_at
                    assert record.created_at <= record.updated_at <= at
                    assert record.deleted_at is None and record.name == lc.name
                    if not in_transition(resource_type, record.status, record.task_state):
                        assert record.status in SETTLED[resource_type], record


def test_listings_are_ordered_and_answerable_past_the_end(sim) -> None:
    late = sim.end + timedelta(hours=3)
    records = sim.platform.records("a", "instance", late)
    assert records
    assert [(r.created_at, r.resource_id) for r in records] == sorted((r.created_at, r.resource_id) for r in records)
    alive_at_end = {lc.resource_id for lc in sim.truth.lifecycles("a", "instance") if lc.deleted_at is None}
    assert {r.resource_id for r in records} == alive_at_end


def test_updated_at_is_the_last_change_at_or_before_the_instant(sim) -> None:
    volumes = [lc for lc in sim.truth.lifecycles("a", "volume") if len(lc.intervals) > 1]
    assert volumes
    for lc in volumes:
        extended = lc.intervals[1].start
        assert shown(sim, lc, extended).updated_at == extended
        assert shown(sim, lc, extended + timedelta(seconds=5)).updated_at == extended
        assert shown(sim, lc, extended - SECOND).updated_at < extended


def _transitional(sim, lc, at, status, task_state=None):
    record = shown(sim, lc, at)
    assert record is not None, (lc.resource_id, at)
    assert (record.status, record.task_state) == (status, task_state), (lc.resource_type, at, record)
    assert in_transition(lc.resource_type, record.status, record.task_state)
    return record


def test_instances_build_resize_and_delete_through_transitional_states(sim) -> None:
    created = resized = deleted = 0
    for lc in sim.truth.lifecycles("a", "instance"):
        if lc.created_at >= sim.start:
            _transitional(sim, lc, lc.created_at + SECOND, "BUILD", "spawning")
            created += 1
        for before, interval in zip(lc.intervals, lc.intervals[1:]):
            if interval.size == before.size:  # a power episode's start or end, not a resize
                assert shown(sim, lc, interval.start).status == interval.status.upper()
                continue
            # nova runs the server on the new flavor from finish_resize: VERIFY_RESIZE shows it, settled
            verify = shown(sim, lc, interval.start)
            assert (verify.status, verify.task_state, verify.size) == ("VERIFY_RESIZE", None, interval.size)
            assert not in_transition("instance", verify.status, verify.task_state)
            record = _transitional(sim, lc, interval.start - SECOND, "RESIZE", "resize_migrating")
            assert record.size != interval.size
            confirmed = min(p.at for p in lc.phases if p.status == "ACTIVE" and p.at > interval.start)
            after = shown(sim, lc, confirmed)
            assert (after.status, after.task_state, after.size) == ("ACTIVE", None, interval.size)
            resized += 1
        if lc.deleted_at is not None:
            _transitional(sim, lc, lc.deleted_at - SECOND, "ACTIVE", "deleting")  # nova has no DELETING
            assert shown(sim, lc, lc.deleted_at) is None
            deleted += 1
    assert created and resized and deleted


def test_volumes_images_and_load_balancers_show_their_transitions(sim) -> None:
    seen = set()
    for lc in sim.truth.lifecycles("b"):
        fresh = lc.created_at >= sim.start
        if lc.resource_type == "volume":
            if fresh:
                _transitional(sim, lc, lc.created_at, "creating")
                seen.add("creating")
            for interval in lc.intervals[1:]:
                _transitional(sim, lc, interval.start - SECOND, "extending")
                seen.add("extending")
            if lc.deleted_at is not None:
                _transitional(sim, lc, lc.deleted_at - SECOND, "deleting")
                seen.add("deleting")
        elif lc.resource_type == "image" and fresh:
            _transitional(sim, lc, lc.created_at, "queued")
            activated = lc.intervals[1].start
            record = _transitional(sim, lc, activated - SECOND, "saving")
            assert record.size == {"bytes": None}
            assert shown(sim, lc, activated).status == "active"
            seen.add("image")
        elif lc.resource_type == "load_balancer":
            if fresh:
                _transitional(sim, lc, lc.created_at, "PENDING_CREATE")
                seen.add("PENDING_CREATE")
            if lc.deleted_at is not None:
                _transitional(sim, lc, lc.deleted_at - SECOND, "PENDING_DELETE")
                seen.add("PENDING_DELETE")
            for phase in lc.phases:
                if phase.status == "PENDING_UPDATE":
                    _transitional(sim, lc, phase.at, "PENDING_UPDATE")
                    seen.add("PENDING_UPDATE")
        elif lc.resource_type == "floating_ip":
            for phase in lc.phases:
                record = shown(sim, lc, phase.at)
                assert record.status in ("ACTIVE", "DOWN") and record.updated_at == phase.at
                assert not in_transition("floating_ip", record.status, record.task_state)
                seen.add("floating_ip")
    assert seen == {"creating", "extending", "deleting", "image", "PENDING_CREATE", "PENDING_DELETE", "PENDING_UPDATE",
                    "floating_ip"}


def test_deleted_servers_respect_since_at_and_retention(sim) -> None:
    at = sim.start + timedelta(hours=40)
    deleted = [lc for lc in sim.truth.lifecycles("a", "instance") if lc.deleted_at is not None]

    def expected(since, until):
        horizon = until - timedelta(hours=24)
        return sorted(lc.resource_id for lc in deleted if since <= lc.deleted_at <= until and lc.deleted_at >= horizon)

    for since in (sim.start, at - timedelta(hours=30), at - timedelta(hours=3), at - timedelta(minutes=10)):
        records = sim.platform.deleted_servers("a", since, at)
        assert sorted(r.resource_id for r in records) == expected(since, at)
        for record in records:
            lc = sim.truth.lifecycle("a", "instance", record.resource_id)
            assert record.status == "DELETED" and record.deleted_at == lc.deleted_at == record.updated_at
            assert record.size == lc.intervals[-1].size and record.created_at == lc.created_at
    # Retention: from the start, only the last 24 h of deletions are still listed.
    everything = sim.platform.deleted_servers("a", sim.start, at)
    assert everything and min(r.deleted_at for r in everything) >= at - timedelta(hours=24)
    assert any(lc.deleted_at < at - timedelta(hours=24) for lc in deleted)
    # Both bounds are inclusive.
    edge = deleted[len(deleted) // 2].deleted_at
    assert deleted[len(deleted) // 2].resource_id in {r.resource_id for r in sim.platform.deleted_servers("a", edge, edge)}


def test_retention_is_configurable() -> None:
    sim = simulate(SimulationSpec(hours=48, seed=3, retention_hours=2))
    at = sim.start + timedelta(hours=30)
    records = sim.platform.deleted_servers("sim", sim.start, at)
    assert records and all(r.deleted_at >= at - timedelta(hours=2) for r in records)


def test_faults_are_injected_cleared_and_read_from_the_spec() -> None:
    sim = simulate(SimulationSpec(clouds=("a", "b"), hours=6, failing_types={"a": {"volume": "timeout"}}))
    platform: SimulatedPlatform = sim.platform
    assert platform.failure("a", "volume") == "timeout"
    assert platform.failure("b", "volume") is None
    platform.inject("b", "image", "empty")
    platform.inject("b", "instance", "error")
    assert (platform.failure("b", "image"), platform.failure("b", "instance")) == ("empty", "error")
    platform.clear("b", "image")
    assert platform.failure("b", "image") is None and platform.failure("b", "instance") == "error"
    platform.clear()
    assert all(platform.failure(c, t) is None for c in ("a", "b") for t in SIMULATED_TYPES)
    with pytest.raises(ValueError, match="unknown failure mode"):
        platform.inject("a", "volume", "explode")
    # The view itself keeps answering: applying the fault is the caller's job.
    platform.inject("a", "volume", "empty")
    assert platform.records("a", "volume", sim.start + timedelta(hours=1))
