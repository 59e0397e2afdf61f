"""The reconcile core (pure): one test per row of the action table and per deferral reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.core.platform import (
    Confirmation,
    DeletedListing,
    DeletedResource,
    Enumerated,
    Failed,
    ListedResource,
    SkippedResource,
)
from tally_pipeline.core.reconcile import (
    Plan,
    ProjectedResource,
    Settings,
    resolve,
    synthetic_event_id,
    synthetic_events,
)
from tally_pipeline.core.reconcile import plan as diff

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=1)
SETTINGS = Settings(settle_window=timedelta(seconds=300), mass_delete_guard=0.5)
S1, S2 = {"gb": 10}, {"gb": 20}


def listed(rid: str, *, size=S1, project="p1", status="available", transition=False, created=OLD, updated=None,
           rtype="volume") -> ListedResource:
    return ListedResource(rtype, rid, project, size, status, transition, created, updated or created)


def known(rid: str, *, status="live", size=S1, project="p1", last=OLD, rtype="volume") -> ProjectedResource:
    return ProjectedResource.at(rtype, rid, status, project if status != "unborn" else None,
                                size if status != "unborn" else None, last)


def only(items, rtype="volume"):
    return [Enumerated(rtype, list(items))]


def plan(*args, **kwargs) -> Plan:
    """The diff, with every delete by absence confirmed gone by the platform (404)."""
    result = diff(*args, **kwargs)
    resolve(result, {(c.resource_type, c.resource_id): Confirmation(c.resource_id, True, "404")
                     for c in result.pending}, SETTINGS)
    return result


def one(result):
    assert len(result.corrections) == 1, result
    return result.corrections[0]


def test_platform_has_it_projection_never_knew_it_creates_at_created_at() -> None:
    c = one(plan([], only([listed("v1", created=OLD)]), None, SETTINGS, NOW))
    assert (c.action, c.occurred_at, c.project_id, c.size) == ("create", OLD, "p1", S1)


def test_platform_has_it_projection_only_heard_updates_creates_at_created_at() -> None:
    c = one(plan([known("v1", status="unborn")], only([listed("v1", created=OLD)]), None, SETTINGS, NOW))
    assert (c.action, c.occurred_at) == ("create", OLD)


def test_platform_has_it_projection_holds_it_deleted_creates_at_poll_time() -> None:
    c = one(plan([known("v1", status="deleted")], only([listed("v1", created=OLD)]), None, SETTINGS, NOW))
    assert (c.action, c.occurred_at) == ("create", NOW)


def test_platform_lacks_it_projection_live_deletes_at_poll_time() -> None:
    c = one(plan([known("v1")], only([]), None, SETTINGS, NOW))
    assert (c.action, c.occurred_at, c.resource_id) == ("delete", NOW, "v1")


def test_delete_dated_at_the_platforms_deletion_time_when_it_has_one() -> None:
    gone = DeletedListing(True, [DeletedResource("instance", "i1", "p1", {}, OLD, NOW - timedelta(hours=2))])
    c = one(plan([known("i1", rtype="instance")], only([], "instance"), gone, SETTINGS, NOW))
    assert (c.action, c.occurred_at) == ("delete", NOW - timedelta(hours=2))


def test_other_size_or_project_updates_at_poll_time() -> None:
    c = one(plan([known("v1")], only([listed("v1", size=S2)]), None, SETTINGS, NOW))
    assert (c.action, c.occurred_at, c.size) == ("update", NOW, S2)
    c = one(plan([known("v1")], only([listed("v1", project="p2")]), None, SETTINGS, NOW))
    assert (c.action, c.project_id) == ("update", "p2")


def test_in_sync_means_nothing() -> None:
    result = plan([known("v1")], only([listed("v1")]), None, SETTINGS, NOW)
    assert result.corrections == [] and result.deferrals == []


@pytest.mark.parametrize(
    ("projected", "listing", "action"),
    [
        ([], [listed("v1", status="creating", transition=True)], "create"),
        ([known("v1")], [listed("v1", size=S2, status="extending", transition=True)], "update"),
    ],
)
def test_in_transition_is_deferred(projected, listing, action) -> None:
    result = plan(projected, only(listing), None, SETTINGS, NOW)
    assert result.corrections == []
    [d] = result.deferrals
    assert (d.reason, d.action) == ("in_transition", action)
    assert d.retry_after == NOW + timedelta(seconds=300)


@pytest.mark.parametrize(
    ("projected", "listing", "action", "dated"),
    [
        ([], [listed("v1", created=NOW - timedelta(seconds=60))], "create", NOW - timedelta(seconds=60)),
        ([known("v1", status="deleted", last=NOW - timedelta(seconds=30))], [listed("v1")], "create", NOW - timedelta(seconds=30)),
        ([known("v1")], [listed("v1", size=S2, updated=NOW - timedelta(seconds=10))], "update", NOW - timedelta(seconds=10)),
        ([known("v1", last=NOW - timedelta(seconds=100))], [listed("v1", size=S2)], "update", NOW - timedelta(seconds=100)),
        ([known("v1", last=NOW - timedelta(seconds=200))], [], "delete", NOW - timedelta(seconds=200)),
    ],
)
def test_inside_the_settle_window_is_deferred(projected, listing, action, dated) -> None:
    result = plan(projected, only(listing), None, SETTINGS, NOW)
    assert result.corrections == []
    [d] = result.deferrals
    assert (d.reason, d.action, d.retry_after) == ("settle_window", action, dated + timedelta(seconds=300))


def test_mass_delete_guard_holds_the_deletes_and_flags_the_type() -> None:
    projected = [known(f"v{i}") for i in range(40)]
    listing = [listed(f"v{i}") for i in range(15)]  # 25 of 40 (62 %) missing
    result = plan(projected, only(listing), None, SETTINGS, NOW)
    assert result.corrections == []
    assert len(result.deferrals) == 25 and {d.reason for d in result.deferrals} == {"mass_delete_guard"}
    assert result.types["volume"].guard_tripped
    assert all(d.retry_after is None for d in result.deferrals)


def test_mass_delete_guard_spares_small_clouds_and_can_be_switched_off() -> None:
    small = plan([known(f"v{i}") for i in range(19)], only([]), None, SETTINGS, NOW)
    assert small.count("delete") == 19
    off = plan([known(f"v{i}") for i in range(40)], only([]), None,
               Settings(timedelta(seconds=300), 1.0), NOW)
    assert off.count("delete") == 40
    below = plan([known(f"v{i}") for i in range(40)], only([listed(f"v{i}") for i in range(20)]), None, SETTINGS, NOW)
    assert below.count("delete") == 20  # exactly half: not more than the share


def test_failed_type_never_produces_a_delete_but_an_empty_enumeration_does() -> None:
    projected = [known("v1"), known("i1", rtype="instance")]
    result = plan(projected, [Failed("volume", "HTTP 500"), Enumerated("instance", [])], None, SETTINGS, NOW)
    assert [(c.action, c.resource_id) for c in result.corrections] == [("delete", "i1")]
    assert result.types["volume"].status == "failed" and result.types["volume"].reason == "HTTP 500"


def test_recovery_of_a_resource_created_and_deleted_between_runs() -> None:
    created, deleted = NOW - timedelta(hours=3), NOW - timedelta(hours=2)
    gone = DeletedListing(True, [DeletedResource("instance", "i9", "p3", {"vcpus": 2}, created, deleted)])
    result = plan([], only([], "instance"), gone, SETTINGS, NOW)
    assert [(c.action, c.occurred_at, c.recovered) for c in result.corrections] == [
        ("create", created, True), ("delete", deleted, True)]
    assert result.corrections[0].project_id == "p3"
    recent = DeletedListing(True, [DeletedResource("instance", "i9", "p3", {}, created, NOW - timedelta(seconds=30))])
    deferred = plan([], only([], "instance"), recent, SETTINGS, NOW)
    assert deferred.corrections == [] and deferred.deferrals[0].reason == "settle_window"
    already = plan([known("i9", status="deleted", rtype="instance")], only([], "instance"), gone, SETTINGS, NOW)
    assert already.corrections == []


def test_unavailable_deleted_listing_falls_back_to_poll_time() -> None:
    gone = DeletedListing(False, reason="deleted filter ignored (not admin)")
    c = one(plan([known("i1", rtype="instance")], only([], "instance"), gone, SETTINGS, NOW))
    assert c.occurred_at == NOW


def test_synthetic_ids_are_deterministic_per_run_key_and_verb() -> None:
    a = synthetic_event_id("c1", "tick:1", "volume", "v1", "create")
    assert a == synthetic_event_id("c1", "tick:1", "volume", "v1", "create")
    assert len({a, synthetic_event_id("c1", "tick:2", "volume", "v1", "create"),
                synthetic_event_id("c1", "tick:1", "volume", "v1", "delete"),
                synthetic_event_id("c2", "tick:1", "volume", "v1", "create")}) == 4
    events = synthetic_events("c1", "tick:1", plan([], only([listed("v1")]), None, SETTINGS, NOW).corrections)
    assert events[0]["event_type"] == "sync.create" and events[0]["source"] == "reconciliation"
    assert events[0]["event_id"] == a and events[0]["payload"]["size"] == S1


# --- confirmations, placeholders, skipped items, the guard held for the run -------------------


def test_a_delete_by_absence_waits_for_the_platform_and_is_deferred_when_not_confirmed() -> None:
    result = diff([known("v1"), known("v2")], only([]), None, SETTINGS, NOW)
    assert result.corrections == [] and [c.resource_id for c in result.pending] == ["v1", "v2"]
    resolve(result, {("volume", "v1"): Confirmation("v1", True, "404"),
                     ("volume", "v2"): Confirmation("v2", False, "still answers: status available")}, SETTINGS)
    assert [(c.action, c.resource_id, c.occurred_at) for c in result.corrections] == [("delete", "v1", NOW)]
    assert [(d.resource_id, d.reason, d.retry_after) for d in result.deferrals] == [("v2", "unconfirmed", None)]
    assert "still answers" in result.deferrals[0].detail and result.pending == []


def test_a_confirmation_that_dates_the_delete_dates_it_unless_inside_the_settle_window() -> None:
    long_ago, recent = NOW - timedelta(hours=2), NOW - timedelta(seconds=30)
    result = diff([known("v1"), known("v2")], only([]), None, SETTINGS, NOW)
    resolve(result, {("volume", "v1"): Confirmation("v1", True, "shows it DELETED", long_ago),
                     ("volume", "v2"): Confirmation("v2", True, "shows it DELETED", recent)}, SETTINGS)
    assert [(c.resource_id, c.occurred_at) for c in result.corrections] == [("v1", long_ago)]
    assert [(d.resource_id, d.reason) for d in result.deferrals] == [("v2", "settle_window")]


def test_an_unknown_placeholder_is_present_with_nothing_corrected() -> None:
    placeholder = ListedResource("volume", "v1", "p1", {}, "UNKNOWN", False, OLD, None, unknown=True)
    stranger = ListedResource("volume", "v2", "p1", {}, "UNKNOWN", False, OLD, None, unknown=True)
    result = diff([known("v1")], only([placeholder, stranger]), None, SETTINGS, NOW)
    assert result.corrections == [] and result.pending == []
    assert [(d.action, d.resource_id, d.reason) for d in result.deferrals] == [("create", "v2", "unconfirmed")]
    assert (result.types["volume"].status, result.types["volume"].unknown) == ("enumerated", 2)


def test_a_skipped_item_is_present_and_counted_by_reason() -> None:
    listing = [Enumerated("volume", [], skipped=[SkippedResource("volume", "v1", "no_project", "no project")])]
    result = diff([known("v1")], listing, None, SETTINGS, NOW)
    assert result.corrections == result.pending == result.deferrals == []
    assert result.types["volume"].skipped == {"no_project": 1}


def test_a_guard_held_earlier_in_the_run_holds_whatever_the_live_count_is_now() -> None:
    projected = [known(f"v{i}") for i in range(40)]
    listing = only([listed(f"v{i}") for i in range(1, 40)])  # one missing: far below the guard
    assert len(diff(projected, listing, None, SETTINGS, NOW).pending) == 1
    held = diff(projected, listing, None, SETTINGS, NOW, held={"volume": "29 of 30 missing earlier"})
    assert held.pending == [] and held.types["volume"].guard_tripped
    assert [(d.resource_id, d.reason, d.detail) for d in held.deferrals] == [
        ("v0", "mass_delete_guard", "29 of 30 missing earlier")]


def test_a_resource_listed_again_after_its_delete_restarts_at_the_platforms_restore_time() -> None:
    restored = NOW - timedelta(hours=1)
    c = one(plan([known("v1", status="deleted", last=OLD)], only([listed("v1", created=OLD, updated=restored)]),
                 None, SETTINGS, NOW))
    assert (c.action, c.occurred_at) == ("create", restored)


def test_each_type_is_dated_at_its_own_poll_time() -> None:
    later = NOW + timedelta(minutes=3)
    listings = [Enumerated("volume", []), Enumerated("image", [])]
    result = plan([known("v1"), known("i1", rtype="image")], listings, None, SETTINGS, NOW,
                  poll_times={"volume": NOW, "image": later})
    assert sorted((c.resource_type, c.occurred_at) for c in result.corrections) == [("image", later), ("volume", NOW)]


def _server(rid: str, status: str, **kw) -> ListedResource:
    return listed(rid, rtype="instance", status=status, **kw)


def _projected_server(rid: str, platform_status: str | None, **kw) -> ProjectedResource:
    p = known(rid, rtype="instance", **kw)
    return ProjectedResource(p.resource_type, p.resource_id, p.status, p.project_id, p.size, p.last_event_us,
                             platform_status)


def test_an_instance_whose_status_differs_is_updated_at_poll_time_with_the_api_status_lower_cased() -> None:
    c = one(plan([_projected_server("i1", "active")], only([_server("i1", "SHUTOFF")], "instance"), None,
                 SETTINGS, NOW))
    assert (c.action, c.occurred_at, c.status, c.size, c.why) == ("update", NOW, "shutoff", S1, "status differs")
    event = synthetic_events("c1", "run", [c])[0]
    assert event["event_type"] == "sync.update" and event["payload"]["status"] == "shutoff"


def test_an_instance_in_step_with_its_status_is_left_alone() -> None:
    result = plan([_projected_server("i1", "shutoff")], only([_server("i1", "SHUTOFF")], "instance"), None,
                  SETTINGS, NOW)
    assert result.corrections == [] and result.deferrals == []


def test_a_recent_status_change_waits_for_the_settle_window() -> None:
    result = plan([_projected_server("i1", "active")],
                  only([_server("i1", "SUSPENDED", updated=NOW - timedelta(seconds=30))], "instance"), None,
                  SETTINGS, NOW)
    assert result.corrections == []
    assert [(d.action, d.reason) for d in result.deferrals] == [("update", "settle_window")]


def test_a_volume_status_is_recorded_on_create_but_never_corrected() -> None:
    """Only instances' statuses are kept in step: a volume's changes with every attach."""
    created = one(plan([], only([listed("v1", status="in-use")]), None, SETTINGS, NOW))
    assert created.status == "in-use"
    stale = ProjectedResource("volume", "v2", "live", "p1", S1, known("v2").last_event_us, "available")
    assert plan([stale], only([listed("v2", status="in-use")]), None, SETTINGS, NOW).corrections == []
