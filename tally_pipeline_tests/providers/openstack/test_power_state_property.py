"""Property: whatever mix of power transitions reaches us through whichever path, usage per status
equals the simulator's ground truth.

An instance with 2 vCPUs is created active; hypothesis draws its power transitions (stop, start,
suspend, resume, pause, unpause, shelve-offload, unshelve: any order, any spacing) and, for each,
the path that tells us: the collector (nova's official versioned sample for the action, through the
collector's mapping and ingest) or reconciliation (the fake nova listing the server in its new
status, read through the real openstacksdk by ``tally sync`` at the instant of the change, with no
settle window, as a run that polls just then). The ground truth is the simulator's: a
``sim.truth.Lifecycle`` whose intervals carry the status. Per status, vCPU-hours are compared to
the micro-unit, billed by the ledger's SQL meters with every other status unbilled.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.usage import Interval as UsageInterval
from tally_pipeline.core.usage import cumulative_usage_micro
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.openstack.notifications import map_notifications
from tally_pipeline.providers.simulated.truth import GroundTruth, Interval, Lifecycle, Phase
from tally_pipeline.schemas import default_registry
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.usage import cumulative_usage
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.notification_samples import versioned_sample
from tally_pipeline_tests.providers.openstack.openstack_cloud import SDK_NOISE, T0, record
from tally_pipeline_tests.providers.openstack.sync_cli import tally_sync, write_config

pytestmark = SDK_NOISE
CLOUD, PROJECT = "region-one", "p-alpha"
SIZE = {"flavor_name": "m1.medium", "vcpus": 2, "ram_mb": 4096, "disk_gb": 40}
FLAVOR = {"nova_object.data": {"name": "m1.medium", "vcpus": 2, "memory_mb": 4096, "root_gb": 40}}
API = {"active": "ACTIVE", "shutoff": "SHUTOFF", "suspended": "SUSPENDED", "paused": "PAUSED",
       "shelved_offloaded": "SHELVED_OFFLOADED"}
# nova's action into each status (and out of each, back to active)
INTO = {"shutoff": "power_off", "suspended": "suspend", "paused": "pause", "shelved_offloaded": "shelve_offload"}
OUT_OF = {"shutoff": "power_on", "suspended": "resume", "paused": "unpause", "shelved_offloaded": "unshelve"}
STATUSES = tuple(API)


@st.composite
def transitions(draw):
    """[(minutes after the previous change, new status, path)], each a real change of status."""
    out, current = [], "active"
    for _ in range(draw(st.integers(1, 3))):
        if current == "active":
            status = draw(st.sampled_from(sorted(INTO)))
        else:
            status = "active"  # nova goes back to active before any other power action
        out.append((draw(st.integers(1, 600)), status, draw(st.sampled_from(["collector", "reconciliation"]))))
        current = status
    return out


def _oslo(when) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


def truth_of(server: str, changes: list) -> GroundTruth:
    """The simulator's ground truth of this history: one interval per status."""
    bounds = [(T0, "active")] + [(at, status) for at, status, _ in changes]
    intervals = tuple(Interval(at, bounds[i + 1][0] if i + 1 < len(bounds) else None, PROJECT, SIZE, status)
                      for i, (at, status) in enumerate(bounds))
    phases = tuple(Phase(at, API[status]) for at, status in bounds)
    lifecycle = Lifecycle(CLOUD, "instance", server, PROJECT, "vm", T0, None, intervals, phases)
    return GroundTruth([lifecycle], start=T0, end=bounds[-1][0] + timedelta(hours=1))


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=transitions())
def test_usage_per_status_equals_the_ground_truth_through_either_path(tmp_path, steps) -> None:
    server = f"srv-{uuid.uuid4().hex[:8]}"
    database = f"duckdb://{tmp_path / (server + '.duckdb')}"
    registry = default_registry()
    store = open_store(database, migrate=True)
    create = versioned_sample("instance-create-end", message_id=f"{server}-create", timestamp=_oslo(T0), uuid=server,
                              tenant_id=PROJECT, flavor=FLAVOR, created_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
                              launched_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ"))
    envelopes, _ = map_notifications([create], cloud=CLOUD)
    Ingestor(store, registry).ingest(envelopes, origin="collector")
    store.close()

    at, previous, changes = T0, "active", []
    for n, (minutes, status, path) in enumerate(steps):
        at = at + timedelta(minutes=minutes)
        changes.append((at, status, path))
        if path == "collector":
            action = INTO[status] if status != "active" else OUT_OF[previous]
            message = versioned_sample(f"instance-{action}-end", message_id=f"{server}-{n}", timestamp=_oslo(at),
                                       uuid=server, tenant_id=PROJECT, flavor=FLAVOR)
            envelopes, outcomes = map_notifications([message], cloud=CLOUD)
            assert outcomes.mapped == 1 and envelopes[0]["payload"]["status"] == status
            store = open_store(database)
            Ingestor(store, registry).ingest(envelopes, origin="collector")
            store.close()
        else:
            shown = dataclasses.replace(record("instance", server, SIZE, API[status]), updated_at=at)
            with FakeOpenStack(StaticView.of([shown]), at=at) as fake:
                config = write_config(tmp_path, fake, cloud=CLOUD, database=database, settle_window=0,
                                      cloud_options={"resource_types": ["instance"]})
                code, run, out = tally_sync(config, CLOUD, at=at, run_key=f"{server}-{n}")
            assert code == 0 and run["status"] == "succeeded" and run["updated"] == 1, out
        previous = status

    truth = truth_of(server, changes)
    through = truth.end
    store = open_store(database)
    try:
        projection.refresh(store)
        for status in STATUSES:
            only = registry.with_unbilled_statuses({"vcpu_hours": [s for s in STATUSES if s != status]})
            vcpu = next(m for m in only.meters() if m.name == "vcpu_hours")
            expected = cumulative_usage_micro(
                vcpu, [UsageInterval(iv.start, iv.end, dict(iv.size), platform_status=iv.status)
                       for _, iv in truth.intervals()], through)
            got = cumulative_usage(store, only, through).micro.get((CLOUD, PROJECT, "vcpu_hours"), 0)
            assert got == expected, (status, steps)
    finally:
        store.close()
