"""OpenStack notifications, as each service emits them, mapped to our envelope.

Where the projects publish samples they are used as published (fixtures/openstack/notifications,
see SOURCES.md there): nova's doc/notification_samples (versioned), ceilometer's legacy fixtures
for nova, cinder and glance, octavia's documented example. Neutron publishes no floating IP
create/delete sample, nor glance an image.create / image.activate one, nor octavia its worker's
provider-driver dict: those are written by hand after the services' code (neutron's API notifier,
glance's ``format_image_notification``, octavia's notification tasks).
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tally_pipeline.core.envelope import EventRecord, validate_event
from tally_pipeline.core.verbs import verb_of
from tally_pipeline.providers.openstack.notifications import (
    NotificationOutcomes,
    Unmapped,
    map_notification,
    map_notifications,
)
from tally_pipeline.providers.openstack.nova_notifications import (
    ACTIONS,
    LEGACY_TYPES,
    VERSIONED_TYPES,
    _versioned_fields,
)
from tally_pipeline.schemas import default_registry
from tally_pipeline_tests.providers.openstack.notification_samples import SAMPLES, sample, versioned_sample

PROJECT = "6d2bb2ba2f2d4f0c9e3b1d5c0a7e8f90"
FIP = "2a4c6e8f-1b3d-4f5a-9c7e-0d2f4a6b8c1e"
EXT_NET = "e7c1b2a3-4d5e-4f60-8a9b-c0d1e2f3a4b5"
IMAGE = "f3b9a1c2-7d4e-4b5f-8a6c-9d0e1f2a3b4c"
LB = "5c8e1f2a-3b4d-4e6f-9a0b-1c2d3e4f5a6b"

# Identities in the official samples.
CEILO_SERVER, CEILO_PROJECT = "9f9d01b9-4a58-4271-9e27-398b21ab20d1", "7c150a59fe714e6f9263774af9688f0e"
RESIZED_SERVER, RESIZED_PROJECT = "648e8963-6886-4c3c-98f9-4511c292f86b", "cea4b25edb484e5392727181b7721d29"
NOVA_SERVER, NOVA_PROJECT = "178b0921-8f85-4257-88b6-2e743b5a975c", "6f70656e737461636b20342065766572"
CEILO_VOLUME, CEILO_VOLUME_PROJECT = "cccccccc-cccc-cccc-cccccccccccc", "7ffe17a15c724e2aa79fc839540aec15"
CEILO_VOLUME_TYPE = "3a9a398b-7e3b-40da-b09e-2115ad8cd68b"
OCTAVIA_LB, OCTAVIA_PROJECT = "8d4c8f66-7ac1-408e-82d5-59f6fcdea9ee", "qs59p6z696cp9cho8ze96edddvpfyvgz"
SAMPLE_TIME = "2012-10-29 13:45:00.000001"  # nova's samples carry no timestamp: the tests give one


def legacy(name: str, **payload: Any) -> dict[str, Any]:
    """A ceilometer legacy fixture (nova/legacy/<name>.json), payload fields overridden."""
    message = copy.deepcopy(sample(f"nova/legacy/{name}.json"))
    message["payload"].update(payload)
    return message


def legacy_delete_end() -> dict[str, Any]:
    # No legacy delete.end sample is published: the delete.start fixture with what nova's delete
    # sets before the end (state, terminated_at, deleted_at in null_safe_isotime's shape).
    message = legacy("compute.instance.delete.start", state="deleted", state_description="",
                     terminated_at="2012-05-08T20:24:14.000000", deleted_at="2012-05-08T20:24:14.811111")
    message.update(event_type="compute.instance.delete.end", message_id="a15b94ee-0000-delete-end",
                   timestamp="2012-05-08 20:24:14.824743")
    return message


def cinder(name: str, **payload: Any) -> dict[str, Any]:
    message = copy.deepcopy(sample(f"cinder/{name}.json"))
    message["payload"].update(payload)
    return message


FLOATINGIP = {
    "id": FIP, "tenant_id": PROJECT, "project_id": PROJECT, "floating_ip_address": "203.0.113.10",
    "floating_network_id": EXT_NET, "router_id": None, "port_id": None, "fixed_ip_address": None,
    "status": "DOWN", "description": "", "qos_policy_id": None, "port_details": None, "dns_domain": "",
    "dns_name": "", "tags": [], "created_at": "2026-03-01T08:05:59Z", "updated_at": "2026-03-01T08:05:59Z",
    "revision_number": 0,
}


def _glance(event_type: str, message_id: str, timestamp: str, **payload: Any) -> dict[str, Any]:
    body = {
        "id": IMAGE, "name": "ubuntu-24.04", "status": "active", "owner": PROJECT, "size": 2_361_393_152,
        "virtual_size": None, "disk_format": "qcow2", "container_format": "bare", "min_disk": 0, "min_ram": 0,
        "protected": False, "checksum": "5a2f0c3b9d8e7f6a1b2c3d4e5f6a7b8c", "visibility": "private",
        "created_at": "2026-03-01T08:07:00Z", "updated_at": "2026-03-01T08:09:30Z", "deleted": False,
        "deleted_at": None, "properties": {"os_distro": "ubuntu"}, "tags": [],
    }
    body.update(payload)
    return {"message_id": message_id, "event_type": event_type, "publisher_id": "image.localhost",
            "priority": "INFO", "timestamp": timestamp, "payload": body}


def _octavia(event_type: str, message_id: str, timestamp: str) -> dict[str, Any]:
    return {
        "message_id": message_id, "event_type": event_type, "publisher_id": "octavia-worker-1",
        "priority": "INFO", "timestamp": timestamp,
        "payload": {
            "loadbalancer_id": LB, "project_id": PROJECT, "name": "lb-web", "description": "",
            "admin_state_up": True, "vip_address": "10.0.0.50", "vip_network_id": EXT_NET,
            "vip_port_id": "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b", "vip_subnet_id": "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b",
            "vip_qos_policy_id": None, "availability_zone": None, "flavor": {"loadbalancer_topology": "SINGLE"},
        },
    }


TINY = {"flavor_name": "m1.tiny", "vcpus": 1, "ram_mb": 512, "disk_gb": 0}
# (notification, what the envelope must say) — expected values read off the samples.
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("nova create", sample("nova/legacy/compute.instance.create.end.json"),
     {"event_type": "compute.instance.create.end", "resource_type": "instance", "resource_id": CEILO_SERVER,
      "project_id": CEILO_PROJECT, "verb": "create",
      "occurred_at": "2012-05-08T20:23:47Z",  # launched_at (to the second), not created_at nor the message's time
      "size": TINY}),
    ("nova delete", legacy_delete_end(),
     {"event_type": "compute.instance.delete.end", "resource_type": "instance", "resource_id": CEILO_SERVER,
      "project_id": CEILO_PROJECT, "verb": "delete", "occurred_at": "2012-05-08T20:24:14Z", "size": None}),  # to the second
    ("nova finish resize", sample("nova/legacy/compute.instance.finish_resize.end.json"),
     {"event_type": "compute.instance.finish_resize.end", "resource_type": "instance", "resource_id": RESIZED_SERVER,
      "project_id": RESIZED_PROJECT, "verb": "update", "occurred_at": "2013-01-04T15:10:17.436974Z",
      "size": {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}}),
    ("nova resize revert", sample("nova/legacy/compute.instance.resize.revert.end.json"),
     {"event_type": "compute.instance.resize.revert.end", "resource_type": "instance", "resource_id": RESIZED_SERVER,
      "project_id": RESIZED_PROJECT, "verb": "update", "occurred_at": "2013-01-04T15:20:32.009532Z", "size": TINY}),
    ("nova resize confirm", {**sample("nova/legacy/compute.instance.finish_resize.end.json"),
                             "event_type": "compute.instance.resize.confirm.end"},
     {"event_type": "compute.instance.resize.confirm.end", "resource_type": "instance", "resource_id": RESIZED_SERVER,
      "project_id": RESIZED_PROJECT, "verb": "update", "occurred_at": "2013-01-04T15:10:17.436974Z",
      "size": {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}}),
    ("nova soft delete", legacy("compute.instance.create.end", state="soft-delete",
                                deleted_at="2012-05-09T08:00:00.000000") | {"event_type": "compute.instance.soft_delete.end"},
     {"event_type": "compute.instance.soft_delete.delete.end", "resource_type": "instance", "resource_id": CEILO_SERVER,
      "project_id": CEILO_PROJECT, "verb": "delete", "occurred_at": "2012-05-09T08:00:00Z", "size": None}),
    ("nova restore", legacy("compute.instance.create.end") | {"event_type": "compute.instance.restore.end"},
     {"event_type": "compute.instance.restore.create.end", "resource_type": "instance", "resource_id": CEILO_SERVER,
      "project_id": CEILO_PROJECT, "verb": "create", "occurred_at": "2012-05-08T20:23:48.028195Z", "size": TINY}),
    ("versioned create", versioned_sample("instance-create-end", message_id="v-create", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.create.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "create", "occurred_at": "2012-10-29T13:42:11Z",
      "size": {"flavor_name": "test_flavor", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}}),
    ("versioned delete", versioned_sample("instance-delete-end", message_id="v-delete", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.delete.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "delete", "occurred_at": "2012-10-29T13:42:11Z", "size": None}),
    ("versioned soft delete", versioned_sample("instance-soft_delete-end", message_id="v-soft", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.soft_delete.delete.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "delete", "occurred_at": "2012-10-29T13:42:11Z", "size": None}),
    ("versioned restore", versioned_sample("instance-restore-end", message_id="v-restore", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.restore.create.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "create", "occurred_at": "2012-10-29T13:45:00.000001Z",
      "size": {"flavor_name": "test_flavor", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}}),
    ("versioned resize finish", versioned_sample("instance-resize_finish-end", message_id="v-fin", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.finish_resize.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "update", "occurred_at": "2012-10-29T13:45:00.000001Z",
      "size": {"flavor_name": "other_flavor", "vcpus": 1, "ram_mb": 256, "disk_gb": 1}}),
    ("versioned resize revert", versioned_sample("instance-resize_revert-end", message_id="v-rev", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.resize.revert.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "update", "occurred_at": "2012-10-29T13:45:00.000001Z",
      "size": {"flavor_name": "test_flavor", "vcpus": 1, "ram_mb": 512, "disk_gb": 1}}),
    ("versioned resize confirm", versioned_sample("instance-resize_confirm-end", message_id="v-conf", timestamp=SAMPLE_TIME),
     {"event_type": "compute.instance.resize.confirm.end", "resource_type": "instance", "resource_id": NOVA_SERVER,
      "project_id": NOVA_PROJECT, "verb": "update", "occurred_at": "2012-10-29T13:45:00.000001Z",
      "size": {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}}),
    ("cinder create", sample("cinder/volume.create.end.json"),
     {"resource_type": "volume", "resource_id": CEILO_VOLUME, "project_id": CEILO_VOLUME_PROJECT, "verb": "create",
      "occurred_at": "2014-10-28T09:31:20Z", "size": {"gb": 1, "volume_type": CEILO_VOLUME_TYPE}}),
    ("cinder resize", cinder("volume.resize.end", size=2),
     {"resource_type": "volume", "resource_id": CEILO_VOLUME, "project_id": CEILO_VOLUME_PROJECT, "verb": "update",
      "occurred_at": "2015-07-16T12:00:00Z", "size": {"gb": 2, "volume_type": CEILO_VOLUME_TYPE}}),
    ("cinder retype", sample("cinder/volume.retype.json"),
     {"event_type": "volume.retype", "resource_type": "volume", "resource_id": CEILO_VOLUME,
      "project_id": CEILO_VOLUME_PROJECT, "verb": "update", "occurred_at": "2015-07-16T12:00:00Z",
      "size": {"gb": 1, "volume_type": "9b6e2d8c-5f1a-4e3b-8c7d-0a1b2c3d4e5f"}}),
    ("cinder transfer accepted", sample("cinder/volume.transfer.accept.end.json"),
     {"event_type": "volume.transfer.accept.end", "resource_type": "volume", "resource_id": CEILO_VOLUME,
      "project_id": "0a1b2c3d4e5f40718293a4b5c6d7e8f9", "verb": "update", "occurred_at": "2015-07-16T13:00:00Z",
      "size": {"gb": 1, "volume_type": "9b6e2d8c-5f1a-4e3b-8c7d-0a1b2c3d4e5f"}}),
    ("cinder delete", sample("cinder/volume.delete.end.json"),
     {"resource_type": "volume", "resource_id": CEILO_VOLUME, "project_id": CEILO_VOLUME_PROJECT, "verb": "delete",
      "occurred_at": "2015-07-16T12:00:00Z", "size": {"gb": 1, "volume_type": CEILO_VOLUME_TYPE}}),
    ("neutron create", {"message_id": "msg-fip-create", "event_type": "floatingip.create.end",
                        "publisher_id": "network.neutron-api-1", "priority": "INFO",
                        "timestamp": "2026-03-01 08:06:00.101010", "payload": {"floatingip": FLOATINGIP}},
     {"resource_type": "floating_ip", "resource_id": FIP, "project_id": PROJECT, "verb": "create",
      "occurred_at": "2026-03-01T08:05:59Z", "size": {"floating_network_id": EXT_NET}}),
    ("neutron delete", {"message_id": "msg-fip-delete", "event_type": "floatingip.delete.end",
                        "publisher_id": "network.neutron-api-1", "priority": "INFO",
                        "timestamp": "2026-03-02 11:00:00.000000",
                        "payload": {"floatingip_id": FIP, "floatingip": FLOATINGIP}},
     {"resource_type": "floating_ip", "resource_id": FIP, "project_id": PROJECT, "verb": "delete",
      "occurred_at": "2026-03-02T11:00:00Z", "size": {"floating_network_id": EXT_NET}}),
    ("neutron delete, old shape", {"message_id": "msg-fip-delete-old", "event_type": "floatingip.delete.end",
                                   "publisher_id": "network.neutron-api-1", "priority": "INFO",
                                   "timestamp": "2026-03-02 11:00:00.000000", "payload": {"floatingip_id": FIP}},
     {"resource_type": "floating_ip", "resource_id": FIP, "project_id": None, "verb": "delete",
      "occurred_at": "2026-03-02T11:00:00Z", "size": None}),
    ("glance create", _glance("image.create", "msg-img-create", "2026-03-01 08:07:00.400000",
                              status="queued", size=None, updated_at="2026-03-01T08:07:00Z"),
     {"resource_type": "image", "resource_id": IMAGE, "project_id": PROJECT, "verb": "create",
      "occurred_at": "2026-03-01T08:07:00Z", "size": {"bytes": None}}),
    ("glance upload", sample("glance/image.upload.json"),
     {"resource_type": "image", "resource_id": CEILO_VOLUME, "project_id": "fake", "verb": "update",
      "occurred_at": "2015-07-16T12:00:00Z", "size": {"bytes": 19}}),
    ("glance activate", _glance("image.activate", "msg-img-activate", "2026-03-01 08:09:30.100000"),
     {"resource_type": "image", "resource_id": IMAGE, "project_id": PROJECT, "verb": "update",
      "occurred_at": "2026-03-01T08:09:30.100000Z", "size": {"bytes": 2_361_393_152}}),
    ("glance delete", _glance("image.delete", "msg-img-delete", "2026-03-03 09:00:01.000000", status="deleted",
                              deleted=True, deleted_at="2026-03-03T09:00:00Z"),
     {"resource_type": "image", "resource_id": IMAGE, "project_id": PROJECT, "verb": "delete",
      "occurred_at": "2026-03-03T09:00:00Z", "size": {"bytes": 2_361_393_152}}),
    ("glance delete, ceilometer's sample", sample("glance/image.delete.json"),  # no deleted_at: the message's time
     {"resource_type": "image", "resource_id": CEILO_VOLUME, "project_id": "fake", "verb": "delete",
      "occurred_at": "2015-07-16T12:00:00Z", "size": {"bytes": 19}}),
    ("octavia create, documented shape", sample("octavia/octavia.loadbalancer.create.end.json"),
     {"resource_type": "load_balancer", "resource_id": OCTAVIA_LB, "project_id": OCTAVIA_PROJECT, "verb": "create",
      "occurred_at": "2022-04-22T23:02:14Z",  # created_at (the API accepted it), not the message at 23:02:15.7
      "size": {"flavor_id": None}}),
    ("octavia create, worker shape", _octavia("octavia.loadbalancer.create.end", "msg-lb-create", "2026-03-01 08:10:00.000000"),
     {"resource_type": "load_balancer", "resource_id": LB, "project_id": PROJECT, "verb": "create",
      "occurred_at": "2026-03-01T08:10:00Z", "size": {"flavor_id": None}}),
    ("octavia delete", _octavia("octavia.loadbalancer.delete.end", "msg-lb-delete", "2026-03-04 00:00:00.000000"),
     {"resource_type": "load_balancer", "resource_id": LB, "project_id": PROJECT, "verb": "delete",
      "occurred_at": "2026-03-04T00:00:00Z", "size": {"flavor_id": None}}),
]
IDS = [name for name, _, _ in CASES]


@pytest.mark.parametrize(("name", "notification", "expected"), CASES, ids=IDS)
def test_each_service_maps_to_our_envelope(name: str, notification: dict[str, Any], expected: dict[str, Any]) -> None:
    envelope = map_notification(notification, cloud="region-one")
    assert not isinstance(envelope, Unmapped), envelope
    assert envelope["event_type"] == expected.get("event_type", notification["event_type"])
    assert envelope["cloud"] == "region-one" and envelope["source"] == "collector"
    for key in ("resource_type", "resource_id", "project_id", "occurred_at"):
        assert envelope[key] == expected[key], key
    assert envelope["payload"].get("size") == expected["size"]


@pytest.mark.parametrize(("name", "notification", "expected"), CASES, ids=IDS)
def test_every_mapped_envelope_passes_validation(name: str, notification: dict[str, Any], expected: dict[str, Any]) -> None:
    envelope = map_notification(notification, cloud="region-one")
    record = validate_event(envelope, default_registry())
    assert isinstance(record, EventRecord), record
    assert record.verb == expected["verb"]


def test_each_nova_action_is_stored_under_a_type_whose_verb_is_its_effect() -> None:
    """The verb rule reads tokens: nova's soft_delete and restore need a stored type that says so."""
    effect = {"create_start": "note", "create": "create", "delete": "delete", "soft_delete": "delete", "restore": "create",
              "resize_prep": "update", "resize_finish": "update", "resize_revert": "update",
              "resize_confirm": "update",
              # power and lifecycle status changes keep the instance's lifecycle going
              **{name: "update" for name in ("power_off", "power_on", "suspend", "resume", "pause", "unpause",
                                             "shelve", "shelve_offload", "unshelve")}}
    assert {a.name: verb_of(a.event_type) for a in ACTIONS} == effect
    assert verb_of("compute.instance.soft_delete.end") == "update"  # why nova's own type is not stored
    assert set(LEGACY_TYPES.values()) == set(VERSIONED_TYPES.values()) == set(ACTIONS)


def test_other_services_keep_the_message_id_as_their_event_id() -> None:
    notification = sample("cinder/volume.create.end.json")
    first = map_notification(notification, cloud="region-one")
    again = map_notification(copy.deepcopy(notification), cloud="region-one")
    other_cloud = map_notification(notification, cloud="region-two")
    other_message = map_notification({**notification, "message_id": "msg-something-else"}, cloud="region-one")
    assert isinstance(first, dict) and isinstance(again, dict)
    assert first["event_id"] == again["event_id"]
    assert uuid.UUID(first["event_id"]).version == 5
    assert other_cloud["event_id"] != first["event_id"]  # type: ignore[index]
    assert other_message["event_id"] != first["event_id"]  # type: ignore[index]
    assert first["payload"]["openstack"]["message_id"] == notification["message_id"]


def test_nova_event_ids_come_from_the_action_so_both_formats_share_them() -> None:
    legacy_create = legacy("compute.instance.create.end", instance_id=NOVA_SERVER, tenant_id=NOVA_PROJECT,
                           created_at="2012-10-29 13:42:11", launched_at="2012-10-29 13:42:11",
                           instance_type="test_flavor", root_gb=1)
    versioned_create = versioned_sample("instance-create-end", message_id="v-1", timestamp=SAMPLE_TIME)
    one, two = (map_notification(m, cloud="c") for m in (legacy_create, versioned_create))
    assert isinstance(one, dict) and isinstance(two, dict)
    assert one == two  # same id, same content: the second is a plain duplicate at ingest
    other_cloud = map_notification(versioned_create, cloud="d")
    restore = map_notification(versioned_sample("instance-restore-end", message_id="v-2", timestamp=SAMPLE_TIME), cloud="c")
    assert isinstance(other_cloud, dict) and isinstance(restore, dict)
    assert len({one["event_id"], other_cloud["event_id"], restore["event_id"]}) == 3


def test_an_oslo_messaging_wrapper_is_unwrapped() -> None:
    notification = sample("cinder/volume.create.end.json")
    wrapped = {"oslo.version": "2.0", "oslo.message": json.dumps(notification)}
    assert map_notification(wrapped, cloud="c") == map_notification(notification, cloud="c")


def test_a_nova_delete_is_dated_at_terminated_at_where_nova_usage_ends() -> None:
    """Nova stamps terminated_at, then deleted_at when it destroys the row (about a second later on
    nova 34): the delete takes terminated_at, the instant the deleted listing shows as well."""
    notification = legacy_delete_end()
    notification["payload"].update(terminated_at="2012-05-08T20:24:13.402117", deleted_at="2012-05-08T20:24:14.811111")
    envelope = map_notification(notification, cloud="c")
    assert isinstance(envelope, dict) and envelope["occurred_at"] == "2012-05-08T20:24:13Z"
    versioned = versioned_sample("instance-delete-end", message_id="v-del", timestamp=SAMPLE_TIME,
                                 terminated_at="2012-10-29T13:42:10Z", deleted_at="2012-10-29T13:42:11Z")
    mapped = map_notification(versioned, cloud="c")
    assert isinstance(mapped, dict) and mapped["occurred_at"] == "2012-10-29T13:42:10Z"


def test_a_nova_delete_without_terminated_at_is_dated_at_deleted_at() -> None:
    notification = legacy_delete_end()
    notification["payload"]["terminated_at"] = ""
    envelope = map_notification(notification, cloud="c")
    assert isinstance(envelope, dict) and envelope["occurred_at"] == "2012-05-08T20:24:14Z"


def test_a_nova_create_is_billed_from_its_launch_and_its_request_is_kept_as_a_note() -> None:
    """create.start (the API request, created_at) is a note; create.end starts billing at launched_at."""
    request = legacy("compute.instance.create.end", created_at="2012-05-08 20:23:41", launched_at="",
                     state="building")
    request["event_type"] = "compute.instance.create.start"
    note = map_notification(request, cloud="c")
    create = map_notification(sample("nova/legacy/compute.instance.create.end.json"), cloud="c")
    versioned = map_notification(versioned_sample("instance-create-start", message_id="v-s", timestamp=SAMPLE_TIME),
                                 cloud="c")
    assert isinstance(note, dict) and isinstance(create, dict) and isinstance(versioned, dict)
    assert (note["event_type"], note["occurred_at"]) == ("compute.instance.create.start", "2012-05-08T20:23:41Z")
    assert verb_of(note["event_type"]) == "note" and note["payload"]["status"] == "build"
    assert (create["occurred_at"], verb_of(create["event_type"])) == ("2012-05-08T20:23:47Z", "create")
    assert note["event_id"] != create["event_id"]
    assert versioned["event_type"] == "compute.instance.create.start" and verb_of(versioned["event_type"]) == "note"
    assert versioned["occurred_at"] == "2012-10-29T13:42:11Z"  # the versioned sample's created_at


def test_a_nova_delete_with_neither_is_dated_at_the_message_time() -> None:
    notification = legacy_delete_end()
    notification["payload"].update(deleted_at="", terminated_at="")
    envelope = map_notification(notification, cloud="c")
    assert isinstance(envelope, dict) and envelope["occurred_at"] == "2012-05-08T20:24:14.824743Z"


def test_a_create_without_created_at_is_dated_at_the_message_time() -> None:
    notification = cinder("volume.create.end", created_at=None)
    envelope = map_notification(notification, cloud="c")
    assert isinstance(envelope, dict) and envelope["occurred_at"] == "2015-07-16T12:00:00Z"


def test_volume_type_ids_are_named_when_a_lookup_is_given() -> None:
    notification = sample("cinder/volume.create.end.json")
    named = map_notification(notification, cloud="c", volume_type_names={CEILO_VOLUME_TYPE: "ssd"})
    unknown = map_notification(notification, cloud="c", volume_type_names={"other": "hdd"})
    assert isinstance(named, dict) and named["payload"]["size"] == {"gb": 1, "volume_type": "ssd"}
    assert isinstance(unknown, dict) and unknown["payload"]["size"]["volume_type"] == CEILO_VOLUME_TYPE


# Every published sample of a type we do not record, and why it is ignored.
IGNORED_SAMPLES = [
    ("nova/legacy/compute.instance.exists.json", "audit"),
    ("nova/legacy/compute.instance.delete.start.json", "step"),
    ("cinder/volume.exists.json", "audit"),
    ("cinder/volume.attach.end.json", "no_usage_change"),
    ("glance/image.update.json", "no_usage_change"),
    ("glance/image.send.json", "no_usage_change"),
    ("neutron/floatingip.exists.json", "audit"),
    ("neutron/floatingip.update.start.json", "step"),
    ("neutron/network.create.end.json", "no_usage_change"),
    ("neutron/port.create.end.json", "no_usage_change"),
]
IGNORED_VERSIONED = [
    ("instance-exists", "audit"),
    ("instance-create-error", "error_priority"),
    ("instance-resize-end", "no_usage_change"),  # the move to the new host; the flavor changes at the finish
    ("aggregate-create-end", "no_usage_change"),
    ("keypair-create-end", "no_usage_change"),
    ("server_group-add_member", "no_usage_change"),
]


@pytest.mark.parametrize(("path", "code"), IGNORED_SAMPLES, ids=[p for p, _ in IGNORED_SAMPLES])
def test_published_samples_of_types_that_never_change_usage_are_ignored(path: str, code: str) -> None:
    result = map_notification(sample(path), cloud="c")
    assert isinstance(result, Unmapped) and (result.kind, result.code) == ("ignored", code), result


@pytest.mark.parametrize(("name", "code"), IGNORED_VERSIONED, ids=[n for n, _ in IGNORED_VERSIONED])
def test_nova_versioned_samples_of_types_that_never_change_usage_are_ignored(name: str, code: str) -> None:
    result = map_notification(versioned_sample(name, message_id="m", timestamp=SAMPLE_TIME), cloud="c")
    assert isinstance(result, Unmapped) and (result.kind, result.code) == ("ignored", code), result


@pytest.mark.parametrize(
    ("event_type", "kind", "code"),
    [
        ("compute.instance.delete.start", "ignored", "step"),
        ("compute.instance.reboot.end", "ignored", "no_usage_change"),
        ("instance.reboot.end", "ignored", "no_usage_change"),
        ("volume.transfer.accept.start", "ignored", "step"),
        ("volume.transfer.create.end", "ignored", "no_usage_change"),
        ("aggregate.cache_images.progress", "ignored", "step"),
        ("keypair.import.end", "ignored", "no_usage_change"),
        ("servergroup.addmember", "ignored", "no_usage_change"),
        ("task.success", "ignored", "no_usage_change"),
        ("metadef_namespace.create", "ignored", "no_usage_change"),
        ("snapshot.create.end", "ignored", "no_usage_change"),
        ("octavia.loadbalancer.update.end", "ignored", "no_usage_change"),
        ("identity.project.created", "unknown_type", "unknown_type"),
        ("magnum.cluster.create", "unknown_type", "unknown_type"),
    ],
)
def test_types_we_do_not_map_are_reported_not_guessed(event_type: str, kind: str, code: str) -> None:
    result = map_notification({**sample("nova/legacy/compute.instance.create.end.json"), "event_type": event_type},
                              cloud="c")
    assert isinstance(result, Unmapped)
    assert (result.kind, result.code, result.event_type) == (kind, code, event_type)
    assert str(result).startswith("unmapped: ") and event_type in str(result)


@pytest.mark.parametrize("priority", ["ERROR", "error", "CRITICAL"])
def test_an_error_priority_message_is_ignored_even_of_a_mapped_type(priority: str) -> None:
    message = {**sample("nova/legacy/compute.instance.create.end.json"), "priority": priority}
    result = map_notification(message, cloud="c")
    assert isinstance(result, Unmapped) and (result.kind, result.code) == ("ignored", "error_priority")
    assert priority in result.reason


def test_outcomes_are_counted_by_kind_and_reason() -> None:
    batch = [sample(path) for path, _ in IGNORED_SAMPLES] + [
        sample("cinder/volume.create.end.json"),
        {**sample("cinder/volume.create.end.json"), "event_type": "magnum.cluster.create"},
        {**sample("cinder/volume.create.end.json"), "message_id": None},
        versioned_sample("instance-create-error", message_id="e", timestamp=SAMPLE_TIME),
    ]
    envelopes, outcomes = map_notifications(batch, cloud="c")
    assert len(envelopes) == outcomes.mapped == 1
    assert outcomes.as_dict() == {
        "mapped": 1,
        "ignored": {"audit": 3, "error_priority": 1, "no_usage_change": 5, "step": 2},
        "unknown_type": {"unknown_type": 1},
        "invalid": {"invalid": 1},
    }
    assert isinstance(outcomes, NotificationOutcomes)


def test_sources_lists_every_fixture() -> None:
    listed = (SAMPLES / "SOURCES.md").read_text()
    for path in SAMPLES.rglob("*.json"):
        assert f"`{path.relative_to(SAMPLES).as_posix()}`" in listed, path


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"message_id": None}, "no message_id"),
        ({"payload": {"instance_id": None}}, "no instance_id"),
        ({"payload": {"memory_mb": "lots"}}, "memory_mb 'lots' is not a whole number"),
        ({"timestamp": "yesterday"}, "timestamp 'yesterday' is not a date and time"),
        ({"payload": {"launched_at": "2026-13-01 00:00:00"}}, "launched_at '2026-13-01 00:00:00' is not a date"),
        ({"payload": "not an object"}, "payload is not an object"),
    ],
)
def test_a_notification_that_lacks_what_the_mapping_needs_is_invalid(change: dict[str, Any], fragment: str) -> None:
    notification = legacy("compute.instance.create.end")
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(notification.get(key), dict):
            notification[key].update(value)
        else:
            notification[key] = value
    result = map_notification(notification, cloud="c")
    assert isinstance(result, Unmapped) and result.kind == "invalid"
    assert fragment in result.reason


def _break_uuid(data: dict[str, Any]) -> None:
    data["uuid"] = None


def _break_vcpus(data: dict[str, Any]) -> None:
    data["flavor"]["nova_object.data"]["vcpus"] = "two"


def _unwrap_flavor(data: dict[str, Any]) -> None:
    data["flavor"] = data["flavor"]["nova_object.data"]


@pytest.mark.parametrize(
    ("breaks", "fragment"),
    [
        (_break_uuid, "no uuid"),
        (_break_vcpus, "flavor.vcpus 'two' is not a whole number"),
        (_unwrap_flavor, "payload flavor has no nova_object.data object"),
    ],
)
def test_a_versioned_notification_that_lacks_what_the_mapping_needs_is_invalid(breaks, fragment: str) -> None:
    message = versioned_sample("instance-create-end", message_id="v", timestamp=SAMPLE_TIME)
    breaks(message["payload"]["nova_object.data"])
    result = map_notification(message, cloud="c")
    assert isinstance(result, Unmapped) and result.kind == "invalid"
    assert fragment in result.reason


def test_a_versioned_payload_is_read_as_its_data_with_the_flavor_fields_prefixed() -> None:
    # The reader looks fields up in place rather than copying the payload; it must read what the merged copy
    # held: every data field, the flavor's as "flavor.<name>", a flavor field over a data key spelled alike.
    sample_data = versioned_sample("instance-create-end", message_id="v", timestamp=SAMPLE_TIME)["payload"]
    data = {**sample_data["nova_object.data"], "flavor.vcpus": "shadowed"}
    flavor = data["flavor"]["nova_object.data"]
    merged = {**data, **{f"flavor.{key}": value for key, value in flavor.items()}}
    fields = _versioned_fields({"nova_object.data": data})
    assert dict(fields) == merged and len(fields) == len(merged)
    assert all(fields.get(key) == value and fields[key] == value for key, value in merged.items())
    assert fields.get("flavor.vcpus") == flavor["vcpus"] and fields.get("flavor.nothing") is None
    assert fields.get("nothing", "default") == "default"


def test_the_docs_mapping_table_names_every_mapped_type() -> None:
    """docs/openstack.md's event mapping table is the operator's reference: it must list each type we map."""
    from tally_pipeline.providers.openstack.notifications import _MAPPINGS

    docs = (Path(__file__).parents[3] / "docs" / "openstack.md").read_text()
    table = docs.split("### Event mapping", 1)[1].split("###", 1)[0]
    for event_type in [*LEGACY_TYPES, *VERSIONED_TYPES, *_MAPPINGS]:
        assert f"`{event_type}`" in table, event_type
    for action in ACTIONS:
        assert f"`{action.event_type}`" in table, action.event_type


def test_a_retype_and_a_transfer_change_the_volume_at_their_messages(store, registry) -> None:
    """Created (ceilometer's sample), retyped at 12:00, given to another project at 13:00: three
    intervals, the type and the project changing exactly at the messages, not at the next poll."""
    from tally_pipeline.services import projection, queries
    from tally_pipeline.services.ingest import Ingestor

    names = {CEILO_VOLUME_TYPE: "lvm", "9b6e2d8c-5f1a-4e3b-8c7d-0a1b2c3d4e5f": "ssd"}
    messages = [sample("cinder/volume.create.end.json"), sample("cinder/volume.transfer.accept.end.json"),
                sample("cinder/volume.retype.json")]  # any delivery order
    envelopes, outcomes = map_notifications(messages, cloud="region-one", volume_type_names=names)
    assert outcomes.mapped == 3
    assert Ingestor(store, registry).ingest(envelopes, origin="test").stored == 3
    projection.refresh(store)
    rows = queries.lifecycle(store, "region-one", "volume", CEILO_VOLUME)
    receiver = "0a1b2c3d4e5f40718293a4b5c6d7e8f9"
    iso = lambda at: at and at.strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    assert [(iso(r["start"]), iso(r["end"]), r["project_id"], r["size"]["volume_type"]) for r in rows] == [
        ("2014-10-28T09:31:20Z", "2015-07-16T12:00:00Z", CEILO_VOLUME_PROJECT, "lvm"),
        ("2015-07-16T12:00:00Z", "2015-07-16T13:00:00Z", CEILO_VOLUME_PROJECT, "ssd"),
        ("2015-07-16T13:00:00Z", None, receiver, "ssd"),
    ]
