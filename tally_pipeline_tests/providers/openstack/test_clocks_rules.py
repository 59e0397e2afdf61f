"""One clock per fact: where billable life starts per type, how reconciliation dates a create and keeps
the request, and how an unknowable status is marked and reported (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.core import reconcile
from tally_pipeline.core.platform import (
    UNKNOWN_STATUS,
    DeletedListing,
    DeletedResource,
    Enumerated,
    ListedResource,
    life_start,
)
from tally_pipeline.core.registry import Meter
from tally_pipeline.core.usage import unknown_status_policy
from tally_pipeline.core.verbs import verb_of
from tally_pipeline.providers.openstack import TYPES
from tally_pipeline.providers.openstack.clocks import clocks_of, on_clock
from tally_pipeline.schemas import default_registry

NOW = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)
CREATED = NOW - timedelta(hours=5)
LAUNCHED = CREATED + timedelta(minutes=4, seconds=12)
SIZE = {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}
SETTINGS = reconcile.Settings(settle_window=timedelta(minutes=5), mass_delete_guard=1.0)


def test_every_packaged_type_has_its_clocks_and_only_nova_starts_later_than_the_request() -> None:
    assert set(TYPES) == set(default_registry().names)
    starts = {t: k.clocks.starts_at for t, k in TYPES.items()}
    assert {t: at for t, at in starts.items() if at != "created_at"} == {"instance": "launched_at"}
    assert clocks_of("instance").ends_at == ("terminated_at",)
    assert clocks_of("a_custom_type").starts_at == "created_at"  # a type from a schema directory


@pytest.mark.parametrize(("started", "expected"), [
    (LAUNCHED, LAUNCHED),
    (None, CREATED),  # a record without the field (or a type without one) says nothing better
    (CREATED - timedelta(seconds=3), CREATED),  # skew between services: never before the request
])
def test_life_starts_at_the_resources_own_start_else_at_the_creation(started, expected) -> None:
    assert life_start(CREATED, started) == expected


def test_nova_instants_are_taken_to_the_second_and_the_others_kept() -> None:
    at = NOW + timedelta(microseconds=402_117)
    assert on_clock("instance", at) == NOW
    assert on_clock("volume", at) == at


def _server(rid: str, started: datetime | None) -> ListedResource:
    return ListedResource("instance", rid, "p", SIZE, "ACTIVE", False, CREATED, CREATED, started_at=started)


def test_a_create_is_dated_at_the_launch_and_its_request_becomes_a_note() -> None:
    listing = Enumerated("instance", [_server("srv-late", LAUNCHED), _server("srv-at-once", CREATED)])
    result = reconcile.plan([], [listing], None, SETTINGS, NOW)
    by_id = {c.resource_id: c for c in result.corrections}
    assert (by_id["srv-late"].occurred_at, by_id["srv-late"].requested_at) == (LAUNCHED, CREATED)
    assert (by_id["srv-at-once"].occurred_at, by_id["srv-at-once"].requested_at) == (CREATED, None)
    events = reconcile.synthetic_events("c", "run", result.corrections)
    assert len(events) == 2  # one per correction: the run counts what it stored by these
    (note,) = reconcile.request_notes("c", "run", result.corrections)
    assert (note["event_type"], note["resource_id"], note["occurred_at"]) == (
        "sync.create.start", "srv-late", CREATED.isoformat())
    assert verb_of(note["event_type"]) == "note" and note["source"] == "reconciliation"
    assert note["event_id"] not in {e["event_id"] for e in events}
    again = reconcile.request_notes("c", "run", result.corrections)
    assert again == [note]  # a retried run writes the same note id


def test_a_resource_with_history_keeps_its_own_request_and_gets_no_second_note() -> None:
    """The collector stored nova's create.start (the projection holds it unborn), create.end was lost."""
    unborn = reconcile.ProjectedResource.at("instance", "srv-late", "unborn", None, None, CREATED)
    result = reconcile.plan([unborn], [Enumerated("instance", [_server("srv-late", LAUNCHED)])], None, SETTINGS, NOW)
    (create,) = result.corrections
    assert (create.occurred_at, create.requested_at) == (LAUNCHED, None)
    assert reconcile.request_notes("c", "run", result.corrections) == []


def test_a_launch_inside_the_settle_window_waits_even_when_the_request_was_earlier() -> None:
    launched = NOW - timedelta(minutes=2)
    listing = Enumerated("instance", [_server("srv-new", launched)])
    result = reconcile.plan([], [listing], None, SETTINGS, NOW)
    assert not result.corrections
    assert [(d.reason, d.retry_after) for d in result.deferrals] == [("settle_window", launched + SETTINGS.settle_window)]


def _deleted(rid: str, status: str | None) -> DeletedResource:
    return DeletedResource("instance", rid, "p", SIZE, CREATED, NOW - timedelta(hours=1), started_at=LAUNCHED,
                           status=status)


def test_a_recovered_lifecycle_runs_from_launch_with_the_shown_status_else_unknown() -> None:
    deleted = DeletedListing(True, [_deleted("srv-unknown", None), _deleted("srv-shown", "active")])
    result = reconcile.plan([], [Enumerated("instance", [])], deleted, SETTINGS, NOW)
    creates = {c.resource_id: c for c in result.corrections if c.action == "create"}
    assert {rid: (c.occurred_at, c.status, c.recovered) for rid, c in creates.items()} == {
        "srv-unknown": (LAUNCHED, UNKNOWN_STATUS, True), "srv-shown": (LAUNCHED, "active", True)}
    assert "status unknown" in creates["srv-unknown"].why
    events = {e["resource_id"]: e for e in reconcile.synthetic_events("c", "run", creates.values())}
    assert events["srv-unknown"]["payload"]["status"] == UNKNOWN_STATUS


def test_each_meter_says_whether_it_bills_unknown_and_how_many_intervals_are_unknown() -> None:
    meters = [Meter("instance_hours", "instance", "hour"),
              Meter("vcpu_hours", "instance", "vcpu-hour", unbilled_statuses=frozenset({"shutoff", UNKNOWN_STATUS})),
              Meter("volume_gb_hours", "volume", "gb-hour")]
    assert unknown_status_policy(meters, {"instance": 3}) == {
        "instance_hours": {"resource_type": "instance", "intervals": 3, "billed": True},
        "vcpu_hours": {"resource_type": "instance", "intervals": 3, "billed": False},
    }
    assert unknown_status_policy(meters, {}) == {}
