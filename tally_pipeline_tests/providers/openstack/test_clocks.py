"""One clock per fact, through the real openstacksdk, the fake nova and `tally sync`: a server is billed
from its ``launched_at`` (nova's usage starts there), its request kept in the history as a note; a
server recovered from nova's deleted listing runs from ``launched_at`` to ``terminated_at``, its
status marked ``unknown`` since the listing shows only the deletion; a delete found by the sync
lands at the very instant the collector dates the same delete at."""

from __future__ import annotations

import copy
import dataclasses
from datetime import timedelta

import pytest

from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline.providers.openstack.notifications import map_notification
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.services import queries
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.notification_samples import sample
from tally_pipeline_tests.providers.openstack.openstack_cloud import NOW, SDK_NOISE, SMALL, T0, record, running_fake
from tally_pipeline_tests.providers.openstack.sync_cli import known, query, tally_sync, write_config

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "region-one"


def _read(database: str, what, rid: str):
    store = open_store(database)
    try:
        return what(store, CLOUD, "instance", rid) or []
    finally:
        store.close()


def _intervals(database: str, rid: str) -> list[tuple]:
    return [(i["start"], i["end"], i["platform_status"]) for i in _read(database, queries.lifecycle, rid)]


def _deleted(rid: str, *, created, launched, terminated) -> PlatformRecord:
    return PlatformRecord("instance", rid, "p-alpha", dict(SMALL), "DELETED", None, created, terminated,
                          deleted_at=terminated, launched_at=launched)


def test_a_server_is_billed_from_its_launch_and_its_request_stays_in_the_history(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    created = T0 + timedelta(minutes=1)
    # scheduling and the image download took 3 minutes; nova writes launched_at with microseconds
    launched = created + timedelta(minutes=3, microseconds=640_211)
    slow = dataclasses.replace(record("instance", "srv-slow", SMALL, "ACTIVE", minute=1), launched_at=launched)
    with running_fake([slow]) as fake:
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:launch")
    assert code == 0 and run["status"] == "succeeded" and run["created"] == 1, out
    start = launched.replace(microsecond=0)  # nova's instants to the second, on every path
    assert _intervals(database, "srv-slow") == [(start, None, "active")]
    history = [(e["event_type"], e["verb"], e["occurred_at"]) for e in _read(database, queries.history, "srv-slow")]
    assert history == [("sync.create.start", "note", created), ("sync.create", "create", start)]
    assert run["per_type"]["instance"]["corrections"] == 1  # the note is history, not a correction


def test_a_recovered_server_runs_from_launch_to_termination_with_its_status_marked_unknown(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    created = NOW - timedelta(hours=6)
    launched = created + timedelta(seconds=95, microseconds=120_000)
    terminated = created + timedelta(hours=3, microseconds=402_117)
    ran = _deleted("srv-ran", created=created, launched=launched, terminated=terminated)
    # deleted while still building: nova stamps launched_at a second before terminated_at
    b_created = NOW - timedelta(hours=2)
    building = _deleted("srv-building", created=b_created, launched=b_created + timedelta(seconds=40),
                        terminated=b_created + timedelta(seconds=41, microseconds=5))
    with running_fake([], deleted=[ran, building]) as fake:
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:recover")
    assert code == 0 and run["recovered"] == 2, out
    assert _intervals(database, "srv-ran") == [
        (launched.replace(microsecond=0), terminated.replace(microsecond=0), "unknown")]
    assert _intervals(database, "srv-building") == [
        (b_created + timedelta(seconds=40), b_created + timedelta(seconds=41), "unknown")]  # one second, as nova bills
    (why,) = query(database, "SELECT payload FROM events WHERE event_type = 'sync.create' AND resource_id = 'srv-ran'")
    assert "status unknown" in str(why[0])


def test_the_sync_dates_a_delete_at_the_instant_the_collector_dates_it(tmp_path) -> None:
    """Nova stamps terminated_at, then deleted_at a second later: both paths take terminated_at, to the second."""
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    created = T0 + timedelta(minutes=5)
    terminated = T0 + timedelta(hours=30, microseconds=402_117)
    gone = _deleted("srv-gone", created=created, launched=created, terminated=terminated)
    known(database, CLOUD, record("instance", "srv-gone", SMALL, "ACTIVE", minute=5), at=created)
    with running_fake([], deleted=[gone]) as fake:
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:delete")
    assert code == 0 and run["deleted"] == 1, out
    (synced,) = query(database, "SELECT occurred_at FROM events WHERE event_type = 'sync.delete'")
    message = copy.deepcopy(sample("nova/legacy/compute.instance.delete.start.json"))
    message["payload"].update(instance_id="srv-gone", state="deleted",
                              terminated_at=terminated.strftime("%Y-%m-%dT%H:%M:%S.%f"),
                              deleted_at=(terminated + timedelta(seconds=1, microseconds=409_000))
                              .strftime("%Y-%m-%dT%H:%M:%S.%f"))
    message.update(event_type="compute.instance.delete.end", message_id="m-delete",
                   timestamp=(terminated + timedelta(seconds=2)).strftime("%Y-%m-%d %H:%M:%S.%f"))
    collected = map_notification(message, cloud=CLOUD)
    assert isinstance(collected, dict)
    assert parse_rfc3339(collected["occurred_at"]) == synced[0] == terminated.replace(microsecond=0)
    assert _intervals(database, "srv-gone") == [(created, terminated.replace(microsecond=0), "active")]
