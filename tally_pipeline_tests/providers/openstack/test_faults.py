"""Failure isolation: a service that errs, hangs, answers garbage or is missing from the catalog
fails its own type, with a clear reason, and every other type still enumerates completely."""

from __future__ import annotations

import threading
from datetime import timedelta

import httpx
import pytest

from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    NOW,
    RECORDS,
    SDK_NOISE,
    SERVICE,
    SMALL,
    TYPES,
    config,
    enumerated,
    failed,
    list_all,
    record,
    running_fake,
)

pytestmark = SDK_NOISE

COUNTS = {t: sum(1 for r in RECORDS if r.resource_type == t) for t in TYPES}


def _reason_for(kind: str, service: str) -> str:
    return {
        "error": f"HTTP 500 from {service}",
        "timeout": f"timed out after 5s waiting for {service}",
        "malformed": f"malformed page from {service}",
        "absent": f"{service} service not in catalog",
    }[kind]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["error", "timeout", "malformed", "absent"])
@pytest.mark.parametrize("resource_type", TYPES)
def test_a_fault_fails_its_type_alone(resource_type: str, kind: str) -> None:
    with running_fake() as fake:
        fake.inject(resource_type, kind)
        # The client's timeout is also every healthy listing's: short only where the fault is a hang (a
        # healthy answer from the fake takes milliseconds; 5 s leaves a loaded machine ample room), and
        # a bound for giving up otherwise.
        with OpenStackAdapter("c", config(fake, timeout=5 if kind == "timeout" else 60)) as adapter:
            listings = list_all(adapter)
    assert _reason_for(kind, SERVICE[resource_type]) in failed(listings[resource_type])
    for other in TYPES:
        if other != resource_type:
            assert len(enumerated(listings[other])) == COUNTS[other], other


@pytest.mark.parametrize("kind", ["error", "malformed"])
def test_a_fault_on_a_later_page_still_fails_the_whole_type(kind: str) -> None:
    records = [record("volume", f"vol-{i}", {"gb": 1, "volume_type": None}, "available", minute=i) for i in range(5)]
    with running_fake(records) as fake:
        fake.inject("volume", kind, after_pages=1)
        with OpenStackAdapter("c", config(fake, page_size=2)) as adapter:
            listing = list_all(adapter)["volume"]
        requests = fake.list_requests("volume")
    # the first page did arrive, the second did not: a partial listing is no listing
    assert len(requests) == 2 and "marker" not in requests[0].query and "marker" in requests[1].query
    assert _reason_for(kind, "volumev3") in failed(listing)


def test_a_service_that_blinks_is_retried_and_the_listing_completes() -> None:
    with running_fake() as fake:
        fake.inject("floating_ip", "unavailable", times=1)
        with OpenStackAdapter("c", config(fake, retries=2)) as adapter:
            listed = enumerated(list_all(adapter)["floating_ip"])
        statuses = [r.status for r in fake.list_requests("floating_ip")]
    assert len(listed) == COUNTS["floating_ip"]
    assert statuses[:2] == [503, 200]


def test_retries_are_bounded() -> None:
    with running_fake() as fake:
        fake.inject("image", "unavailable")
        with OpenStackAdapter("c", config(fake, retries=2)) as adapter:
            reason = failed(list_all(adapter)["image"])
        statuses = [r.status for r in fake.list_requests("image")]
    assert "HTTP 503 from image" in reason
    assert statuses == [503, 503, 503]  # one try and two retries, then the type fails


def test_a_hang_is_retried_then_fails_after_the_timeout() -> None:
    with running_fake() as fake:
        fake.inject("load_balancer", "timeout")
        with OpenStackAdapter("c", config(fake, timeout=0.3, retries=1)) as adapter:
            reason = failed(list_all(adapter)["load_balancer"])
        hung = [r for r in fake.list_requests("load_balancer") if r.status == 0]
    assert "timed out after 0.3s waiting for load-balancer (2 attempts)" in reason
    assert len(hung) == 2


def test_the_views_own_faults_are_served_too() -> None:
    view = StaticView.of(RECORDS)
    view.failures = {"volume": "error", "image": "empty"}
    with running_fake() as fake:
        fake.view = view
        with OpenStackAdapter("c", config(fake)) as adapter:
            listings = list_all(adapter)
    assert "HTTP 500 from volumev3" in failed(listings["volume"])
    # "empty" is the platform wrongly answering nothing: the adapter reports what it was told
    assert enumerated(listings["image"]) == {}
    assert len(enumerated(listings["instance"])) == COUNTS["instance"]


def test_a_record_missing_its_project_is_skipped_and_its_type_still_enumerates() -> None:
    broken = record("floating_ip", "fip-orphan", {"floating_network_id": None}, "ACTIVE", project="")
    fine = record("floating_ip", "fip-fine", {"floating_network_id": None}, "ACTIVE")
    with running_fake([broken, fine, record("instance", "srv", SMALL, "ACTIVE")]) as fake:
        with OpenStackAdapter("c", config(fake)) as adapter:
            listings = list_all(adapter)
    assert set(enumerated(listings["floating_ip"])) == {"fip-fine"}
    skipped = listings["floating_ip"].skipped
    assert [(s.resource_id, s.reason) for s in skipped] == [("fip-orphan", "no_project")]
    assert "malformed floating IP record fip-orphan: no project" in skipped[0].detail
    assert set(enumerated(listings["instance"])) == {"srv"}


def test_deleted_listing_is_unavailable_while_compute_fails() -> None:
    with running_fake() as fake:
        fake.inject("instance", "error")
        with OpenStackAdapter("c", config(fake)) as adapter:
            listing = adapter.deleted_since(NOW - timedelta(hours=1), at=NOW)
    assert not listing.available
    assert "HTTP 500 from compute" in (listing.reason or "")


def test_stopping_the_fake_ends_a_hanging_request_at_once() -> None:
    outcome: list[BaseException | int] = []
    with running_fake(hang_limit=3600) as fake:  # a hang only the stop can end within the test's bound
        fake.inject("instance", "timeout")
        token = httpx.post(f"{fake.auth_url}/v3/auth/tokens", json={"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": "admin", "domain": {"name": "Default"}, "password": "secret"}}}}}).headers["X-Subject-Token"]

        def call() -> None:
            try:
                outcome.append(httpx.get(f"{fake.base_url}/compute/v2.1/servers/detail",
                                         headers={"X-Auth-Token": token}, timeout=3600).status_code)
            except httpx.HTTPError as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        assert fake.wait_for(lambda r: r.resource_type == "instance" and r.status == 0) is not None
    # leaving the block stopped the server; the hanging request is over (the bound is for giving up: the
    # hang and the client's timeout are an hour)
    caller.join(timeout=120)
    assert not caller.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], httpx.HTTPError)


def test_the_fake_refuses_a_bad_password_and_a_missing_token() -> None:
    with running_fake() as fake:
        refused = httpx.post(f"{fake.auth_url}/v3/auth/tokens", json={"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": "admin", "domain": {"name": "Default"}, "password": "nope"}}}}})
        anonymous = httpx.get(f"{fake.base_url}/network/v2.0/floatingips")
    assert refused.status_code == 401 and "X-Subject-Token" not in refused.headers
    assert anonymous.status_code == 401
