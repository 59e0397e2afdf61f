"""Nova's deleted-servers window survives outages, through the real openstacksdk and `tally sync`: it
starts at the last run whose instance listing enumerated and whose deleted listing answered; a
server nova answers 404 for is dated by the deleted listing; the default request timeout outlasts
nova's 60 s cell timeout."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tally_pipeline.config import OpenStackCloud
from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.services import queries
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
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


def lifecycle(database: str, rid: str) -> list[tuple]:
    store = open_store(database)
    try:
        return [(i["start"], i["end"]) for i in queries.lifecycle(store, CLOUD, "instance", rid) or []]
    finally:
        store.close()


def test_the_deleted_window_reaches_back_over_an_instance_listing_outage(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    first = NOW - timedelta(hours=3)
    keep = record("instance", "srv-keep", SMALL, "ACTIVE", minute=1)
    doomed = record("instance", "srv-doomed", SMALL, "ACTIVE", minute=2)
    volume = record("volume", "vol-1", {"gb": 1, "volume_type": None}, "available", minute=3)
    known(database, CLOUD, keep, doomed, volume, at=T0)
    # Both lost to the collector: srv-doomed's delete (0.33 h after the first run), and a server
    # created and deleted during the outage.
    doomed_gone = deleted_server("srv-doomed", created_minute=2, deleted_at=first + timedelta(minutes=20))
    ghost = replace(deleted_server("srv-ghost", created_minute=0, deleted_at=first + timedelta(hours=1)),
                    created_at=first + timedelta(minutes=30))
    with running_fake([keep, doomed, volume]) as fake:
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance", "volume"]})
        fake.set_time(first)
        code, run, out = tally_sync(config, CLOUD, at=first, run_key="tick:0")
        assert code == 0 and run["deleted_window_end"] is not None, out
        fake.view.records_by_type["instance"] = [keep]
        fake.view.deleted.extend([doomed_gone, ghost])
        for n, minutes in enumerate((10, 90, 170), start=1):  # nova is down: both its listings fail
            fake.set_time(first + timedelta(minutes=minutes))
            fake.inject("instance", "error", times=2)
            code, run, out = tally_sync(config, CLOUD, at=first + timedelta(minutes=minutes), run_key=f"tick:{n}")
            assert code == 0 and run["status"] == "partial", out  # the volumes were reconciled
            assert run["deleted_listing"].startswith("unavailable") and run["deleted_window_end"] is None, out
        fake.clear_faults()
        fake.set_time(NOW)
        fake.clear_requests()
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:back")
        asked = [r.query for r in fake.list_requests("instance") if r.query.get("deleted")]
    assert code == 0 and run["status"] == "succeeded", out
    assert asked[0]["changes-since"] == [(first - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")]
    assert lifecycle(database, "srv-doomed") == [(T0, doomed_gone.deleted_at)]  # 0.33 h, not 3.3 h
    assert lifecycle(database, "srv-ghost") == [(ghost.created_at, ghost.deleted_at)]  # billed after all
    assert run["recovered"] == 1 and run["deleted_window_end"] is not None


def test_a_server_gone_with_404_is_dated_by_the_deleted_listing(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    keep = record("instance", "srv-keep", SMALL, "ACTIVE", minute=1)
    gone = record("instance", "srv-gone", SMALL, "ACTIVE", minute=2)
    known(database, CLOUD, keep, gone, at=T0)
    when = NOW - timedelta(hours=2)
    with running_fake([keep], deleted=[deleted_server("srv-gone", created_minute=2, deleted_at=when)]) as fake:
        # The instance listing answers (one page); the deleted listing after it fails this run.
        fake.inject("instance", "error", after_pages=1, times=1)
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:404")
        shown = [r.status for r in fake.show_requests("instance")]
        by_uuid = [r.query for r in fake.list_requests("instance") if r.query.get("uuid")]
    assert code == 0 and run["deleted_listing"].startswith("unavailable"), out
    assert shown == [404] and by_uuid and by_uuid[0]["uuid"] == ["srv-gone"]
    assert lifecycle(database, "srv-gone") == [(T0, when)]  # nova's terminated_at, not the poll time
    assert query(database, "SELECT count(*) FROM events WHERE event_type = 'sync.delete'")[0][0] == 1


def test_the_default_request_timeout_outlasts_novas_cell_timeout() -> None:
    assert OpenStackCloud(provider="openstack").timeout > 60
    with running_fake([]) as fake:
        entry = fake.tally_cloud_entry()
        del entry["timeout"]  # the default, as a deployment gets it
        with OpenStackAdapter(CLOUD, OpenStackCloud(**entry)) as adapter:
            assert adapter.connection.session.timeout > 60  # what keystoneauth sends with each request
