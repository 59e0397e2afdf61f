"""What the platform does not bill, we do not bill: through the real openstacksdk and `tally sync`, a
server that never launched (ERROR, ``OS-SRV-USG:launched_at`` null) is neither created nor
recovered from nova's deleted listing; one that ran and then went to ERROR keeps its lifecycle; a
load balancer that never became ACTIVE is not created; a volume in error is billed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tally_pipeline.services import queries
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    LARGE,
    NOW,
    SDK_NOISE,
    SMALL,
    T0,
    deleted_server,
    record,
    running_fake,
)
from tally_pipeline_tests.providers.openstack.sync_cli import known, query, tally_sync, write_config

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "region-one"
NO_LAUNCH = {"OS-SRV-USG:launched_at": None}


def lifecycles(database: str, rtype: str, rid: str) -> list[tuple]:
    store = open_store(database)
    try:
        return [(i["start"], i["end"]) for i in queries.lifecycle(store, CLOUD, rtype, rid) or []]
    finally:
        store.close()


def test_failed_builds_are_not_billed_and_a_server_that_ran_keeps_its_lifecycle(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    # Listed now: a NoValidHost failure left in ERROR for days, a server that ran then broke (its
    # create event lost, so reconciliation books it), one the collector knew that then broke.
    failed_build = record("instance", "srv-novalidhost", LARGE, "ERROR", minute=1)
    ran_then_broke = record("instance", "srv-ran-unknown", SMALL, "ERROR", minute=2)
    known_broke = record("instance", "srv-ran-known", SMALL, "ERROR", minute=3)
    lb_failed = record("load_balancer", "lb-never-active", {"flavor_id": "small"}, "ERROR", minute=4)
    vol_error = record("volume", "vol-error", {"gb": 50, "volume_type": "ssd"}, "error", minute=5)
    # Deleted since the last run, both events lost: a retry storm's failed builds, and a real server.
    storm = [deleted_server(f"srv-retry-{i}", created_minute=60 + i, deleted_at=NOW - timedelta(hours=1, minutes=i),
                            size=LARGE) for i in range(3)]
    real = deleted_server("srv-real", created_minute=70, deleted_at=NOW - timedelta(hours=2))
    known(database, CLOUD, known_broke, at=T0)
    with running_fake([failed_build, ran_then_broke, known_broke, lb_failed, vol_error], deleted=[*storm, real]) as fake:
        for rid in ("srv-novalidhost", *(s.resource_id for s in storm)):
            fake.patch(rid, **NO_LAUNCH)
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance", "volume", "load_balancer"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:builds")
    assert code == 0 and run["status"] == "succeeded", out
    created = {r for (r,) in query(database, "SELECT resource_id FROM events WHERE event_type = 'sync.create'")}
    assert created == {"srv-ran-unknown", "vol-error", "srv-real"}
    assert lifecycles(database, "instance", "srv-novalidhost") == []
    assert all(lifecycles(database, "instance", s.resource_id) == [] for s in storm)
    assert lifecycles(database, "instance", "srv-ran-known") == [(T0, None)]  # kept, still billed
    assert lifecycles(database, "instance", "srv-real") == [(real.created_at, real.deleted_at)]
    assert lifecycles(database, "load_balancer", "lb-never-active") == []
    assert lifecycles(database, "volume", "vol-error") == [(vol_error.created_at, None)]  # ceilometer bills it too
    assert run["per_type"]["instance"]["never_ran"] == {"never_launched": 4}  # 1 listed + 3 recovered
    assert run["per_type"]["load_balancer"]["never_ran"] == {"never_active": 1}
    assert run["recovered"] == 1
