"""Deletes by absence against the fake OpenStack through the real openstacksdk: confirmed by GET by id
or nova's deleted listing, never booked on a down cell's silence, a soft delete, or an unreadable item."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.schemas import default_registry
from tally_pipeline.services import queries
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.reconciliation import run_sync, sync_runs
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    NOW,
    SDK_NOISE,
    SMALL,
    T0,
    config,
    record,
    running_fake,
)

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "os"
TICK = NOW - timedelta(minutes=30)  # the schedule's tick; the fake's clock (NOW) is when it answers


def server(rid: str, **kw):
    return record("instance", rid, SMALL, "ACTIVE", **kw)


@pytest.fixture
def store(tmp_path):
    s = open_store(f"duckdb://{tmp_path / 'tally.duckdb'}")
    yield s
    s.close()


def known(store, *records) -> None:
    """The projection knows these resources live (their collector creates arrived long ago)."""
    events = []
    for r in records:
        event_type = {"instance": "compute.instance.create.end", "volume": "volume.create.end",
                      "floating_ip": "floatingip.create.end", "image": "image.activate",
                      "load_balancer": "octavia.loadbalancer.create.end"}[r.resource_type]
        events.append({"event_id": f"c-{r.resource_id}", "event_type": event_type, "cloud": CLOUD,
                       "resource_type": r.resource_type, "resource_id": r.resource_id, "project_id": r.project_id,
                       "occurred_at": T0.isoformat(), "payload": {"size": r.size}})
    outcome = Ingestor(store, default_registry()).ingest(events, origin="collector")
    assert outcome.stored == len(events), outcome


def sync(store, fake, *types, guard=0.5):
    with OpenStackAdapter(CLOUD, config(fake, resource_types=list(types), page_size=2)) as adapter:
        return run_sync(store, Ingestor(store, default_registry()), CLOUD, adapter, settle_window=300,
                        mass_delete_guard=guard, now=TICK, run_key="tick:1")


def deleted_at(store, rtype, rid):
    return queries.resource_state(store, CLOUD, rtype, rid)["deleted_at"]


def test_servers_of_a_down_cell_are_deferred_unconfirmed_and_really_deleted_ones_are_deleted(store) -> None:
    up, down, gone = server("srv-up", minute=1), server("srv-down", minute=2), server("srv-gone", minute=3)
    known(store, up, down, gone)
    with running_fake([up, down]) as fake:
        fake.cell_down("srv-down")
        run = sync(store, fake, "instance")
        listed = {r.query.get("marker", [None])[0] for r in fake.list_requests("instance")}
        asked = sorted(r.path.rsplit("/", 1)[1] for r in fake.show_requests("instance"))
    assert "srv-down" not in listed
    assert asked == ["srv-down", "srv-gone"]  # only the missing ones are asked for
    assert deleted_at(store, "instance", "srv-down") is None
    assert deleted_at(store, "instance", "srv-gone") == NOW  # the fake's Date, not the tick
    assert (run.deleted, run.unconfirmed, run.deferrals_by_reason()) == (1, 1, {"unconfirmed": 1})
    detail = next(d.detail for d in run.deferrals if d.resource_id == "srv-down")
    assert "UNKNOWN" in detail and "unreachable cell" in detail
    row = sync_runs(store, cloud=CLOUD)[0]
    assert (row["unconfirmed"], row["per_type"]["instance"]["deferred_by_reason"]) == (1, {"unconfirmed": 1})
    assert store.query("SELECT reason FROM sync_deferrals WHERE resource_id = 'srv-down'") == [("unconfirmed",)]


def test_a_down_cell_is_listed_as_unknown_only_without_paging_and_at_2_69(store) -> None:
    import httpx

    with running_fake([server("srv-a", minute=1), server("srv-b", minute=2)]) as fake:
        fake.cell_down("srv-b")
        token = httpx.post(f"{fake.auth_url}/v3/auth/tokens", json={"auth": {"identity": {
            "methods": ["password"], "password": {"user": {"name": "admin", "domain": {"name": "Default"},
                                                            "password": "secret"}}}}}).headers["X-Subject-Token"]

        def listed(version: str, **params) -> dict:
            answer = httpx.get(f"{fake.base_url}/compute/v2.1/servers/detail", params={"all_tenants": "1", **params},
                               headers={"X-Auth-Token": token, "OpenStack-API-Version": f"compute {version}"})
            return {s["id"]: s["status"] for s in answer.json()["servers"]}

        assert listed("2.69") == {"srv-a": "ACTIVE", "srv-b": "UNKNOWN"}
        assert listed("2.69", limit="10") == {"srv-a": "ACTIVE"}
        assert listed("2.68") == {"srv-a": "ACTIVE"}


@pytest.mark.parametrize(("fault", "expected"), [("error", "HTTP 500 from compute"),
                                                 ("timeout", "timed out")])
def test_a_confirmation_that_fails_or_hangs_is_no_confirmation(store, fault, expected) -> None:
    gone = server("srv-gone", minute=3)
    known(store, gone)
    with running_fake([]) as fake:
        fake.inject("instance", fault, on="show")
        run = sync(store, fake, "instance")
    assert deleted_at(store, "instance", "srv-gone") is None
    assert run.deferrals_by_reason() == {"unconfirmed": 1}
    assert expected in run.deferrals[0].detail


@pytest.mark.parametrize("resource", [
    record("volume", "vol-1", {"gb": 10, "volume_type": "ssd"}, "available", minute=1),
    record("floating_ip", "fip-1", {"floating_network_id": "net"}, "ACTIVE", minute=2),
    record("image", "img-1", {"bytes": 1024}, "active", minute=3),
    record("load_balancer", "lb-1", {"flavor_id": "small"}, "ACTIVE", minute=4),
    server("srv-1", minute=5),
], ids=lambda r: r.resource_type)
def test_every_type_is_confirmed_by_its_own_get_by_id(resource) -> None:
    with running_fake([resource]) as fake:
        with OpenStackAdapter(CLOUD, config(fake)) as adapter:
            answers = adapter.confirm_gone(resource.resource_type, [resource.resource_id, "never-there"], at=NOW)
        paths = sorted(r.path for r in fake.show_requests(resource.resource_type))
    held, missing = answers[resource.resource_id], answers["never-there"]
    assert not held.gone and "still answers" in held.detail
    assert missing.gone and "404" in missing.detail
    assert len(paths) == 2 and all(p.endswith(("/never-there", f"/{resource.resource_id}")) for p in paths)


def test_a_soft_deleted_server_is_billed_until_its_soft_delete(store) -> None:
    soft_at = NOW - timedelta(hours=2)
    kept = server("srv-kept", minute=1)
    soft = replace(server("srv-soft", minute=2), status="SOFT_DELETED", updated_at=soft_at, deleted_at=soft_at)
    known(store, kept, replace(soft, status="ACTIVE"))
    with running_fake([kept], deleted=[soft]) as fake:
        run = sync(store, fake, "instance")
        asked = fake.show_requests("instance")
    assert run.deleted_listing == "available"
    assert deleted_at(store, "instance", "srv-soft") == soft_at
    assert asked == []  # the deleted listing already confirmed and dated it


def test_unreadable_items_are_skipped_counted_and_never_deleted(store) -> None:
    orphan = record("image", "img-orphan", {"bytes": 1024}, "active", minute=1)
    fine = record("image", "img-fine", {"bytes": 2048}, "active", minute=2)
    bare = record("floating_ip", "fip-bare", {"floating_network_id": "net"}, "ACTIVE", minute=3)
    fip = record("floating_ip", "fip-fine", {"floating_network_id": "net"}, "ACTIVE", minute=4)
    known(store, orphan, fine, bare, fip)
    with running_fake([orphan, fine, bare, fip]) as fake:
        fake.patch("img-orphan", owner=None)  # glance's schema allows a null owner
        fake.patch("fip-bare", drop=("created_at", "updated_at"))  # neutron without the timestamp extension
        run = sync(store, fake, "image", "floating_ip")
    assert run.status == "succeeded" and run.deleted == 0
    assert run.per_type["image"].skipped == {"no_project": 1}
    assert run.per_type["floating_ip"].skipped == {"no_created_at": 1}
    assert (run.per_type["image"].listed, run.per_type["floating_ip"].listed, run.skipped) == (1, 1, 2)
    assert deleted_at(store, "image", "img-orphan") is None and deleted_at(store, "floating_ip", "fip-bare") is None
    assert sync_runs(store, cloud=CLOUD)[0]["skipped"] == 2


def test_the_guard_holds_before_anything_is_asked(store) -> None:
    servers = [server(f"srv-{i:02d}", minute=i) for i in range(24)]
    known(store, *servers)
    with running_fake(servers[:4]) as fake:
        run = sync(store, fake, "instance")
        asked = fake.show_requests("instance")
    assert run.deferrals_by_reason() == {"mass_delete_guard": 20} and asked == []


def test_a_server_waiting_in_verify_resize_is_billed_on_its_new_flavor(store) -> None:
    from tally_pipeline_tests.providers.openstack.openstack_cloud import LARGE

    before = server("srv-resized", minute=1)
    known(store, before)
    # resize_confirm_window = 0: nova leaves it in VERIFY_RESIZE, already running on the new flavor
    waiting = replace(record("instance", "srv-resized", LARGE, "VERIFY_RESIZE", minute=1),
                      updated_at=NOW - timedelta(hours=3))
    with running_fake([waiting]) as fake:
        run = sync(store, fake, "instance")
    assert (run.updated, run.deferred) == (1, 0)
    state = queries.resource_state(store, CLOUD, "instance", "srv-resized")
    assert state["size"] == LARGE
