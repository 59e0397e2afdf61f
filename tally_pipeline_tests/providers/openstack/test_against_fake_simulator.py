"""The simulator's platform view served by the fake OpenStack: listed through openstacksdk, the
OpenStack adapter sees exactly what the simulated adapter sees, at every instant."""

from __future__ import annotations

from datetime import timedelta

from tally_pipeline.config import SimulatedCloud
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.providers.interface import list_type
from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.providers.simulated import simulate_cloud
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline_tests.providers.openstack.openstack_cloud import SDK_NOISE, TYPES, config, enumerated

pytestmark = SDK_NOISE


def test_the_fake_serves_the_simulators_view_unchanged() -> None:
    cloud = "region-one"
    sim = simulate_cloud(cloud, SimulatedCloud(provider="simulated", seed=7, resources=40, hours=12,
                                               start="2026-01-01T00:00:00Z", churn=2.0))
    reference = SimulatedAdapter(sim.platform, cloud)
    # Transitions are brief: look for instants that catch some, and add two ordinary ones.
    candidates = [sim.start + timedelta(minutes=m) for m in range(60, 12 * 60, 5)]
    busy = [at for at in candidates
            if any(item.in_transition for t in TYPES for item in reference.enumerate(t, at=at))][:3]
    instants = [*busy, sim.start + timedelta(hours=6), sim.end]
    checked = {t: 0 for t in TYPES}
    transitional = 0
    with FakeOpenStack(sim.platform, cloud=cloud, at=sim.start) as fake:
        with OpenStackAdapter(cloud, config(fake, page_size=7, deleted_margin=0)) as adapter:
            for at in instants:
                fake.set_time(at)
                for resource_type in TYPES:
                    ours = enumerated(list_type(adapter, resource_type, at=at))
                    truth = enumerated(list_type(reference, resource_type, at=at))
                    assert ours == truth, (resource_type, at)
                    checked[resource_type] += len(ours)
                    transitional += sum(item.in_transition for item in ours.values())
                since = at - timedelta(hours=3)
                deleted = adapter.deleted_since(since, at=at)
                expected = reference.deleted_since(since, at=at)
                assert deleted.available, deleted.reason
                assert sorted(deleted.items, key=lambda d: d.resource_id) == sorted(
                    expected.items, key=lambda d: d.resource_id)
                checked["deleted"] = checked.get("deleted", 0) + len(deleted.items)
    # the comparison was about something: every type and the deleted servers had items
    assert all(count > 0 for count in checked.values()), checked
    assert transitional > 0
