"""Corrections dated by the platform's own record, through the real openstacksdk, the fake nova's instance
actions and `tally sync`: a status changed while the collector was deaf is dated at nova's action (else at
the server's ``updated``, else at the poll), a server first seen after a resize gets its past from its
actions and the older flavor its kept history gives, and a resource created now keeps the updates its
history held before (item 5 of #35) — folded alike by the Python fold and both SQL folds."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from tally_pipeline.services import projection, queries
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    LARGE,
    NOW,
    SDK_NOISE,
    SMALL,
    T0,
    record,
    running_fake,
)
from tally_pipeline_tests.providers.openstack.sync_cli import ingest, known, query, tally_sync, write_config

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "region-one"


@pytest.fixture
def database(store_url: str) -> str:
    """A migrated database on each backend (`tally sync` migrates DuckDB itself, not Postgres)."""
    open_store(store_url, migrate=True).close()
    return store_url


def _intervals(database: str, rtype: str, rid: str) -> list[tuple]:
    store = open_store(database)
    try:
        rows = queries.lifecycle(store, CLOUD, rtype, rid) or []
    finally:
        store.close()
    return [(i["start"], i["end"], i["size"], i["platform_status"]) for i in rows]


def test_a_status_changed_while_deaf_is_dated_by_the_action_then_updated_then_the_poll(database: str, tmp_path) -> None:
    seen = T0 + timedelta(minutes=1)
    stop_at = T0 + timedelta(hours=7, minutes=3, seconds=12)
    stop_done = stop_at + timedelta(seconds=4)
    # stopped by an action nova recorded; stopped with no action (updated says when); and one whose
    # last change predates what the projection last heard (only the poll is left)
    stopped = record("instance", "srv-stopped", SMALL, "SHUTOFF", minute=1, updated_minute=7 * 60 + 4)
    quiet = record("instance", "srv-quiet", SMALL, "SHUTOFF", minute=1, updated_minute=9 * 60)
    stale = record("instance", "srv-stale", SMALL, "SHUTOFF", minute=1, updated_minute=60)
    in_sync = record("instance", "srv-in-sync", SMALL, "ACTIVE", minute=1)
    for r in (stopped, quiet, in_sync):
        known(database, CLOUD, dataclasses.replace(r, status="ACTIVE"), at=seen)
    known(database, CLOUD, dataclasses.replace(stale, status="ACTIVE"), at=T0 + timedelta(hours=2))
    with running_fake([stopped, quiet, stale, in_sync]) as fake:
        fake.act("srv-stopped", "stop", at=stop_at, finish=stop_done)
        fake.act("srv-stopped", "stop", at=T0 + timedelta(hours=8), finish=T0 + timedelta(hours=8, seconds=2),
                 failed=True)  # a failed action explains nothing
        fake.act("srv-stale", "stop", at=T0 + timedelta(minutes=50), finish=T0 + timedelta(minutes=51))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:deaf")
        asked = {r.path.split("/servers/")[1].split("/")[0] for r in fake.action_requests()}
    assert code == 0 and run["status"] == "succeeded" and run["updated"] == 3, out
    poll = NOW  # the fake answers as of NOW: its Date is the poll time
    assert _intervals(database, "instance", "srv-stopped") == [
        (seen, stop_done, SMALL, "active"), (stop_done, None, SMALL, "shutoff")]
    assert _intervals(database, "instance", "srv-quiet") == [
        (seen, quiet.updated_at, SMALL, "active"), (quiet.updated_at, None, SMALL, "shutoff")]
    # its stop action is older than the projection's last event: it cannot be the change the listing shows
    assert _intervals(database, "instance", "srv-stale")[-1] == (poll, None, SMALL, "shutoff")
    assert run["per_type"]["instance"]["dated_by"] == {"action": 1, "updated": 1, "poll": 1}
    # only the servers that differ are asked about, each once
    assert asked == {"srv-stopped", "srv-quiet", "srv-stale"}
    assert run["per_type"]["instance"]["actions_asked"] == 3
    (why,) = query(database, "SELECT payload FROM events WHERE event_type = 'sync.update' "
                             "AND resource_id = 'srv-stopped'")
    assert "dated by nova's stop action" in str(why[0])
    # /metrics says it too, every source named
    from tally_pipeline.api.metrics import store_families

    store = open_store(database)
    try:
        dated = {s.labels["source"]: s.value for f in store_families(store, [CLOUD])
                 if f.name == "tally_sync_last_corrections_dated" for s in f.samples}
    finally:
        store.close()
    assert dated == {"action": 1, "updated": 1, "poll": 1}


def test_a_server_resized_and_stopped_before_its_first_sync_gets_its_past_from_its_actions(database: str, tmp_path) -> None:
    created = T0 + timedelta(minutes=1)
    built = created + timedelta(seconds=40)
    resized = T0 + timedelta(hours=3)
    resized_done = resized + timedelta(seconds=25)
    confirmed = resized + timedelta(minutes=2)
    stopped = T0 + timedelta(hours=5)
    # nova's finish_resize stamps launched_at again: the listing's launch is the resize, not the build
    resized_server = dataclasses.replace(record("instance", "srv-resized", LARGE, "SHUTOFF", minute=1,
                                                updated_minute=5 * 60), launched_at=resized_done)
    unknown_before = dataclasses.replace(record("instance", "srv-no-trace", LARGE, "ACTIVE", minute=1,
                                                updated_minute=4 * 60), launched_at=resized_done)
    # the collector heard the resize's preparation (on the old flavor), not the create: kept, unborn
    ingest(database, [{
        "event_id": "prep-1", "event_type": "compute.instance.resize.prep.end", "cloud": CLOUD,
        "resource_type": "instance", "resource_id": "srv-resized", "project_id": "p-alpha",
        "occurred_at": (resized - timedelta(seconds=5)).isoformat(), "payload": {"size": SMALL, "status": "active"}}])
    with running_fake([resized_server, unknown_before]) as fake:
        for rid in ("srv-resized", "srv-no-trace"):
            fake.act(rid, "create", at=created, finish=built)
            fake.act(rid, "resize", at=resized, finish=resized_done)
            fake.act(rid, "confirmResize", at=confirmed, finish=confirmed + timedelta(seconds=3))
        fake.act("srv-resized", "stop", at=stopped, finish=stopped + timedelta(seconds=6))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:past")
    assert code == 0 and run["status"] == "succeeded" and run["created"] == 2, out
    assert _intervals(database, "instance", "srv-resized") == [
        (built, resized_done, SMALL, "active"),
        (resized_done, confirmed + timedelta(seconds=3), LARGE, "verify_resize"),
        (confirmed + timedelta(seconds=3), stopped + timedelta(seconds=6), LARGE, "active"),
        (stopped + timedelta(seconds=6), None, LARGE, "shutoff"),
    ]
    # nothing says its flavor before the resize: the listed one, marked and counted
    assert _intervals(database, "instance", "srv-no-trace")[0][:3] == (built, resized_done, LARGE)
    assert run["per_type"]["instance"]["size_unknown"] == 1
    assert run["per_type"]["instance"]["dated_by"] == {"action": 5}
    (flag,) = query(database, "SELECT payload FROM events WHERE event_type = 'sync.create' "
                              "AND resource_id = 'srv-no-trace'")
    assert "size_unknown" in str(flag[0])
    # the same history rebuilt by the SQL fold folds to the same intervals
    before = _intervals(database, "instance", "srv-resized")
    store = open_store(database)
    try:
        projection.rebuild(store)
    finally:
        store.close()
    assert _intervals(database, "instance", "srv-resized") == before


def test_a_server_stopped_in_its_launch_second_is_dated_by_the_stop(database: str, tmp_path) -> None:
    """Nova keeps its times to the whole second: a server stopped as soon as it showed ACTIVE has its stop
    recorded in its launch's second, and its build finished after the stop (the compute host ends the build's
    event after the server shows ACTIVE). Its past is still the stop action's: shutoff from the launch (the
    active second is of length 0, not kept), never the poll."""
    launched = T0 + timedelta(hours=2, microseconds=300_000)
    soon = dataclasses.replace(record("instance", "srv-soon", SMALL, "SHUTOFF", minute=1, updated_minute=2 * 60 + 1),
                               launched_at=launched)
    later = dataclasses.replace(record("instance", "srv-later", SMALL, "SHUTOFF", minute=1, updated_minute=2 * 60 + 1),
                                launched_at=launched)
    with running_fake([soon, later]) as fake:
        for rid, stop_at in (("srv-soon", launched + timedelta(milliseconds=200)),
                             ("srv-later", launched + timedelta(seconds=1))):
            fake.act(rid, "create", at=soon.created_at, finish=stop_at + timedelta(seconds=1, milliseconds=200))
            fake.act(rid, "stop", at=stop_at, finish=stop_at + timedelta(milliseconds=300))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:soon")
    assert code == 0 and run["status"] == "succeeded" and run["created"] == 2, out
    second = launched.replace(microsecond=0)
    assert _intervals(database, "instance", "srv-soon") == [(second, None, SMALL, "shutoff")]
    assert _intervals(database, "instance", "srv-later") == [
        (second, second + timedelta(seconds=1), SMALL, "active"),
        (second + timedelta(seconds=1), None, SMALL, "shutoff")]
    assert run["per_type"]["instance"]["dated_by"] == {"action": 2}


def test_a_resource_created_now_keeps_the_sizes_its_history_held_before(database: str, tmp_path) -> None:
    """A volume whose create was lost: a kept transfer (no resize) says its size before it; a kept
    extend says only the new size, so the time before it is marked unknown, never dropped."""
    transferred = T0 + timedelta(hours=2)
    extended = T0 + timedelta(hours=4)
    vol_known = record("volume", "vol-transfer", {"gb": 3, "volume_type": "ssd"}, "available", minute=1)
    vol_unknown = record("volume", "vol-extend", {"gb": 3, "volume_type": "ssd"}, "available", minute=1)
    ingest(database, [
        {"event_id": "tr-1", "event_type": "volume.transfer.accept.end", "cloud": CLOUD, "resource_type": "volume",
         "resource_id": "vol-transfer", "project_id": "p-alpha", "occurred_at": transferred.isoformat(),
         "payload": {"size": {"gb": 2, "volume_type": "ssd"}}},
        {"event_id": "ex-1", "event_type": "volume.resize.end", "cloud": CLOUD, "resource_type": "volume",
         "resource_id": "vol-extend", "project_id": "p-alpha", "occurred_at": extended.isoformat(),
         "payload": {"size": {"gb": 3, "volume_type": "ssd"}}},
    ])
    with running_fake([vol_known, vol_unknown]) as fake:
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["volume"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:kept")
    assert code == 0 and run["status"] == "succeeded" and run["created"] == 2, out
    start = vol_known.created_at
    # 2 GB from the creation (the transfer kept it), 3 GB from the poll that saw the lost extend
    assert [(s, e, size["gb"]) for s, e, size, _ in _intervals(database, "volume", "vol-transfer")] == [
        (start, NOW, 2), (NOW, None, 3)]
    # the kept extend's size from the creation, the life before it marked unknown
    assert [(s, e, size["gb"]) for s, e, size, _ in _intervals(database, "volume", "vol-extend")] == [(start, None, 3)]
    assert run["per_type"]["volume"]["size_unknown"] == 1
    for rid in ("vol-transfer", "vol-extend"):
        before = _intervals(database, "volume", rid)
        store = open_store(database)
        try:
            projection.rebuild(store)
        finally:
            store.close()
        assert _intervals(database, "volume", rid) == before


def test_the_adapter_reads_nova_instance_actions_through_openstacksdk() -> None:
    """The fake answers ``os-instance-actions`` as nova 2.84 does (newest first; each action's events with
    start and finish times); the adapter reads the relevant ones' events, skips a server nova does not know,
    and another project's server is a 404 to a member, as nova's policy makes it."""
    from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
    from tally_pipeline_tests.providers.openstack.openstack_cloud import config

    server = record("instance", "srv-acts", SMALL, "SHUTOFF", minute=1)
    stop_at = T0 + timedelta(hours=1)
    with running_fake([server]) as fake:
        stop_id = fake.act("srv-acts", "stop", at=stop_at, finish=stop_at + timedelta(seconds=5))
        fake.act("srv-acts", "lock", at=stop_at + timedelta(minutes=1), events=())
        with OpenStackAdapter(CLOUD, config(fake)) as adapter:
            found = adapter.instance_actions(["srv-acts", "srv-unknown"])
            listed = adapter.connection.compute.get("/servers/srv-acts/os-instance-actions").json()
        fake.add_user("member", "pw", project_name="other")
        with OpenStackAdapter(CLOUD, config(fake, user="member")) as member:
            assert member.instance_actions(["srv-acts"]) == {}
        detail_requests = [r for r in fake.action_requests() if r.path.count("/") > 5]
    assert set(found) == {"srv-acts"}
    by_name = {a.action: a for a in found["srv-acts"]}
    assert set(by_name) == {"create", "stop", "lock"}
    stop = by_name["stop"]
    assert stop.request_id == stop_id and stop.start_time == stop_at and not stop.failed
    assert [(e.name, e.finish_time, e.result) for e in stop.events] == [
        ("compute_stop_instance", stop_at + timedelta(seconds=5), "Success")]
    assert by_name["lock"].events == ()  # not a status or flavor change: its events are not read
    assert [a["action"] for a in listed["instanceActions"]] == ["lock", "stop", "create"]  # newest first
    assert all("events" not in a and a["start_time"].count("+") == 0 for a in listed["instanceActions"])
    assert len(detail_requests) == 2  # create and stop, the admin's; nothing for the member's 404
