"""How each OpenStack service spells a resource: ``PlatformRecord`` rendered as nova, cinder, neutron,
glance and octavia JSON, in each service's own field names and time formats.

The formats differ on purpose (nova ``created`` has a ``Z``, cinder and octavia times carry no
timezone, nova's ``terminated_at`` has microseconds and no timezone), because a client has to
cope with exactly these differences.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.providers.simulated.platform import PlatformRecord

NOVA_FLAVOR_MICROVERSION = (2, 47)

_VM_STATE = {
    "ACTIVE": "active",
    "BUILD": "building",
    "SHUTOFF": "stopped",
    "PAUSED": "paused",
    "SUSPENDED": "suspended",
    "RESIZE": "active",
    "VERIFY_RESIZE": "resized",
    "REVERT_RESIZE": "resized",
    "ERROR": "error",
    "DELETED": "deleted",
    "SOFT_DELETED": "soft-delete",
    "SHELVED": "shelved",
    "SHELVED_OFFLOADED": "shelved_offloaded",
    "RESCUE": "rescued",
}
# nova's power_state codes (nova/compute/power_state.py) as the libvirt driver reports them:
# RUNNING 1, PAUSED 3, SHUTDOWN 4 (also a suspended guest: libvirt saves it and stops it), NOSTATE 0.
_POWER_STATE = {"PAUSED": 3, "SHUTOFF": 4, "SUSPENDED": 4, "SHELVED": 4, "SHELVED_OFFLOADED": 4,
                "DELETED": 0, "SOFT_DELETED": 0}
_NAMESPACE = uuid.UUID("5b0f2e5c-3b1e-4d8e-9a59-0c1a3f6e7d21")


def parse_microversion(text: str) -> tuple[int, int]:
    major, _, minor = text.strip().partition(".")
    return int(major), int(minor or 0)


def format_microversion(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def time_z(value: datetime | None) -> str | None:
    """Nova ``created``/``updated``, neutron and glance: seconds and a ``Z``."""
    return None if value is None else _utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def time_naive_micro(value: datetime | None) -> str | None:
    """Cinder times and nova's ``OS-SRV-USG`` times: microseconds, no timezone (UTC implied)."""
    return None if value is None else _utc(value).strftime("%Y-%m-%dT%H:%M:%S.%f")


def time_naive(value: datetime | None) -> str | None:
    """Octavia: seconds, no timezone."""
    return None if value is None else _utc(value).strftime("%Y-%m-%dT%H:%M:%S")


def stable_id(*parts: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "/".join(parts)))


def volume_type_id(name: str) -> str:
    return stable_id("volume_type", name)


def _address(resource_id: str) -> str:
    digest = hashlib.blake2b(resource_id.encode(), digest_size=2).digest()
    return f"203.0.{digest[0] % 114}.{1 + digest[1] % 253}"


def server_json(record: PlatformRecord, *, microversion: tuple[int, int], base_url: str) -> dict[str, Any]:
    size = record.size
    flavor_name = str(size.get("flavor_name", "unknown"))
    if microversion >= NOVA_FLAVOR_MICROVERSION:
        flavor: dict[str, Any] = {
            "original_name": flavor_name,
            "vcpus": size.get("vcpus"),
            "ram": size.get("ram_mb"),
            "disk": size.get("disk_gb"),
            "ephemeral": 0,
            "swap": 0,
            "extra_specs": {"hw:cpu_policy": "shared"},
        }
    else:
        flavor_id = stable_id("flavor", flavor_name)
        flavor = {
            "id": flavor_id,
            "links": [{"rel": "bookmark", "href": f"{base_url}/flavors/{flavor_id}"}],
        }
    deleted = record.status == "DELETED"
    gone = deleted or record.status == "SOFT_DELETED"
    return {
        "id": record.resource_id,
        "name": record.name or f"server-{record.resource_id[:8]}",
        "status": record.status,
        "tenant_id": record.project_id,
        "user_id": stable_id("user", record.project_id),
        "created": time_z(record.created_at),
        "updated": time_z(record.updated_at),
        "flavor": flavor,
        "image": {"id": stable_id("image", "cirros"), "links": []},
        "addresses": {},
        "metadata": {},
        # an offloaded server has no host (nova's shelve_offload clears host and node)
        "hostId": "" if gone or record.status == "SHELVED_OFFLOADED"
        else hashlib.sha224(record.project_id.encode()).hexdigest(),
        "key_name": None,
        "config_drive": "",
        "progress": 0,
        "locked": False,
        "description": None,
        "tags": [],
        "links": [
            {"rel": "self", "href": f"{base_url}/servers/{record.resource_id}"},
            {"rel": "bookmark", "href": f"{base_url}/servers/{record.resource_id}"},
        ],
        "OS-DCF:diskConfig": "MANUAL",
        "OS-EXT-AZ:availability_zone": "nova",
        "OS-EXT-STS:power_state": _POWER_STATE.get(record.status, 1),
        "OS-EXT-STS:task_state": record.task_state,
        "OS-EXT-STS:vm_state": _VM_STATE.get(record.status, "active"),
        # nova's usage runs launched_at → terminated_at (os-simple-tenant-usage); both with microseconds
        "OS-SRV-USG:launched_at": time_naive_micro(launched_at(record)),
        # nova stamps terminated_at on a hard delete only; a soft delete shows in ``updated``
        "OS-SRV-USG:terminated_at": time_naive_micro(record.deleted_at) if deleted else None,
        "os-extended-volumes:volumes_attached": [],
        "security_groups": [] if deleted else [{"name": "default"}],
    }


def launched_at(record: PlatformRecord) -> datetime | None:
    """Nova's launch of a server: the record's own, else its creation, except while it is still
    building for the first time (nova stamps launched_at when the build finishes: null before)."""
    if record.launched_at is not None:
        return record.launched_at
    return None if record.status == "BUILD" else record.created_at


def server_unknown_json(record: PlatformRecord, *, base_url: str) -> dict[str, Any]:
    """Nova's minimal record (microversion 2.69+) for a server of a cell it cannot reach."""
    return {
        "id": record.resource_id,
        "status": "UNKNOWN",
        "tenant_id": record.project_id,
        "created": time_z(record.created_at),
        "links": [
            {"rel": "self", "href": f"{base_url}/servers/{record.resource_id}"},
            {"rel": "bookmark", "href": f"{base_url}/servers/{record.resource_id}"},
        ],
    }


def volume_json(record: PlatformRecord, *, base_url: str) -> dict[str, Any]:
    return {
        "id": record.resource_id,
        "name": record.name or None,
        "description": None,
        "status": record.status,
        "size": record.size.get("gb"),
        "volume_type": record.size.get("volume_type"),
        "volume_type_id": volume_type_id(record.size["volume_type"]) if record.size.get("volume_type") else None,
        "os-vol-tenant-attr:tenant_id": record.project_id,
        "user_id": stable_id("user", record.project_id),
        "created_at": time_naive_micro(record.created_at),
        "updated_at": time_naive_micro(record.updated_at),
        "availability_zone": "nova",
        "bootable": "false",
        "encrypted": False,
        "multiattach": False,
        "attachments": [],
        "metadata": {},
        "snapshot_id": None,
        "source_volid": None,
        "consistencygroup_id": None,
        "replication_status": None,
        "migration_status": None,
        "os-vol-host-attr:host": "cinder@lvm#lvm",
        "links": [{"rel": "self", "href": f"{base_url}/volumes/{record.resource_id}"}],
    }


def floating_ip_json(record: PlatformRecord) -> dict[str, Any]:
    return {
        "id": record.resource_id,
        "tenant_id": record.project_id,
        "project_id": record.project_id,
        "floating_ip_address": _address(record.resource_id),
        "floating_network_id": record.size.get("floating_network_id"),
        "router_id": None,
        "port_id": None,
        "fixed_ip_address": None,
        "status": record.status,
        "description": "",
        "dns_domain": "",
        "dns_name": "",
        "qos_policy_id": None,
        "port_details": None,
        "tags": [],
        "revision_number": 0,
        "created_at": time_z(record.created_at),
        "updated_at": time_z(record.updated_at),
    }


def image_json(record: PlatformRecord) -> dict[str, Any]:
    return {
        "id": record.resource_id,
        "name": record.name or None,
        "status": record.status,
        "owner": record.project_id,
        "size": record.size.get("bytes"),
        "virtual_size": None,
        "visibility": "private",
        "protected": False,
        "os_hidden": False,
        "disk_format": "qcow2",
        "container_format": "bare",
        "checksum": None,
        "os_hash_algo": None,
        "os_hash_value": None,
        "min_disk": 0,
        "min_ram": 0,
        "tags": [],
        "created_at": time_z(record.created_at),
        "updated_at": time_z(record.updated_at),
        "self": f"/v2/images/{record.resource_id}",
        "file": f"/v2/images/{record.resource_id}/file",
        "schema": "/v2/schemas/image",
    }


def load_balancer_json(record: PlatformRecord) -> dict[str, Any]:
    return {
        "id": record.resource_id,
        "name": record.name or "",
        "description": "",
        "project_id": record.project_id,
        "provisioning_status": record.status,
        "operating_status": "ONLINE" if record.status == "ACTIVE" else "OFFLINE",
        "admin_state_up": True,
        "provider": "amphora",
        "flavor_id": record.size.get("flavor_id"),
        "vip_address": _address(record.resource_id),
        "vip_port_id": stable_id("port", record.resource_id),
        "vip_subnet_id": stable_id("subnet", record.project_id),
        "vip_network_id": stable_id("network", record.project_id),
        "listeners": [],
        "pools": [],
        "availability_zone": None,
        "tags": [],
        "created_at": time_naive(record.created_at),
        "updated_at": time_naive(record.updated_at),
    }


# --- version documents -------------------------------------------------------------------------


def keystone_versions(root: str) -> dict[str, Any]:
    return {"versions": {"values": [_keystone_version(root)]}}


def keystone_version(root: str) -> dict[str, Any]:
    return {"version": _keystone_version(root)}


def _keystone_version(root: str) -> dict[str, Any]:
    return {
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": f"{root}/v3/"}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    }


def nova_version(root: str, max_version: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "v2.1",
        "status": "CURRENT",
        "version": format_microversion(max_version),
        "min_version": "2.1",
        "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": f"{root}/v2.1/"}],
    }


def cinder_version(root: str, max_version: tuple[int, int]) -> dict[str, Any]:
    return {
        "id": "v3.0",
        "status": "CURRENT",
        "version": format_microversion(max_version),
        "min_version": "3.0",
        "updated": "2023-08-31T00:00:00Z",
        "links": [{"rel": "self", "href": f"{root}/v3/"}],
    }


def plain_version(version_id: str, href: str, status: str = "CURRENT") -> dict[str, Any]:
    """Glance, neutron and octavia: a version without microversions."""
    return {"id": version_id, "status": status, "links": [{"rel": "self", "href": href}]}


def nova_time(value: datetime | None) -> str | None:
    """An instant as nova's instance actions write it: no offset (UTC), to the whole second (its database
    keeps no fraction: MySQL/MariaDB ``DATETIME``), the microseconds shown as zeros."""
    if value is None:
        return None
    return value.astimezone(UTC).replace(tzinfo=None, microsecond=0).strftime("%Y-%m-%dT%H:%M:%S.%f")


def instance_action_json(action: Any, server_id: str, project_id: str, *, microversion: tuple[int, int],
                         events: bool = False, admin: bool = False) -> dict[str, Any]:
    """One ``instanceAction`` (a ``FakeAction``) as nova shows it; with ``events`` as its detail does."""
    finishes = [finish for _, _, finish in action.events if finish is not None]
    body: dict[str, Any] = {
        "action": action.action, "instance_uuid": server_id, "message": "Error" if action.failed else None,
        "project_id": project_id, "request_id": action.request_id, "start_time": nova_time(action.start),
        "user_id": stable_id("user", project_id),
    }
    if microversion >= (2, 58):
        body["updated_at"] = nova_time(max(finishes, default=action.start))
    if events:
        shown = []
        for n, (name, started, finish) in enumerate(action.events):
            last = n == len(action.events) - 1
            event: dict[str, Any] = {"event": name, "start_time": nova_time(started), "finish_time": nova_time(finish),
                                     "result": None if finish is None else ("Error" if action.failed and last
                                                                            else "Success")}
            if admin:
                event["traceback"] = None
            if microversion >= (2, 62):
                event["hostId"] = hashlib.sha224(project_id.encode()).hexdigest()
                if admin:
                    event["host"] = "compute-1"
            if microversion >= (2, 84):
                event["details"] = None
            shown.append(event)
        body["events"] = shown
    return body
