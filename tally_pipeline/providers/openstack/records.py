"""One OpenStack API record (plain JSON) to our ``ListedResource`` / ``DeletedResource``.

Field names and time formats are each service's own: nova ``tenant_id`` and ``created``,
cinder ``os-vol-tenant-attr:tenant_id``, glance ``owner``, octavia ``provisioning_status``;
cinder and octavia times and nova's ``OS-SRV-USG:terminated_at`` carry no timezone (UTC).

A record without a usable id fails its type (nothing can be said about what it is). A record with
an id but an unreadable field (glance allows a null ``owner``; neutron without its timestamp
extension has no ``created_at``) raises ``SkipItem``: the item is present, so it is counted as
skipped and never deleted by absence, and the rest of its type lists on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tally_pipeline.providers.interface import AdapterError, DeletedResource, ListedResource, SkipItem
from tally_pipeline.providers.openstack.actions import ActionEvent, InstanceAction
from tally_pipeline.providers.openstack.clocks import on_clock
from tally_pipeline.providers.openstack.nova_notifications import api_status
from tally_pipeline.providers.openstack.pages import MalformedPage
from tally_pipeline.providers.openstack.statuses import in_transition, never_ran

#: Nova's placeholder status (microversion 2.69+) for a server in a cell it cannot reach.
UNKNOWN = "UNKNOWN"
#: What nova's deleted listing holds: hard-deleted servers, and soft-deleted ones awaiting reclaim.
DELETED_STATUSES = frozenset({"DELETED", "SOFT_DELETED"})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def server(raw: dict[str, Any]) -> ListedResource:
    sid = _id(raw, "server")
    status = _text(raw.get("status"))
    if status.upper() == UNKNOWN:
        # From microversion 2.69 a server in a cell nova cannot reach is listed as a minimal record
        # (id, status UNKNOWN, tenant_id, created): present, size unknown.
        return ListedResource(
            resource_type="instance", resource_id=sid, project_id=_text(raw.get("tenant_id")), size={},
            status=status, in_transition=False, created_at=_loose_instant(raw.get("created")) or _EPOCH,
            unknown=True,
        )
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
        never_ran=never_ran("instance", status, launched=_launched(raw)),
        started_at=_launched_at(raw, sid),
    )


def _launched(raw: dict[str, Any]) -> bool | None:
    """Nova stamps ``OS-SRV-USG:launched_at`` when a server first runs: null means it never did.

    A record without the field at all says nothing either way (None).
    """
    if "OS-SRV-USG:launched_at" not in raw:
        return None
    return raw["OS-SRV-USG:launched_at"] not in (None, "")


def _launched_at(raw: dict[str, Any], sid: str) -> datetime | None:
    """Nova's launch time, where its usage starts (``providers/openstack/clocks.py``); None before the first launch."""
    launched = _instant(raw.get("OS-SRV-USG:launched_at"), "server", sid)
    return None if launched is None else on_clock("instance", launched)


def _life_status(raw: dict[str, Any]) -> str | None:
    """The status a deleted server's record shows for its life, lower-cased: None when it shows only
    the deletion (``DELETED`` / ``SOFT_DELETED``, vm_state ``deleted`` / ``soft-delete``), as nova
    shows every server it deleted through its delete path."""
    status = _text(raw.get("status")).upper()
    if status and status not in DELETED_STATUSES:
        return status.lower()
    shown = api_status(_text(raw.get("OS-EXT-STS:vm_state")) or None)
    return None if shown is None or shown in ("deleted", "soft_deleted") else shown


def deleted_server(raw: dict[str, Any]) -> DeletedResource:
    """A server of nova's deleted listing: ``DELETED``, or ``SOFT_DELETED`` (billing ends at the soft delete)."""
    sid = _id(raw, "server")
    created_at, updated_at = _times(raw, "created", "updated", "server", sid)
    # terminated_at is empty for a server that never launched, and for a soft-deleted one; nova
    # stamps ``updated`` at either deletion.
    deleted_at = deletion_time(raw, sid, updated_at)
    if deleted_at is None:
        raise _skip("server", sid, "no_deleted_at", "deleted, but neither terminated_at nor updated is set")
    return DeletedResource(
        resource_type="instance",
        resource_id=sid,
        project_id=_project(raw.get("tenant_id"), "server", sid),
        size=flavor_size(raw, sid),
        created_at=created_at,
        deleted_at=deleted_at,
        # a deleted server keeps its launch time: without one it was a build that never ran
        never_ran="never_launched" if _launched(raw) is False else None,
        started_at=_launched_at(raw, sid),
        status=_life_status(raw),
    )


def deletion_time(raw: dict[str, Any], sid: str, updated_at: datetime | None) -> datetime | None:
    """A deleted server's end of billable life: ``terminated_at`` (where nova's usage ends, and what
    its delete notification carries), else ``updated``; to the whole second (``providers/openstack/clocks.py``)."""
    at = _instant(raw.get("OS-SRV-USG:terminated_at"), "server", sid) or updated_at
    return None if at is None else on_clock("instance", at)


def flavor_size(raw: dict[str, Any], sid: str) -> dict[str, Any]:
    flavor = raw.get("flavor")
    if not isinstance(flavor, dict):
        flavor = {}
    name = flavor.get("original_name")
    if not name:
        raise _skip("server", sid, "malformed", "no embedded flavor (nova answered below microversion 2.47)")
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
        never_ran=never_ran("load_balancer", status),
    )


def parse_time(value: str) -> datetime:
    """OpenStack's timestamps: with ``Z``, with an offset, or with none at all (then UTC)."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


# --- field checks ------------------------------------------------------------------------------

_TYPE_OF = {"server": "instance", "volume": "volume", "floating IP": "floating_ip", "image": "image",
            "load balancer": "load_balancer"}


def _skip(what: str, rid: str, reason: str, detail: str) -> SkipItem:
    return SkipItem(_TYPE_OF[what], rid, reason, f"malformed {what} record {rid}: {detail}")


def _id(raw: Any, what: str) -> str:
    if not isinstance(raw, dict):
        raise AdapterError(f"malformed {what} record: expected an object, got {type(raw).__name__}")
    value = raw.get("id")
    if not isinstance(value, str) or not value:
        raise AdapterError(f"malformed {what} record: no id")
    return value


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _loose_instant(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _instant(value: Any, what: str, rid: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _skip(what, rid, "malformed", f"time {value!r} is not a string")
    try:
        return parse_time(value)
    except ValueError:
        raise _skip(what, rid, "malformed", f"{value!r} is not a date and time") from None


def _times(raw: dict[str, Any], created: str, updated: str, what: str, rid: str) -> tuple[datetime, datetime | None]:
    created_at = _instant(raw.get(created), what, rid)
    if created_at is None:
        raise _skip(what, rid, "no_created_at", f"no {created}")
    return created_at, _instant(raw.get(updated), what, rid)


def _project(value: Any, what: str, rid: str) -> str:
    if not value:
        raise _skip(what, rid, "no_project", "no project")
    return str(value)


def _whole(value: Any, field: str, what: str, rid: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise _skip(what, rid, "malformed", f"{field} {value!r} is not a whole number")
    return int(value)


def instance_action(listed: Any, detail: Any) -> InstanceAction:
    """One of nova's instance actions (openstacksdk's ``ServerAction``, listed and, where read, in
    detail with its events), as the rules read it. Times without an offset are UTC, as nova writes them."""
    def field(item: Any, name: str) -> Any:
        return item.get(name) if isinstance(item, dict) else getattr(item, name, None)

    def when(value: Any) -> datetime | None:
        return parse_time(value) if isinstance(value, str) and value else None

    name, request_id, started = field(listed, "action"), field(listed, "request_id"), when(field(listed, "start_time"))
    if not isinstance(name, str) or not isinstance(request_id, str) or started is None:
        raise MalformedPage(f"an instance action without action, request_id or start_time (nova's API reference "
                            f"promises all three): {listed!r}")
    events = tuple(
        ActionEvent(str(field(e, "event") or ""), when(field(e, "start_time")), when(field(e, "finish_time")),
                    field(e, "result"))
        for e in (field(detail, "events") or () if detail is not None else ())
    )
    message = field(detail if detail is not None else listed, "message")
    return InstanceAction(name, request_id, started, message if isinstance(message, str) else None, events)
