"""Reconciliation runs on both stores: each action converges, re-runs are absorbed, runs never overlap."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.core import reconcile as rules
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.services import projection, queries
from tally_pipeline.services.reconciliation import SyncInProgress, projected_resources, run_sync, sync_runs

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=1)
CLOUD = "c1"


def rec(rid: str, *, gb: int = 10, project: str = "p1", status: str = "available", created=OLD,
        rtype: str = "volume", deleted_at=None) -> PlatformRecord:
    size = {"gb": gb, "volume_type": None} if rtype == "volume" else {
        "flavor_name": "m1", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}
    return PlatformRecord(rtype, rid, project, size, status, None, created, created, deleted_at, rid)


def collector_event(eid: str, rid: str, verb: str, when: datetime, gb: int = 10, project: str = "p1") -> dict:
    item = {"event_id": eid, "event_type": {"create": "volume.create.end", "delete": "volume.delete.end",
                                            "update": "volume.resize.end"}[verb],
            "cloud": CLOUD, "resource_type": "volume", "resource_id": rid, "occurred_at": when.isoformat(),
            "payload": {"size": {"gb": gb, "volume_type": None}} if verb != "delete" else {}}
    if verb == "create":
        item["project_id"] = project
    return item


def sync(store, ingestor, view, *, now=NOW, run_key="tick:1", guard=0.5, types=("volume", "instance")):
    adapter = SimulatedAdapter(view, CLOUD, resource_types=types)
    return run_sync(store, ingestor, CLOUD, adapter, settle_window=300, mass_delete_guard=guard, now=now, run_key=run_key)


def rediff(store, view, now=NOW, types=("volume", "instance")):
    from tally_pipeline.providers.interface import list_type

    adapter = SimulatedAdapter(view, CLOUD, resource_types=types)
    projection.refresh(store)
    listings = [list_type(adapter, t, at=now) for t in types]
    return rules.plan(projected_resources(store, CLOUD), listings, adapter.deleted_since(OLD, at=now),
                      rules.Settings(timedelta(seconds=300), 0.5), now)


def test_missed_create_is_booked_at_created_at_and_converges(store, ingestor) -> None:
    view = StaticView.of([rec("v1", created=OLD)])
    run = sync(store, ingestor, view)
    assert (run.status, run.created) == ("succeeded", 1)
    assert queries.lifecycle(store, CLOUD, "volume", "v1")[0]["start"] == OLD
    assert rediff(store, view).corrections == []


def test_resource_known_deleted_but_listed_starts_a_new_lifecycle_at_poll_time(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD - timedelta(days=1)),
                     collector_event("e2", "v1", "delete", OLD)], origin="t")
    view = StaticView.of([rec("v1", created=OLD - timedelta(days=1))])
    run = sync(store, ingestor, view)
    assert run.created == 1
    intervals = queries.lifecycle(store, CLOUD, "volume", "v1")
    assert [(i["start"], i["end"], i["lifecycle"]) for i in intervals] == [
        (OLD - timedelta(days=1), OLD, 0), (NOW, None, 1)]
    assert rediff(store, view).corrections == []


def test_missed_delete_is_booked_at_poll_time_and_converges(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD)], origin="t")
    view = StaticView.of([])
    run = sync(store, ingestor, view)
    assert run.deleted == 1
    assert queries.resource_state(store, CLOUD, "volume", "v1")["deleted_at"] == NOW
    assert rediff(store, view).corrections == []


def test_instance_delete_carries_the_real_deletion_time(store, ingestor) -> None:
    real = NOW - timedelta(hours=3)
    ingestor.ingest([{"event_id": "i-create", "event_type": "compute.instance.create.end", "cloud": CLOUD,
                      "resource_type": "instance", "resource_id": "i1", "project_id": "p1",
                      "occurred_at": (OLD - timedelta(hours=5)).isoformat(),
                      "payload": {"size": {"flavor_name": "m1", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}}}], origin="t")
    view = StaticView.of([], deleted=[rec("i1", rtype="instance", status="DELETED", created=OLD - timedelta(hours=5),
                                          deleted_at=real)])
    run = sync(store, ingestor, view)
    assert run.deleted == 1 and run.deleted_listing == "available"
    assert queries.resource_state(store, CLOUD, "instance", "i1")["deleted_at"] == real
    assert rediff(store, view).corrections == []


def test_instance_created_and_deleted_between_runs_is_recovered(store, ingestor) -> None:
    born, gone = NOW - timedelta(hours=4), NOW - timedelta(hours=2)
    view = StaticView.of([], deleted=[rec("i7", rtype="instance", status="DELETED", created=born, deleted_at=gone)])
    run = sync(store, ingestor, view)
    assert run.recovered == 1
    assert [(i["start"], i["end"]) for i in queries.lifecycle(store, CLOUD, "instance", "i7")] == [(born, gone)]
    assert rediff(store, view).corrections == []


def test_size_drift_is_updated_at_poll_time_and_converges(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD, gb=10)], origin="t")
    view = StaticView.of([rec("v1", gb=50)])
    run = sync(store, ingestor, view)
    assert run.updated == 1
    intervals = queries.lifecycle(store, CLOUD, "volume", "v1")
    assert [(i["start"], i["size"]["gb"]) for i in intervals] == [(OLD, 10), (NOW, 50)]
    assert rediff(store, view).corrections == []


def test_rerunning_with_the_same_run_key_writes_nothing_new(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD), collector_event("e2", "v2", "create", OLD)], origin="t")
    view = StaticView.of([rec("v1", gb=30), rec("v3")])
    first = sync(store, ingestor, view, run_key="tick:42")
    assert (first.created, first.updated, first.deleted) == (1, 1, 1)
    events_before = store.event_count()
    # A retried tick: same key, same poll time; the projection already holds the corrections.
    again = sync(store, ingestor, view, run_key="tick:42")
    assert (again.created, again.updated, again.deleted) == (0, 0, 0)
    assert store.event_count() == events_before
    # The same run key on a projection that has not seen the corrections (a lost response) stores nothing new either.
    ids = [r[0] for r in store.query("SELECT event_id FROM events WHERE source = 'reconciliation' ORDER BY event_id")]
    expected = sorted(rules.synthetic_event_id(CLOUD, "tick:42", "volume", rid, action)
                      for rid, action in (("v1", "update"), ("v2", "delete"), ("v3", "create")))
    assert ids == expected


def test_failed_type_never_deletes_and_marks_the_run_partial(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD)], origin="t")
    view = StaticView.of([])
    view.failures["volume"] = "timeout"
    run = sync(store, ingestor, view)
    assert run.status == "partial" and run.deleted == 0
    assert run.per_type["volume"].status == "failed" and "TimeoutError" in run.per_type["volume"].reason
    assert queries.resource_state(store, CLOUD, "volume", "v1")["status"] == "live"
    view.failures["volume"] = "error"
    assert sync(store, ingestor, view, run_key="tick:2").deleted == 0
    view.failures.clear()
    assert sync(store, ingestor, view, run_key="tick:3").deleted == 1  # enumerated zero items: a real delete


def test_every_type_failing_is_a_failed_run(store, ingestor) -> None:
    view = StaticView.of([])
    view.failures.update(volume="error", instance="timeout")
    run = sync(store, ingestor, view)
    assert run.status == "failed" and "volume" in run.error and "instance" in run.error


def test_one_cause_failing_every_type_is_said_once(store, ingestor) -> None:
    """Keystone down fails every listing for the same reason: the run's error names it once, with its types."""
    from tally_pipeline.commands.sync import run_lines

    view = StaticView.of([])
    view.failures.update(volume="unauthorized", instance="unauthorized")
    run = sync(store, ingestor, view)
    reason = run.per_type["volume"].reason
    assert reason and reason == run.per_type["instance"].reason
    assert run.error == f"instance, volume: {reason}"
    view.failures.update(instance="timeout")
    run = sync(store, ingestor, view, run_key="tick:2")
    assert run.error == f"instance: {run.per_type['instance'].reason}; volume: {reason}"
    view.failures.update(instance="unauthorized")
    lines = run_lines(sync(store, ingestor, view, run_key="tick:3"))
    assert sum(reason in line for line in lines) == 1
    not_listed = [line.split(maxsplit=3) for line in lines if "NOT LISTED" in line]
    first, second = not_listed
    assert first[3] == reason and second[3] == f"the same error as {first[0]}"


def test_deferrals_are_recorded_with_reason_and_retry_time(store, ingestor) -> None:
    fresh = NOW - timedelta(seconds=60)
    view = StaticView.of([rec("v-new", created=fresh), rec("v-busy", status="creating")])
    run = sync(store, ingestor, view)
    assert run.deferrals_by_reason() == {"in_transition": 1, "settle_window": 1}
    rows = store.query("SELECT resource_id, reason, retry_after FROM sync_deferrals ORDER BY resource_id")
    assert [(r[0], r[1]) for r in rows] == [("v-busy", "in_transition"), ("v-new", "settle_window")]
    assert rows[1][2] == fresh + timedelta(seconds=300)
    later = sync(store, ingestor, StaticView.of([rec("v-new", created=fresh), rec("v-busy")]),
                 now=NOW + timedelta(minutes=10), run_key="tick:2")
    assert later.created == 2 and later.deferred == 0


def test_mass_delete_guard_holds_deletes_and_raises_drift(store, ingestor) -> None:
    ingestor.ingest([collector_event(f"e{i}", f"v{i}", "create", OLD) for i in range(30)], origin="t")
    run = sync(store, ingestor, StaticView.of([rec("v0")]))
    assert run.deleted == 0 and run.deferrals_by_reason() == {"mass_delete_guard": 29}
    assert run.per_type["volume"].guard_tripped and run.drift > 0.9
    assert queries.inventory(store, cloud=CLOUD, limit=100).resources.__len__() == 30


def test_a_real_delete_arriving_after_a_delete_by_absence_ends_at_the_real_time(store, ingestor) -> None:
    ingestor.ingest([collector_event("e1", "v1", "create", OLD)], origin="t")
    sync(store, ingestor, StaticView.of([]))
    assert queries.resource_state(store, CLOUD, "volume", "v1")["deleted_at"] == NOW
    real = NOW - timedelta(minutes=7)
    ingestor.ingest([collector_event("e2", "v1", "delete", real)], origin="t")
    assert queries.resource_state(store, CLOUD, "volume", "v1")["deleted_at"] == real
    assert [(i["start"], i["end"]) for i in queries.lifecycle(store, CLOUD, "volume", "v1")] == [(OLD, real)]


class GatedView(StaticView):
    """Holds the first listing until released, so a second run can be started while the first is inside."""

    def __init__(self):
        super().__init__({"volume": [], "instance": []})
        self.entered = threading.Event()
        self.release = threading.Event()

    def records(self, cloud, resource_type, at):
        if resource_type == "volume" and not self.release.is_set():
            self.entered.set()
            assert self.release.wait(timeout=30)
        return super().records(cloud, resource_type, at)


def test_two_runs_of_one_cloud_never_overlap(store, ingestor) -> None:
    view = GatedView()
    results: dict = {}
    first = threading.Thread(target=lambda: results.setdefault("first", sync(store, ingestor, view)))
    first.start()
    assert view.entered.wait(timeout=30)
    with pytest.raises(SyncInProgress, match="already running"):
        sync(store, ingestor, StaticView.of([]), run_key="tick:other")
    view.release.set()
    first.join(timeout=60)
    assert results["first"].status == "succeeded"
    assert sync(store, ingestor, StaticView.of([]), run_key="tick:after").status == "succeeded"  # lock released
    statuses = [r["status"] for r in sync_runs(store, cloud=CLOUD)]
    assert statuses == ["succeeded", "succeeded"]
