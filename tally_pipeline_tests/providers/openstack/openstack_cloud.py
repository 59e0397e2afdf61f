"""A small OpenStack cloud for the adapter tests: records of every type, and what each should list as.

The expectations here are written from the records and the services' documented status
vocabularies, independently of the adapter's code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tally_pipeline.config import OpenStackCloud
from tally_pipeline.fakes.openstack import FakeOpenStack
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.interface import Enumerated, Failed, ListedResource, TypeListing, list_type
from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.schemas import default_registry

#: openstacksdk 4.22 warns about its own internals on every connection and request; not ours to fix.
SDK_NOISE = [
    pytest.mark.filterwarnings("ignore:Support for InfluxDB requires:PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The 'service_type' parameter is unnecesary:PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The _compute_attributes method is deprecated:PendingDeprecationWarning"),
]

T0 = datetime(2026, 3, 1, 8, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(days=2)
TYPES = default_registry().in_order
SERVICE = {"instance": "compute", "volume": "volumev3", "floating_ip": "network", "image": "image",
           "load_balancer": "load-balancer"}

SMALL = {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}
LARGE = {"flavor_name": "m1.large", "vcpus": 4, "ram_mb": 8192, "disk_gb": 80}


def record(resource_type: str, resource_id: str, size: dict[str, Any], status: str, *,
           project: str = "p-alpha", task_state: str | None = None, minute: int = 0,
           updated_minute: int | None = None, micro: int = 0) -> PlatformRecord:
    created = T0 + timedelta(minutes=minute, microseconds=micro)
    updated = T0 + timedelta(minutes=minute if updated_minute is None else updated_minute, microseconds=micro)
    return PlatformRecord(resource_type, resource_id, project, dict(size), status, task_state, created, updated,
                          name=f"{resource_type}-{resource_id}")


# (record, in transition?) — the second element is what the service's vocabulary says.
CLOUD: list[tuple[PlatformRecord, bool]] = [
    (record("instance", "srv-active", SMALL, "ACTIVE", minute=1, updated_minute=30), False),
    (record("instance", "srv-build", SMALL, "BUILD", task_state="spawning", minute=2), True),
    (record("instance", "srv-deleting", LARGE, "ACTIVE", task_state="deleting", minute=3, project="p-beta"), True),
    (record("instance", "srv-resize", LARGE, "RESIZE", task_state="resize_migrating", minute=4), True),
    (record("instance", "srv-verify", LARGE, "VERIFY_RESIZE", minute=5), False),  # runs on the new flavor
    (record("instance", "srv-shutoff", SMALL, "SHUTOFF", minute=6, project="p-beta"), False),
    (record("volume", "vol-available", {"gb": 10, "volume_type": "ssd"}, "available", minute=7, micro=123456), False),
    (record("volume", "vol-in-use", {"gb": 200, "volume_type": "hdd"}, "in-use", minute=8, project="p-beta"), False),
    (record("volume", "vol-creating", {"gb": 5, "volume_type": None}, "creating", minute=9), True),
    (record("volume", "vol-deleting", {"gb": 1, "volume_type": "ssd"}, "deleting", minute=10), True),
    (record("volume", "vol-extending", {"gb": 20, "volume_type": "ssd"}, "extending", minute=11), True),
    (record("floating_ip", "fip-active", {"floating_network_id": "net-ext"}, "ACTIVE", minute=12), False),
    (record("floating_ip", "fip-down", {"floating_network_id": "net-ext"}, "DOWN", minute=13, project="p-beta"), False),
    (record("image", "img-active", {"bytes": 1_073_741_824}, "active", minute=14), False),
    (record("image", "img-queued", {"bytes": None}, "queued", minute=15), True),
    (record("image", "img-saving", {"bytes": None}, "saving", minute=16, project="p-beta"), True),
    (record("load_balancer", "lb-active", {"flavor_id": "lbf-small"}, "ACTIVE", minute=17), False),
    (record("load_balancer", "lb-create", {"flavor_id": None}, "PENDING_CREATE", minute=18), True),
    (record("load_balancer", "lb-update", {"flavor_id": None}, "PENDING_UPDATE", minute=19), True),
    (record("load_balancer", "lb-delete", {"flavor_id": None}, "PENDING_DELETE", minute=20, project="p-beta"), True),
    (record("load_balancer", "lb-error", {"flavor_id": None}, "ERROR", minute=21), False),
]
RECORDS = [r for r, _ in CLOUD]
TRANSITIONAL = {r.resource_id: flag for r, flag in CLOUD}
#: Octavia shows no sign these ever served: one still being created, one in ERROR (which octavia
#: shows alike for a failed create). Every server above launched (the fake stamps launched_at at the
#: creation) but the one still building, which nova shows without launched_at until the build ends.
NEVER_RAN = {"lb-create": "never_active", "lb-error": "never_active", "srv-build": "never_launched"}


def deleted_server(resource_id: str, *, created_minute: int, deleted_at: datetime, project: str = "p-alpha",
                   size: dict[str, Any] | None = None) -> PlatformRecord:
    return PlatformRecord("instance", resource_id, project, dict(size or SMALL), "DELETED", None,
                          T0 + timedelta(minutes=created_minute), deleted_at, deleted_at=deleted_at)


def expected_listing(records: list[PlatformRecord], transitional: dict[str, bool]) -> dict[str, ListedResource]:
    return {
        r.resource_id: ListedResource(
            resource_type=r.resource_type, resource_id=r.resource_id, project_id=r.project_id, size=r.size,
            status=r.status, in_transition=transitional[r.resource_id], created_at=r.created_at,
            updated_at=r.updated_at, never_ran=NEVER_RAN.get(r.resource_id),
            # nova's launched_at, where its usage starts: the fake stamps it at the creation
            started_at=(r.launched_at or r.created_at)
            if r.resource_type == "instance" and r.status != "BUILD" else None,
        )
        for r in records
    }


def config(fake: FakeOpenStack, *, user: str = "admin", **overrides: Any) -> OpenStackCloud:
    settings = {"timeout": 2, "retries": 0, "retry_delay": 0.01, **overrides}
    return OpenStackCloud(**fake.tally_cloud_entry(user, **settings))


@contextmanager
def running_fake(records: list[PlatformRecord] | None = None, deleted: list[PlatformRecord] | None = None,
                 **options: Any) -> Iterator[FakeOpenStack]:
    view = StaticView.of(RECORDS if records is None else records, deleted)
    with FakeOpenStack(view, at=NOW, **options) as fake:
        yield fake


def list_all(adapter: OpenStackAdapter) -> dict[str, TypeListing]:
    return {t: list_type(adapter, t, at=NOW) for t in adapter.resource_types}


def enumerated(listing: TypeListing) -> dict[str, ListedResource]:
    assert isinstance(listing, Enumerated), listing
    by_id = {item.resource_id: item for item in listing.items}
    assert len(by_id) == len(listing.items), "an item was listed twice"
    return by_id


def failed(listing: TypeListing) -> str:
    assert isinstance(listing, Failed), listing
    return listing.reason
