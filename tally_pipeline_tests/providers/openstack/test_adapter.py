"""The OpenStack adapter through the real openstacksdk against the fake OpenStack: mapping, paging,
microversions, transitions, deleted servers, and configuration from clouds.yaml."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import httpx
import pytest
import yaml

from tally_pipeline.config import OpenStackCloud, load_config
from tally_pipeline.fakes.openstack_json import volume_type_id
from tally_pipeline.providers import adapter_for
from tally_pipeline.providers.interface import list_type
from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    LARGE,
    NOW,
    RECORDS,
    SDK_NOISE,
    SMALL,
    T0,
    TRANSITIONAL,
    TYPES,
    config,
    deleted_server,
    enumerated,
    expected_listing,
    failed,
    list_all,
    record,
    running_fake,
)

pytestmark = SDK_NOISE


@pytest.mark.parametrize("resource_type", TYPES)
def test_each_type_lists_what_the_platform_holds(resource_type: str) -> None:
    with running_fake() as fake, OpenStackAdapter("region-one", config(fake)) as adapter:
        listing = list_all(adapter)[resource_type]
    expected = expected_listing([r for r in RECORDS if r.resource_type == resource_type], TRANSITIONAL)
    assert expected, "the sample cloud holds every type"
    assert enumerated(listing) == expected


def test_times_without_a_timezone_are_utc_and_keep_their_microseconds() -> None:
    # cinder writes "2026-03-01T08:07:00.123456" (no offset); octavia "2026-03-01T08:17:00".
    with running_fake() as fake, OpenStackAdapter("c", config(fake)) as adapter:
        volume = enumerated(list_type(adapter, "volume", at=NOW))["vol-available"]
        lb = enumerated(list_type(adapter, "load_balancer", at=NOW))["lb-active"]
    assert volume.created_at == T0 + timedelta(minutes=7, microseconds=123456)
    assert volume.created_at.utcoffset() == timedelta(0)
    assert lb.created_at == T0 + timedelta(minutes=17)


def test_servers_are_listed_at_a_negotiated_microversion_with_the_embedded_flavor() -> None:
    with running_fake() as fake, OpenStackAdapter("c", config(fake)) as adapter:
        servers = enumerated(list_all(adapter)["instance"])
        requests = fake.list_requests("instance")
    assert servers["srv-resize"].size == LARGE and servers["srv-active"].size == SMALL
    assert requests and all(r.status == 200 for r in requests)
    for request in requests:
        # what the client sent, and what the fake answered with: both at least 2.47
        assert request.microversion_header == "compute 2.96"
        major, minor = (int(p) for p in request.microversion.split("."))
        assert (major, minor) >= (2, 47)
    assert adapter.nova_microversion == "2.96"


def test_the_fake_answers_the_old_flavor_shape_to_a_client_that_negotiates_nothing() -> None:
    with running_fake() as fake, httpx.Client(base_url=fake.base_url) as http:
        auth = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": "secret"}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
        token = http.post("/identity/v3/auth/tokens", json=auth).headers["X-Subject-Token"]
        bare = http.get("/compute/v2.1/servers/detail", params={"all_tenants": "1"}, headers={"X-Auth-Token": token})
        modern = http.get("/compute/v2.1/servers/detail", params={"all_tenants": "1"},
                          headers={"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.47"})
    assert set(bare.json()["servers"][0]["flavor"]) == {"id", "links"}
    assert bare.headers["OpenStack-API-Version"] == "compute 2.1"
    assert modern.json()["servers"][0]["flavor"]["original_name"] in ("m1.small", "m1.large")


def test_a_nova_older_than_2_47_fails_instances_alone_with_the_reason() -> None:
    with running_fake(nova_max_microversion="2.46") as fake, OpenStackAdapter("c", config(fake)) as adapter:
        listings = list_all(adapter)
        deleted = adapter.deleted_since(NOW - timedelta(hours=1), at=NOW)
    reason = failed(listings["instance"])
    assert "2.46" in reason and "2.47" in reason
    for other in TYPES[1:]:
        enumerated(listings[other])
    assert not deleted.available and "2.47" in (deleted.reason or "")


PAGING_SIZES = {"instance": SMALL, "volume": {"gb": 3, "volume_type": "ssd"},
                "floating_ip": {"floating_network_id": "net-ext"}, "image": {"bytes": 10},
                "load_balancer": {"flavor_id": None}}
PAGING_STATUS = {"instance": "ACTIVE", "volume": "available", "floating_ip": "ACTIVE", "image": "active",
                 "load_balancer": "ACTIVE"}


@pytest.mark.parametrize("resource_type", TYPES)
def test_paging_walks_every_page_with_the_marker_of_the_last_item(resource_type: str) -> None:
    records = [record(resource_type, f"{resource_type}-{i:02d}", PAGING_SIZES[resource_type],
                      PAGING_STATUS[resource_type], minute=i) for i in range(7)]
    with running_fake(records) as fake, OpenStackAdapter("c", config(fake, page_size=3)) as adapter:
        listed = list(adapter.enumerate(resource_type, at=NOW))
        requests = fake.list_requests(resource_type)
    assert sorted(r.resource_id for r in listed) == sorted(r.resource_id for r in records)
    assert len({r.resource_id for r in listed}) == 7
    if resource_type == "image":
        # glance is asked twice: every visibility, then the hidden images
        assert [r.query["os_hidden"] for r in requests][-1] == ["true"]
        requests = [r for r in requests if r.query["os_hidden"] == ["false"]]
    assert len(requests) >= 3
    assert all(r.query["limit"] == ["3"] for r in requests)
    # The fake lists newest first; each request's marker is the last id of the page before it.
    order = [r.resource_id for r in sorted(records, key=lambda r: r.created_at, reverse=True)]
    markers = [r.query.get("marker", [None])[0] for r in requests]
    assert markers[:3] == [None, order[2], order[5]]


def test_listing_streams_one_page_at_a_time() -> None:
    records = [record("instance", f"srv-{i:02d}", SMALL, "ACTIVE", minute=i) for i in range(9)]
    with running_fake(records) as fake, OpenStackAdapter("c", config(fake, page_size=2)) as adapter:
        stream = adapter.enumerate("instance", at=NOW)
        first = next(stream)
        after_first = len(fake.list_requests("instance"))
        rest = list(stream)
        after_all = len(fake.list_requests("instance"))
    assert first.resource_id == "srv-08"
    assert after_first == 1
    assert len(rest) == 8 and after_all == 5


@pytest.mark.parametrize(
    ("resource_type", "status", "task_state", "expected"),
    [
        ("instance", "BUILD", None, True),
        ("instance", "ACTIVE", "deleting", True),
        ("instance", "RESIZE", None, True),
        ("instance", "VERIFY_RESIZE", None, False),  # runs on the new flavor already
        ("instance", "MIGRATING", None, True),
        ("instance", "ACTIVE", "image_snapshot", True),
        ("instance", "ACTIVE", None, False),
        ("instance", "ERROR", None, False),
        ("volume", "creating", None, True),
        ("volume", "deleting", None, True),
        ("volume", "available", None, False),
        ("image", "queued", None, True),
        ("image", "saving", None, True),
        ("image", "active", None, False),
        ("load_balancer", "PENDING_CREATE", None, True),
        ("load_balancer", "PENDING_UPDATE", None, True),
        ("load_balancer", "PENDING_DELETE", None, True),
        ("load_balancer", "ACTIVE", None, False),
        ("floating_ip", "DOWN", None, False),
    ],
)
def test_transitional_states(resource_type: str, status: str, task_state: str | None, expected: bool) -> None:
    one = record(resource_type, "the-one", PAGING_SIZES[resource_type], status, task_state=task_state)
    with running_fake([one]) as fake, OpenStackAdapter("c", config(fake)) as adapter:
        (item,) = list(adapter.enumerate(resource_type, at=NOW))
    assert item.status == status
    assert item.in_transition is expected


def test_deleted_servers_come_with_their_real_deletion_times() -> None:
    since = NOW - timedelta(hours=2)
    gone = [
        deleted_server("gone-recent", created_minute=5, deleted_at=NOW - timedelta(minutes=30), size=LARGE),
        deleted_server("gone-in-margin", created_minute=6, deleted_at=since - timedelta(minutes=5), project="p-beta"),
        deleted_server("gone-long-ago", created_minute=7, deleted_at=since - timedelta(hours=3)),
    ]
    with running_fake(deleted=gone) as fake:
        cfg = config(fake, deleted_margin=600, page_size=1)
        with OpenStackAdapter("c", cfg) as adapter:
            listing = adapter.deleted_since(since, at=NOW)
        requests = [r for r in fake.list_requests("instance") if "deleted" in r.query]
    assert listing.available, listing.reason
    by_id = {item.resource_id: item for item in listing.items}
    assert set(by_id) == {"gone-recent", "gone-in-margin"}  # the margin widens the window by 10 minutes
    assert by_id["gone-recent"].deleted_at == NOW - timedelta(minutes=30)
    assert by_id["gone-recent"].created_at == T0 + timedelta(minutes=5)
    assert by_id["gone-recent"].size == LARGE
    assert by_id["gone-in-margin"].project_id == "p-beta"
    first = requests[0].query
    assert first["deleted"] == ["True"] and first["all_tenants"] == ["True"]
    assert first["changes-since"] == [(since - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")]
    assert len(requests) >= 2  # page size 1: the deleted listing pages too


def test_a_deleted_filter_that_nova_ignores_is_reported_unavailable() -> None:
    # A deployment's nova policy lets "reader" list all projects, but nova honours ``deleted`` for
    # admins only (os_compute_api:servers:allow_all_filters): it answers with live servers changed
    # since T next to the deleted ones.
    since = NOW - timedelta(hours=2)
    live = replace(record("instance", "srv-live", SMALL, "ACTIVE", minute=1), updated_at=NOW - timedelta(minutes=5))
    gone = [deleted_server("gone", created_minute=2, deleted_at=NOW - timedelta(minutes=20))]
    with running_fake([live], deleted=gone) as fake:
        fake.add_user("auditor", "s3cret", project_name="audit", roles=("reader",))
        fake.grant("instance", "reader")
        with OpenStackAdapter("c", config(fake, user="auditor")) as adapter:
            listing = adapter.deleted_since(since, at=NOW)
            servers = enumerated(list_all(adapter)["instance"])
    assert not listing.available and listing.items == []
    assert "srv-live" in (listing.reason or "") and "admin" in (listing.reason or "")
    assert set(servers) == {"srv-live"}  # all-projects listing itself works for a reader


def test_a_member_without_all_projects_is_refused_and_says_so() -> None:
    with running_fake() as fake:
        fake.add_user("alice", "pw", project_name="p-alpha", roles=("member",))
        with OpenStackAdapter("c", config(fake, user="alice")) as adapter:
            reason = failed(list_all(adapter)["instance"])
            deleted = adapter.deleted_since(NOW - timedelta(hours=1), at=NOW)
    assert "HTTP 403 from compute" in reason and "get_all_tenants" in reason
    assert not deleted.available and (deleted.reason or "").startswith("HTTP 403 from compute")


def test_a_wrong_password_fails_every_type_with_an_authentication_reason() -> None:
    with running_fake() as fake:
        cfg = config(fake, auth={**fake.auth(), "password": "wrong"})
        with OpenStackAdapter("c", cfg) as adapter:
            listings = list_all(adapter)
    for resource_type in TYPES:
        assert "authentication refused" in failed(listings[resource_type])


def test_a_clouds_yaml_entry_found_through_os_client_config_file(tmp_path, monkeypatch) -> None:
    with running_fake() as fake:
        clouds = tmp_path / "clouds.yaml"
        clouds.write_text(yaml.safe_dump({"clouds": {"fake-region": fake.clouds_yaml_entry()}}))
        monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
        tally = tmp_path / "tally.yaml"
        tally.write_text(yaml.safe_dump({"clouds": {"region-one": {
            "provider": "openstack", "os_cloud": "fake-region", "timeout": 2, "page_size": 2}}}))
        cloud_config = load_config(tally).clouds["region-one"]
        adapter = adapter_for("region-one", cloud_config)
        assert isinstance(adapter, OpenStackAdapter)
        with adapter:
            listings = list_all(adapter)
    for resource_type in TYPES:
        assert set(enumerated(listings[resource_type])) == {r.resource_id for r in RECORDS if r.resource_type == resource_type}
    token_requests = [r for r in fake.requests if r.path == "/identity/v3/auth/tokens"]
    assert [r.status for r in token_requests] == [201]


def test_only_the_configured_resource_types_are_listed() -> None:
    with running_fake() as fake, OpenStackAdapter("c", config(fake, resource_types=["volume", "image"])) as adapter:
        assert adapter.resource_types == ("volume", "image")
        assert set(list_all(adapter)) == {"volume", "image"}
        deleted = adapter.deleted_since(NOW - timedelta(hours=1), at=NOW)
    assert not deleted.available
    assert fake.list_requests("instance") == []


def test_volume_type_names_map_ids_to_names() -> None:
    with running_fake() as fake, OpenStackAdapter("c", config(fake)) as adapter:
        names = adapter.volume_type_names()
        request = [r for r in fake.requests if r.path.endswith("/types")][0]
    assert names == {volume_type_id("ssd"): "ssd", volume_type_id("hdd"): "hdd"}
    assert request.query["is_public"] == ["None"]  # private types too


def test_an_unknown_clouds_yaml_entry_fails_every_type_with_the_configuration_problem(tmp_path, monkeypatch) -> None:
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"somewhere-else": {"auth": {"auth_url": "http://127.0.0.1:9"}}}}))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    cfg = OpenStackCloud(provider="openstack", os_cloud="region-one-admin")
    with OpenStackAdapter("region-one", cfg) as adapter:
        listings = list_all(adapter)
    for resource_type in TYPES:
        reason = failed(listings[resource_type])
        assert "configuration for cloud region-one" in reason and "region-one-admin" in reason
