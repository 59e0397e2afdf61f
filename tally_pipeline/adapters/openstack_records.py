"""One OpenStack API record (plain JSON) to our ``ListedResource`` / ``DeletedResource``.

Field names and time formats are each service's own: nova ``tenant_id`` and ``created``,
cinder ``os-vol-tenant-attr:tenant_id``, glance ``owner``, octavia ``provisioning_status``;
cinder and octavia times and nova's ``OS-SRV-USG:terminated_at`` carry no timezone (UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tally_pipeline.adapters.base import AdapterError, DeletedResource, ListedResource
from tally_pipeline.core.transitions import in_transition


def server(raw: dict[str, Any]) -> ListedResource:
    sid = _id(raw, "server")
    status = _text(raw.get("status"))
    if status.upper() == "UNKNOWN":
        # From microversion 2.69 a server in a cell nova cannot reach is listed with status
        # UNKNOWN and without its flavor: the listing is incomplete, so it is no listing.
        raise AdapterError(f"server {sid} is in an unreachable nova cell (status UNKNOWN): listing incomplete")
    task_state = raw.get("OS-EXT-STS:task_state") or None
    created_at, updated_at = _times(raw, "created", "updated", "server", sid)
    return ListedResource(
        resource_type="instance",
        resource_id=sid,
        project_id=_project(raw.get("tenant_id"), "server", sid),
        size=flavor_size(raw, sid),
        status=status,
        in_transition=in_transition("instance", status, task_state),
        created_at=created_at,
        updated_at=updated_at,
    )


def deleted_server(raw: dict[str, Any]) -> DeletedResource:
    sid = _id(raw, "server")
    created_at, updated_at = _times(raw, "created", "updated", "server", sid)
    # terminated_at is empty for a server that never launched; nova stamps ``updated`` at deletion.
    deleted_at = _instant(raw.get("OS-SRV-USG:terminated_at"), "server", sid) or updated_at
    if deleted_at is None:
        raise AdapterError(f"malformed server record {sid}: deleted, but neither terminated_at nor updated is set")
    return DeletedResource(
        resource_type="instance",
        resource_id=sid,
        project_id=_project(raw.get("tenant_id"), "server", sid),
        size=flavor_size(raw, sid),
        created_at=created_at,
        deleted_at=deleted_at,
    )


def flavor_size(raw: dict[str, Any], sid: str) -> dict[str, Any]:
    flavor = raw.get("flavor")
    name = flavor.get("original_name") if isinstance(flavor, dict) else None
    if not name:
        raise AdapterError(f"server {sid} has no embedded flavor (nova answered below microversion 2.47)")
    return {
        "flavor_name": str(name),
        "vcpus": _whole(flavor.get("vcpus"), "flavor vcpus", "server", sid),
        "ram_mb": _whole(flavor.get("ram"), "flavor ram", "server", sid),
        "disk_gb": _whole(flavor.get("disk"), "flavor disk", "server", sid),
    }


def volume(raw: dict[str, Any]) -> ListedResource:
    vid = _id(raw, "volume")
    status = _text(raw.get("status"))
    created_at, updated_at = _times(raw, "created_at", "updated_at", "volume", vid)
    volume_type = raw.get("volume_type")
    return ListedResource(
        resource_type="volume",
        resource_id=vid,
        project_id=_project(raw.get("os-vol-tenant-attr:tenant_id"), "volume", vid),
        size={"gb": _whole(raw.get("size"), "size", "volume", vid),
              "volume_type": None if volume_type is None else str(volume_type)},
        status=status,
        in_transition=in_transition("volume", status),
        created_at=created_at,
        updated_at=updated_at,
    )


def floating_ip(raw: dict[str, Any]) -> ListedResource:
    fid = _id(raw, "floating IP")
    status = _text(raw.get("status"))
    created_at, updated_at = _times(raw, "created_at", "updated_at", "floating IP", fid)
    network = raw.get("floating_network_id")
    return ListedResource(
        resource_type="floating_ip",
        resource_id=fid,
        project_id=_project(raw.get("project_id") or raw.get("tenant_id"), "floating IP", fid),
        size={"floating_network_id": None if network is None else str(network)},
        status=status,
        in_transition=in_transition("floating_ip", status),
        created_at=created_at,
        updated_at=updated_at,
    )


def image(raw: dict[str, Any]) -> ListedResource:
    iid = _id(raw, "image")
    status = _text(raw.get("status"))
    created_at, updated_at = _times(raw, "created_at", "updated_at", "image", iid)
    size = raw.get("size")
    return ListedResource(
        resource_type="image",
        resource_id=iid,
        project_id=_project(raw.get("owner"), "image", iid),
        size={"bytes": None if size is None else _whole(size, "size", "image", iid)},
        status=status,
        in_transition=in_transition("image", status),
        created_at=created_at,
        updated_at=updated_at,
    )


def load_balancer(raw: dict[str, Any]) -> ListedResource:
    lid = _id(raw, "load balancer")
    # provisioning_status carries the transitions (PENDING_*); operating_status is only health.
    status = _text(raw.get("provisioning_status"))
    created_at, updated_at = _times(raw, "created_at", "updated_at", "load balancer", lid)
    flavor_id = raw.get("flavor_id")
    return ListedResource(
        resource_type="load_balancer",
        resource_id=lid,
        project_id=_project(raw.get("project_id") or raw.get("tenant_id"), "load balancer", lid),
        size={"flavor_id": str(flavor_id) if flavor_id else None},
        status=status,
        in_transition=in_transition("load_balancer", status),
        created_at=created_at,
        updated_at=updated_at,
    )


def parse_time(value: str) -> datetime:
    """OpenStack's timestamps: with ``Z``, with an offset, or with none at all (then UTC)."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


# --- field checks ------------------------------------------------------------------------------


def _id(raw: Any, what: str) -> str:
    if not isinstance(raw, dict):
        raise AdapterError(f"malformed {what} record: expected an object, got {type(raw).__name__}")
    value = raw.get("id")
    if not isinstance(value, str) or not value:
        raise AdapterError(f"malformed {what} record: no id")
    return value


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _instant(value: Any, what: str, rid: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise AdapterError(f"malformed {what} record {rid}: time {value!r} is not a string")
    try:
        return parse_time(value)
    except ValueError:
        raise AdapterError(f"malformed {what} record {rid}: {value!r} is not a date and time") from None


def _times(raw: dict[str, Any], created: str, updated: str, what: str, rid: str) -> tuple[datetime, datetime | None]:
    created_at = _instant(raw.get(created), what, rid)
    if created_at is None:
        raise AdapterError(f"malformed {what} record {rid}: no {created}")
    return created_at, _instant(raw.get(updated), what, rid)


def _project(value: Any, what: str, rid: str) -> str:
    if not value:
        raise AdapterError(f"malformed {what} record {rid}: no project")
    return str(value)


def _whole(value: Any, field: str, what: str, rid: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise AdapterError(f"malformed {what} record {rid}: {field} {value!r} is not a whole number")
    return int(value)
