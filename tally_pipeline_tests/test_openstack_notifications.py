"""OpenStack notifications (legacy shape, as each service emits it) mapped to our envelope.

The payloads are written by hand after the services' notification code and docs: nova's
``info_from_instance``, cinder's ``_usage_from_volume`` (type by *id*), neutron's API notifier,
glance's ``format_image_notification`` and octavia's provider-driver load balancer dict.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

from tally_pipeline.collector.openstack import Unmapped, map_notification
from tally_pipeline.core.envelope import EventRecord, validate_event
from tally_pipeline.schemas import default_registry

PROJECT = "6d2bb2ba2f2d4f0c9e3b1d5c0a7e8f90"
USER = "0c5e4a1f9b2d4e7a8c3b6d9e1f2a4b5c"
SERVER = "b1946ac9-2ef6-4f7a-9b1e-3c2d5e6f7a8b"
VOLUME = "8f0e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
SSD_TYPE = "a3f1c2e4-6b5d-4e7f-8a9b-0c1d2e3f4a5b"
FIP = "2a4c6e8f-1b3d-4f5a-9c7e-0d2f4a6b8c1e"
EXT_NET = "e7c1b2a3-4d5e-4f60-8a9b-c0d1e2f3a4b5"
IMAGE = "f3b9a1c2-7d4e-4b5f-8a6c-9d0e1f2a3b4c"
LB = "5c8e1f2a-3b4d-4e6f-9a0b-1c2d3e4f5a6b"


def _nova(event_type: str, message_id: str, timestamp: str, **payload: Any) -> dict[str, Any]:
    body = {
        "tenant_id": PROJECT, "user_id": USER, "instance_id": SERVER, "display_name": "web-1",
        "hostname": "web-1", "reservation_id": "r-3kq9x2mb", "host": "cmp-0042", "node": "cmp-0042.example.org",
        "availability_zone": "nova", "cell_name": "", "instance_type": "m1.small", "instance_type_id": 2,
        "instance_flavor_id": "2", "memory_mb": 2048, "vcpus": 1, "root_gb": 20, "ephemeral_gb": 0,
        "disk_gb": 20, "state": "active", "state_description": "", "progress": "",
        "created_at": "2026-03-01 08:00:12+00:00", "launched_at": "2026-03-01T08:00:40.981234",
        "terminated_at": "", "deleted_at": "", "architecture": "x86_64", "os_type": None, "kernel_id": "",
        "ramdisk_id": "", "image_ref_url": "http://glance.example.org:9292/images/" + IMAGE,
        "image_meta": {"base_image_ref": IMAGE, "min_disk": "20", "container_format": "bare"},
        "metadata": {}, "access_ip_v4": None, "access_ip_v6": None, "message": "Success",
        "fixed_ips": [{"address": "10.0.0.12", "type": "fixed", "version": 4, "label": "private",
                       "vif_mac": "fa:16:3e:11:22:33", "floating_ips": [], "meta": {}}],
    }
    body.update(payload)
    return {
        "message_id": message_id, "event_type": event_type, "publisher_id": "compute.cmp-0042",
        "priority": "INFO", "timestamp": timestamp, "_context_request_id": "req-7d1c0f3e",
        "_context_project_id": PROJECT, "_context_user_id": USER, "payload": body,
    }


def _cinder(event_type: str, message_id: str, timestamp: str, **payload: Any) -> dict[str, Any]:
    body = {
        "tenant_id": PROJECT, "user_id": USER, "host": "cinder-vol-01@lvm#lvm", "availability_zone": "nova",
        "volume_id": VOLUME, "volume_type": SSD_TYPE, "display_name": "data",
        "launched_at": "2026-03-01T08:05:09.212134+00:00", "created_at": "2026-03-01T08:05:01+00:00",
        "status": "available", "snapshot_id": None, "size": 100, "replication_status": None,
        "replication_extended_status": None, "replication_driver_data": None, "metadata": [],
        "volume_attachment": [],
    }
    body.update(payload)
    return {"message_id": message_id, "event_type": event_type, "publisher_id": "volume.cinder-vol-01@lvm",
            "priority": "INFO", "timestamp": timestamp, "payload": body}


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


# (notification, what the envelope must say) — expected values written from the payloads above.
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("nova create", _nova("compute.instance.create.end", "msg-nova-create", "2026-03-01 08:00:41.512306"),
     {"resource_type": "instance", "resource_id": SERVER, "project_id": PROJECT, "verb": "create",
      "occurred_at": "2026-03-01T08:00:12Z",  # created_at, not the message's time
      "size": {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}}),
    ("nova delete", _nova("compute.instance.delete.end", "msg-nova-delete", "2026-03-02 10:15:04.000211",
                          state="deleted", terminated_at="2026-03-02T10:15:02.871234",
                          deleted_at="2026-03-02 10:15:03.117311+00:00"),
     {"resource_type": "instance", "resource_id": SERVER, "project_id": PROJECT, "verb": "delete",
      "occurred_at": "2026-03-02T10:15:03.117311Z",
      "size": {"flavor_name": "m1.small", "vcpus": 1, "ram_mb": 2048, "disk_gb": 20}}),
    ("nova resize", _nova("compute.instance.resize.confirm.end", "msg-nova-resize", "2026-03-01 12:30:00.250000",
                          instance_type="m1.large", memory_mb=8192, vcpus=4, root_gb=80, disk_gb=80),
     {"resource_type": "instance", "resource_id": SERVER, "project_id": PROJECT, "verb": "update",
      "occurred_at": "2026-03-01T12:30:00.250000Z",
      "size": {"flavor_name": "m1.large", "vcpus": 4, "ram_mb": 8192, "disk_gb": 80}}),
    ("cinder create", _cinder("volume.create.end", "msg-cinder-create", "2026-03-01 08:05:09.331812"),
     {"resource_type": "volume", "resource_id": VOLUME, "project_id": PROJECT, "verb": "create",
      "occurred_at": "2026-03-01T08:05:01Z", "size": {"gb": 100, "volume_type": SSD_TYPE}}),
    ("cinder resize", _cinder("volume.resize.end", "msg-cinder-resize", "2026-03-01 09:00:00.5", size=200),
     {"resource_type": "volume", "resource_id": VOLUME, "project_id": PROJECT, "verb": "update",
      "occurred_at": "2026-03-01T09:00:00.500000Z", "size": {"gb": 200, "volume_type": SSD_TYPE}}),
    ("cinder delete", _cinder("volume.delete.end", "msg-cinder-delete", "2026-03-02 07:45:10.000001",
                              status="deleting"),
     {"resource_type": "volume", "resource_id": VOLUME, "project_id": PROJECT, "verb": "delete",
      "occurred_at": "2026-03-02T07:45:10.000001Z", "size": {"gb": 100, "volume_type": SSD_TYPE}}),
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
    ("glance upload", _glance("image.upload", "msg-img-upload", "2026-03-01 08:09:29.900000"),
     {"resource_type": "image", "resource_id": IMAGE, "project_id": PROJECT, "verb": "update",
      "occurred_at": "2026-03-01T08:09:29.900000Z", "size": {"bytes": 2_361_393_152}}),
    ("glance activate", _glance("image.activate", "msg-img-activate", "2026-03-01 08:09:30.100000"),
     {"resource_type": "image", "resource_id": IMAGE, "project_id": PROJECT, "verb": "update",
      "occurred_at": "2026-03-01T08:09:30.100000Z", "size": {"bytes": 2_361_393_152}}),
    ("glance delete", _glance("image.delete", "msg-img-delete", "2026-03-03 09:00:01.000000", status="deleted",
                              deleted=True, deleted_at="2026-03-03T09:00:00Z"),
     {"resource_type": "image", "resource_id": IMAGE, "project_id": PROJECT, "verb": "delete",
      "occurred_at": "2026-03-03T09:00:00Z", "size": {"bytes": 2_361_393_152}}),
    ("octavia create", _octavia("octavia.loadbalancer.create.end", "msg-lb-create", "2026-03-01 08:10:00.000000"),
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
    assert envelope["event_type"] == notification["event_type"]
    assert envelope["cloud"] == "region-one" and envelope["source"] == "collector"
    for key in ("resource_type", "resource_id", "project_id", "occurred_at"):
        assert envelope[key] == expected[key], key
    assert envelope["payload"].get("size") == expected["size"]
    assert envelope["payload"]["openstack"]["message_id"] == notification["message_id"]


@pytest.mark.parametrize(("name", "notification", "expected"), CASES, ids=IDS)
def test_every_mapped_envelope_passes_validation(name: str, notification: dict[str, Any], expected: dict[str, Any]) -> None:
    envelope = map_notification(notification, cloud="region-one")
    record = validate_event(envelope, default_registry())
    assert isinstance(record, EventRecord), record
    assert record.verb == expected["verb"]


def test_the_event_id_is_a_stable_function_of_cloud_and_message_id() -> None:
    _, notification, _ = CASES[0]
    first = map_notification(notification, cloud="region-one")
    again = map_notification(copy.deepcopy(notification), cloud="region-one")
    other_cloud = map_notification(notification, cloud="region-two")
    other_message = map_notification({**notification, "message_id": "msg-something-else"}, cloud="region-one")
    assert isinstance(first, dict) and isinstance(again, dict)
    assert first["event_id"] == again["event_id"]
    assert uuid.UUID(first["event_id"]).version == 5
    assert other_cloud["event_id"] != first["event_id"]  # type: ignore[index]
    assert other_message["event_id"] != first["event_id"]  # type: ignore[index]


def test_an_oslo_messaging_wrapper_is_unwrapped() -> None:
    _, notification, _ = CASES[3]
    wrapped = {"oslo.version": "2.0", "oslo.message": json.dumps(notification)}
    assert map_notification(wrapped, cloud="c") == map_notification(notification, cloud="c")


def test_a_nova_delete_without_deleted_at_is_dated_at_terminated_at() -> None:
    notification = _nova("compute.instance.delete.end", "msg-x", "2026-03-02 10:15:04.000211",
                         terminated_at="2026-03-02T10:15:02.871234", deleted_at="")
    envelope = map_notification(notification, cloud="c")
    assert isinstance(envelope, dict) and envelope["occurred_at"] == "2026-03-02T10:15:02.871234Z"


def test_a_create_without_created_at_is_dated_at_the_message_time() -> None:
    notification = _cinder("volume.create.end", "msg-y", "2026-03-01 08:05:09.331812", created_at=None)
    envelope = map_notification(notification, cloud="c")
    assert isinstance(envelope, dict) and envelope["occurred_at"] == "2026-03-01T08:05:09.331812Z"


def test_volume_type_ids_are_named_when_a_lookup_is_given() -> None:
    _, notification, _ = CASES[3]
    named = map_notification(notification, cloud="c", volume_type_names={SSD_TYPE: "ssd"})
    unknown = map_notification(notification, cloud="c", volume_type_names={"other": "hdd"})
    assert isinstance(named, dict) and named["payload"]["size"] == {"gb": 100, "volume_type": "ssd"}
    assert isinstance(unknown, dict) and unknown["payload"]["size"]["volume_type"] == SSD_TYPE


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [
        ("compute.instance.create.start", "ignored"),
        ("compute.instance.exists", "ignored"),
        ("volume.attach.end", "ignored"),
        ("octavia.loadbalancer.update.end", "ignored"),
        ("identity.project.created", "unknown_type"),
        ("magnum.cluster.create", "unknown_type"),
    ],
)
def test_types_we_do_not_map_are_reported_not_guessed(event_type: str, kind: str) -> None:
    result = map_notification(_nova(event_type, "msg-z", "2026-03-01 08:00:00.000000"), cloud="c")
    assert isinstance(result, Unmapped)
    assert result.kind == kind and result.event_type == event_type
    assert str(result).startswith("unmapped: ") and event_type in str(result)


def test_a_versioned_nova_notification_is_reported_with_the_setting_to_change() -> None:
    versioned = {
        "message_id": "msg-v", "event_type": "instance.create.end", "publisher_id": "nova-compute:cmp-0042",
        "priority": "INFO", "timestamp": "2026-03-01 08:00:41.512306",
        "payload": {"nova_object.name": "InstanceCreatePayload", "nova_object.namespace": "nova",
                    "nova_object.version": "1.12", "nova_object.data": {"uuid": SERVER}},
    }
    result = map_notification(versioned, cloud="c")
    assert isinstance(result, Unmapped) and result.kind == "versioned"
    assert "notification_format" in result.reason


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"message_id": None}, "no message_id"),
        ({"payload": {"instance_id": None}}, "no instance_id"),
        ({"payload": {"memory_mb": "lots"}}, "memory_mb 'lots' is not a whole number"),
        ({"timestamp": "yesterday"}, "timestamp 'yesterday' is not a date and time"),
        ({"payload": {"created_at": "2026-13-01 00:00:00"}}, "is not a date and time"),
        ({"payload": "not an object"}, "payload is not an object"),
    ],
)
def test_a_notification_that_lacks_what_the_mapping_needs_is_invalid(change: dict[str, Any], fragment: str) -> None:
    notification = _nova("compute.instance.create.end", "msg-bad", "2026-03-01 08:00:41.512306")
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(notification.get(key), dict):
            notification[key].update(value)
        else:
            notification[key] = value
    result = map_notification(notification, cloud="c")
    assert isinstance(result, Unmapped) and result.kind == "invalid"
    assert fragment in result.reason
