"""A bound on deferral, through the real openstacksdk and `tally sync`: a resource in transition for
longer than ``stuck_transition_hours`` is booked from its platform creation time with the size it
shows, counted ``stuck_transition`` in the run and in /metrics; a recent transition, and a build
that never ran, are still deferred."""

from __future__ import annotations

import pytest

from tally_pipeline.api.metrics import exposition, store_families
from tally_pipeline.core.alerts import AlertSettings
from tally_pipeline.services import alerts, queries
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import NOW, SDK_NOISE, SMALL, record, running_fake
from tally_pipeline_tests.providers.openstack.sync_cli import tally_sync, write_config

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "region-one"
HOUR = 60  # minutes; NOW is T0 + 48 h
VOL = {"gb": 40, "volume_type": "ssd"}


def test_resources_stuck_in_transition_are_booked_from_creation_and_counted(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    stuck = [
        # created at T0, its create event lost, PENDING_UPDATE since 47 h
        record("load_balancer", "lb-stuck", {"flavor_id": "lbf-large"}, "PENDING_UPDATE", updated_minute=1 * HOUR),
        record("volume", "vol-transfer", VOL, "awaiting-transfer", minute=1, updated_minute=18 * HOUR),
        record("volume", "vol-maintenance", VOL, "maintenance", minute=2, updated_minute=18 * HOUR),
        record("volume", "vol-reserved", VOL, "reserved", minute=3, updated_minute=18 * HOUR),
        record("instance", "srv-snapshot", SMALL, "ACTIVE", task_state="image_uploading", minute=4,
               updated_minute=18 * HOUR),
    ]
    waiting = [
        record("volume", "vol-fresh", VOL, "maintenance", minute=5, updated_minute=47 * HOUR),  # 1 h: not stuck
        record("instance", "srv-build", SMALL, "BUILD", task_state="spawning", minute=6, updated_minute=18 * HOUR),
        record("load_balancer", "lb-creating", {"flavor_id": None}, "PENDING_CREATE", minute=7,
               updated_minute=1 * HOUR),
    ]
    with running_fake([*stuck, *waiting]) as fake:
        fake.patch("srv-build", **{"OS-SRV-USG:launched_at": None})  # a build that never ran
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database, stuck_transition_hours=24,
                              cloud_options={"resource_types": ["instance", "volume", "load_balancer"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:stuck")
    assert code == 0 and run["status"] == "succeeded", out
    assert run["stuck_transition"] == 5 and run["created"] == 5
    assert {t: o["stuck_transition"] for t, o in run["per_type"].items()} == {
        "instance": 1, "volume": 3, "load_balancer": 1}
    assert run["deferrals_by_reason"] == {"in_transition": 3}
    store = open_store(database)
    try:
        for r in stuck:
            intervals = queries.lifecycle(store, CLOUD, r.resource_type, r.resource_id)
            assert [(i["start"], i["end"], i["size"]) for i in intervals] == [(r.created_at, None, r.size)], r
        for r in waiting:
            assert not queries.lifecycle(store, CLOUD, r.resource_type, r.resource_id), r
        deferred = sorted(row[0] for row in store.query(
            "SELECT resource_id FROM sync_deferrals WHERE reason = 'in_transition'"))
        assert deferred == ["lb-creating", "srv-build", "vol-fresh"]
        why = store.query("SELECT payload FROM events WHERE resource_id = 'lb-stuck'")[0][0]
        assert "stuck in transition: status PENDING_UPDATE" in str(why)
        condition = alerts.evaluate(store, [CLOUD], NOW, AlertSettings())["sync_errors"]
        lines = exposition(store_families(store, [CLOUD])).splitlines()
    finally:
        store.close()
    assert condition.firing and "5 resources booked as stuck in transition" in condition.message
    assert f'tally_sync_last_stuck_transition{{cloud="{CLOUD}"}} 5.0' in lines
