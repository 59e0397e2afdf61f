"""TallyServiceEventsSilent: the sync keeps finding a type's changes while the collector stores none of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.core.alerts import AlertSettings, Condition, LatestCorrections, TypeActivity, service_events_silent
from tally_pipeline.core.type_summary import TypeSummary
from tally_pipeline.providers.openstack import SERVICE_OF_TYPE, SILENT_SERVICE_HINT

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PREVIOUS = NOW - timedelta(minutes=10)
S = AlertSettings()  # drift_warmup_syncs = 2



def silent(latest: list[LatestCorrections], activity: list[TypeActivity], clouds: set[str], s: AlertSettings
           ) -> Condition:
    """The condition as the alert service evaluates it, with OpenStack's services and hint."""
    return service_events_silent(latest, activity, clouds, s, SERVICE_OF_TYPE, SILENT_SERVICE_HINT)

def sync(cloud: str = "c1", nth: int = 3, previous: datetime | None = PREVIOUS, **corrections: int) -> LatestCorrections:
    return LatestCorrections(cloud, nth, NOW, previous, corrections or {"volume": 2, "instance": 0})


def seen(cloud: str = "c1", rtype: str = "instance", at: datetime = NOW - timedelta(minutes=1)) -> TypeActivity:
    return TypeActivity(cloud, rtype, at)


def test_fires_for_a_corrected_type_the_collector_never_carried() -> None:
    condition = silent([sync()], [seen()], {"c1"}, S)
    assert condition.firing and condition.alert == "TallyServiceEventsSilent" and condition.clouds == ("c1",)
    assert condition.details["c1"]["volume"]["corrections"] == 2
    assert condition.details["c1"]["volume"]["service"] == "cinder"
    assert "c1 volume: the latest sync corrected 2, but no volume event from cinder ever reached" in condition.message
    assert "collector.service_exchanges" in condition.message and "'openstack'" in condition.message
    assert "instance" not in condition.details["c1"]  # no correction: nothing to say about instances


@pytest.mark.parametrize(("rtype", "service"), [("instance", "nova"), ("volume", "cinder"), ("floating_ip", "neutron"),
                                               ("image", "glance"), ("load_balancer", "octavia")])
def test_the_message_names_the_service_that_carries_the_type(rtype, service) -> None:
    other = "image" if rtype != "image" else "volume"
    condition = silent([sync(**{rtype: 1})], [seen(rtype=other)], {"c1"}, S)
    assert condition.firing and f"no {rtype} event from {service} " in condition.message


@pytest.mark.parametrize(("last", "firing"), [
    (PREVIOUS + timedelta(seconds=1), False),  # the collector carries volumes: one was lost, no silence
    (PREVIOUS, False),
    (PREVIOUS - timedelta(seconds=1), True),  # nothing since the sync before the one that corrected
])
def test_silent_means_no_event_of_the_type_since_the_sync_before(last, firing) -> None:
    condition = silent([sync()], [seen(), seen(rtype="volume", at=last)], {"c1"}, S)
    assert condition.firing is firing
    if firing:
        assert f"since {PREVIOUS.isoformat()} (last {last.isoformat()})" in condition.message


def test_warm_up_syncs_are_not_judged() -> None:
    warming = silent([sync(nth=2)], [seen()], {"c1"}, S)
    assert not warming.firing and "warming up (first syncs not judged): c1" in warming.message
    assert silent([sync(nth=2)], [seen()], {"c1"}, AlertSettings(drift_warmup_syncs=1)).firing


def test_a_cloud_without_collector_events_of_other_types_is_not_judged() -> None:
    # no collector at all: TallyCloudEventsSilent's business (or no collector configured)
    assert not silent([sync()], [], {"c1"}, S).firing
    assert not silent([sync()], [seen(cloud="c2")], {"c1"}, S).firing
    # the collector only ever carried volumes, and stopped: the whole collector is silent, not one service
    assert not silent([sync()], [seen(rtype="volume", at=NOW - timedelta(days=1))], {"c1"}, S).firing


def test_only_configured_clouds_and_real_corrections() -> None:
    assert not silent([sync(cloud="gone")], [seen(cloud="gone")], {"c1"}, S).firing
    assert not silent([sync(volume=0)], [seen()], {"c1"}, S).firing
    assert not silent([], [seen()], {"c1"}, S).firing


def test_without_a_sync_before_silence_means_never() -> None:
    s = AlertSettings(drift_warmup_syncs=0)
    first = sync(nth=1, previous=None)
    assert silent([first], [seen()], {"c1"}, s).firing
    assert not silent([first], [seen(), seen(rtype="volume", at=NOW - timedelta(days=9))], {"c1"}, s).firing


def test_each_cloud_and_type_is_judged_on_its_own() -> None:
    condition = silent(
        [sync(volume=3, image=1), sync(cloud="c2", volume=5)],
        [seen(), seen(rtype="image"), seen(cloud="c2")], {"c1", "c2"}, S)
    assert condition.clouds == ("c1", "c2")
    assert set(condition.details["c1"]) == {"volume"} and set(condition.details["c2"]) == {"volume"}


def test_lifecycle_corrections_are_creates_deletes_and_recoveries_not_updates() -> None:
    summary = TypeSummary("enumerated", created=2, updated=7, deleted=1, recovered=3)
    assert summary.lifecycle_corrections == 6
