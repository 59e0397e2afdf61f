"""The ``simulated`` provider: the adapter protocol over the simulator, its faults, and its factory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from tally_pipeline.config import ConfigError, SimulatedCloud, load_config
from tally_pipeline.providers import adapter_for
from tally_pipeline.providers.interface import AdapterError, Enumerated, Failed, PlatformAdapter, list_type
from tally_pipeline.providers.openstack.statuses import in_transition
from tally_pipeline.providers.simulated import SIMULATED_TYPES, SimulationSpec, simulate, spec_for_cloud
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter, simulated_adapter


@pytest.fixture
def sim():
    return simulate(SimulationSpec(clouds=("a", "b"), hours=24, seed=31))


@pytest.fixture
def adapter(sim) -> SimulatedAdapter:
    return SimulatedAdapter(sim.platform, "a")


def test_it_is_a_platform_adapter_listing_every_simulated_type(adapter) -> None:
    assert isinstance(adapter, PlatformAdapter)
    assert adapter.resource_types == SIMULATED_TYPES


def test_enumerate_maps_the_platform_records(sim, adapter) -> None:
    transitional = 0
    for hour in range(1, 24, 2):
        at = sim.start + timedelta(hours=hour, minutes=7)
        for resource_type in SIMULATED_TYPES:
            listing = list_type(adapter, resource_type, at=at)
            assert isinstance(listing, Enumerated)
            records = sim.platform.records("a", resource_type, at)
            assert len(listing.items) == len(records) > 0
            for item, record in zip(listing.items, records):
                assert (item.resource_id, item.project_id, item.size, item.status, item.created_at, item.updated_at) == (
                    record.resource_id, record.project_id, record.size, record.status, record.created_at, record.updated_at)
                assert item.in_transition == in_transition(resource_type, record.status, record.task_state)
                transitional += item.in_transition
    # Instances being built or deleted count as in transition through their task state.
    building = next(lc for lc in sim.truth.lifecycles("a", "instance") if lc.created_at > sim.start)
    items = list(adapter.enumerate("instance", at=building.created_at))
    assert next(i for i in items if i.resource_id == building.resource_id).in_transition


@pytest.mark.parametrize("mode", ["error", "timeout"])
def test_a_failing_type_fails_alone(sim, adapter, mode) -> None:
    sim.platform.inject("a", "volume", mode)
    at = sim.start + timedelta(hours=3)
    listing = list_type(adapter, "volume", at=at)
    assert isinstance(listing, Failed)
    assert listing.reason.startswith("AdapterError" if mode == "error" else "TimeoutError")
    assert isinstance(list_type(adapter, "instance", at=at), Enumerated)
    assert isinstance(list_type(SimulatedAdapter(sim.platform, "b"), "volume", at=at), Enumerated)
    with pytest.raises(TimeoutError if mode == "timeout" else AdapterError):
        list(adapter.enumerate("volume", at=at))


def test_an_empty_fault_enumerates_nothing_while_the_platform_holds_resources(sim, adapter) -> None:
    at = sim.start + timedelta(hours=3)
    assert sim.platform.records("a", "image", at)
    sim.platform.inject("a", "image", "empty")
    listing = list_type(adapter, "image", at=at)
    assert isinstance(listing, Enumerated) and listing.items == []
    sim.platform.clear("a", "image")
    assert list_type(adapter, "image", at=at).items


def test_faults_from_the_config_apply_from_the_start() -> None:
    config = SimulatedCloud(provider="simulated", start="2026-03-01T00:00:00Z", hours=12,
                            failing_types={"floating_ip": "error", "load_balancer": "empty"})
    adapter = simulated_adapter("demo", config)
    at = datetime(2026, 3, 1, 6, tzinfo=UTC)
    assert isinstance(list_type(adapter, "floating_ip", at=at), Failed)
    assert list_type(adapter, "load_balancer", at=at).items == []
    assert list_type(adapter, "instance", at=at).items


def test_an_unlisted_type_fails(sim) -> None:
    adapter = SimulatedAdapter(sim.platform, "a", resource_types=("instance",))
    assert isinstance(list_type(adapter, "volume", at=sim.start), Failed)
    assert adapter.deleted_since(sim.start, at=sim.end).available is True
    volumes_only = SimulatedAdapter(sim.platform, "a", resource_types=("volume",))
    assert volumes_only.deleted_since(sim.start, at=sim.end).available is False


def test_deleted_since_lists_deleted_instances_with_real_times(sim, adapter) -> None:
    at = sim.start + timedelta(hours=20)
    since = at - timedelta(hours=6)
    listing = adapter.deleted_since(since, at=at)
    assert listing.available and listing.items
    expected = sim.platform.deleted_servers("a", since, at)
    assert [(d.resource_id, d.deleted_at, d.created_at, d.size, d.project_id) for d in listing.items] == [
        (r.resource_id, r.deleted_at, r.created_at, r.size, r.project_id) for r in expected]
    for item in listing.items:
        assert item.resource_type == "instance"
        assert since <= item.deleted_at <= at
        assert sim.truth.lifecycle("a", "instance", item.resource_id).deleted_at == item.deleted_at


def test_deleted_since_follows_the_instance_fault(sim, adapter) -> None:
    at = sim.start + timedelta(hours=20)
    sim.platform.inject("a", "instance", "timeout")
    listing = adapter.deleted_since(at - timedelta(hours=6), at=at)
    assert not listing.available and listing.reason.startswith("TimeoutError")
    sim.platform.inject("a", "instance", "empty")
    listing = adapter.deleted_since(at - timedelta(hours=6), at=at)
    assert listing.available and listing.items == []


def test_adapter_for_builds_a_simulated_adapter_from_config_or_a_given_view(sim) -> None:
    config = SimulatedCloud(provider="simulated", seed=5, start="2026-02-01T00:00:00Z", hours=10)
    adapter = adapter_for("demo", config)
    at = datetime(2026, 2, 1, 4, tzinfo=UTC)
    expected = simulate(spec_for_cloud("demo", config)).platform.records("demo", "volume", at)
    assert [i.resource_id for i in adapter.enumerate("volume", at=at)] == [r.resource_id for r in expected]
    shared = adapter_for("a", config, platform=sim.platform)
    assert shared.platform is sim.platform
    with pytest.raises(ValueError, match="unknown provider"):
        adapter_for("x", SimpleNamespace(provider="carrier-pigeon"))


def test_without_a_start_the_window_ends_at_the_current_hour() -> None:
    config = SimulatedCloud(provider="simulated", hours=48)
    early = spec_for_cloud("demo", config, now=datetime(2026, 5, 4, 13, 2, 11, tzinfo=UTC))
    late = spec_for_cloud("demo", config, now=datetime(2026, 5, 4, 13, 58, tzinfo=UTC))
    assert early.end == datetime(2026, 5, 4, 13, tzinfo=UTC) == late.end
    assert early.start == early.end - timedelta(hours=48)
    assert early == late
    later = spec_for_cloud("demo", config, now=datetime(2026, 5, 4, 14, 0, 1, tzinfo=UTC))
    assert later.end == datetime(2026, 5, 4, 14, tzinfo=UTC)
    # "now" itself is answerable: the cloud as it stood at the top of the hour.
    adapter = simulated_adapter("demo", config, now=datetime(2026, 5, 4, 13, 30, tzinfo=UTC))
    assert list(adapter.enumerate("instance", at=datetime(2026, 5, 4, 13, 30, tzinfo=UTC)))


def test_simulated_cloud_settings_are_validated(tmp_path) -> None:
    path = tmp_path / "tally.yaml"
    path.write_text("clouds:\n  demo: {provider: simulated, loss: 0.05, duplicates: 0.01, churn: 2, retention_hours: 6}\n")
    config = load_config(path).clouds["demo"]
    spec = spec_for_cloud("demo", config, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert (spec.delivery.loss, spec.delivery.duplicates, spec.churn, spec.retention_hours) == (0.05, 0.01, 2, 6)
    for bad, message in (
        ("{provider: simulated, loss: 2}", "clouds.demo.simulated.loss"),
        ("{provider: simulated, start: yesterday}", "clouds.demo.simulated.start"),
        ("{provider: simulated, failing_types: {bucket: error}}", "not a simulated type"),
    ):
        path.write_text(f"clouds:\n  demo: {bad}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)
