"""OpenStack notifications to our event envelope, for collectors listening on the notification bus.

Only the legacy (unversioned) notification shape is mapped: ``message_id``, ``event_type``,
``publisher_id``, ``timestamp``, ``priority`` and ``payload``, as nova, cinder, neutron, glance
and octavia emit it (an oslo.messaging ``{"oslo.message": "<json>"}`` wrapper is unwrapped).

=====================================  ===============  =========================================
event type                             our type         size from the payload
=====================================  ===============  =========================================
compute.instance.create.end            instance         instance_type, vcpus, memory_mb, root_gb
compute.instance.delete.end            instance         (same, when present)
compute.instance.resize.confirm.end    instance         the new flavor
volume.create.end / delete.end         volume           size, volume_type (see below)
volume.resize.end                      volume           the new size
floatingip.create.end / delete.end     floating_ip      floating_network_id
image.create / upload / activate /     image            size (bytes; null while queued)
image.delete
octavia.loadbalancer.create.end /      load_balancer    flavor_id (when the payload has one)
delete.end
=====================================  ===============  =========================================

A create is dated at the resource's ``created_at`` when the payload has it (the lifecycle starts
when the resource was made, not when the message was sent), a delete at ``deleted_at`` /
``terminated_at``; anything else at the notification's timestamp. Anything else is returned as
``Unmapped`` with a reason: reported, never guessed.

Cinder's notifications name the volume type by its *id*, while the volume API shows its *name*;
pass ``volume_type_names`` (id → name, e.g. from ``OpenStackAdapter.volume_type_names()``) so both
paths agree, or reconciliation will correct each new volume's type once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from tally_pipeline.core.timeutil import format_rfc3339

#: Namespace of the UUIDv5 event ids derived from (cloud, message_id).
EVENT_ID_NAMESPACE = uuid.UUID("3f9d3c1e-7a43-5f1b-9c55-1d6f0e2b8a47")

UnmappedKind = Literal["unknown_type", "ignored", "versioned", "invalid"]


@dataclass(frozen=True, slots=True)
class Unmapped:
    """A notification we do not turn into an event, and why."""

    reason: str
    kind: UnmappedKind
    event_type: str | None = None

    def __str__(self) -> str:
        return f"unmapped: {self.reason}"


class _Invalid(ValueError):
    """A mapped event type whose payload lacks what the mapping needs."""


@dataclass(frozen=True, slots=True)
class _Mapping:
    resource_type: str
    extract: Callable[[dict[str, Any], _Context], _Extracted]


@dataclass(frozen=True, slots=True)
class _Context:
    event_type: str
    volume_type_names: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class _Extracted:
    resource_id: str
    project_id: str | None
    size: dict[str, Any] | None
    status: str | None
    created_at: str | None = None
    deleted_at: str | None = None


def map_notification(
    notification: Mapping[str, Any],
    *,
    cloud: str,
    volume_type_names: Mapping[str, str] | None = None,
) -> dict[str, Any] | Unmapped:
    """Map one OpenStack notification to an envelope dict (``source: collector``), or ``Unmapped``."""
    message = _unwrap(notification)
    if isinstance(message, Unmapped):
        return message
    event_type = message.get("event_type")
    if not isinstance(event_type, str) or not event_type:
        return Unmapped("notification has no event_type", "invalid")
    payload = message.get("payload")
    if isinstance(payload, dict) and any(key.startswith("nova_object.") for key in payload):
        return Unmapped(
            f"{event_type} is a versioned notification; set nova's notification_format to "
            "'unversioned' or 'both' for collectors", "versioned", event_type,
        )
    mapping = _MAPPINGS.get(event_type)
    if mapping is None:
        if event_type.startswith(_KNOWN_PREFIXES):
            return Unmapped(f"{event_type} is not a lifecycle event we record", "ignored", event_type)
        return Unmapped(f"unknown event type {event_type!r}", "unknown_type", event_type)
    if not isinstance(payload, dict):
        return Unmapped(f"{event_type}: payload is not an object", "invalid", event_type)
    message_id = message.get("message_id")
    if not isinstance(message_id, str) or not message_id.strip():
        return Unmapped(f"{event_type}: no message_id, so no stable event_id", "invalid", event_type)
    try:
        sent_at = _instant(message.get("timestamp"), "timestamp")
        found = mapping.extract(payload, _Context(event_type, volume_type_names or {}))
        occurred_at = sent_at
        if event_type.endswith(_CREATES) and found.created_at:
            occurred_at = _instant(found.created_at, "payload created_at")
        elif event_type.endswith(_DELETES) and found.deleted_at:
            occurred_at = _instant(found.deleted_at, "payload deleted_at")
    except _Invalid as exc:
        return Unmapped(f"{event_type}: {exc}", "invalid", event_type)
    if occurred_at is None:
        return Unmapped(f"{event_type}: no timestamp", "invalid", event_type)
    body: dict[str, Any] = {
        "openstack": {
            "message_id": message_id,
            "event_type": event_type,
            "publisher_id": message.get("publisher_id"),
            "priority": message.get("priority"),
            "timestamp": format_rfc3339(sent_at) if sent_at else None,
        }
    }
    if found.size is not None:
        body["size"] = found.size
    if found.status:
        body["status"] = found.status
    return {
        "event_id": str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{cloud}/{message_id}")),
        "event_type": event_type,
        "cloud": cloud,
        "resource_type": mapping.resource_type,
        "resource_id": found.resource_id,
        "project_id": found.project_id,
        "occurred_at": format_rfc3339(occurred_at),
        "source": "collector",
        "payload": body,
    }


# --- per service --------------------------------------------------------------------------------


def _nova(payload: dict[str, Any], ctx: _Context) -> _Extracted:
    size = None
    if ctx.event_type.endswith(".delete.end"):
        # A delete needs no size, but nova sends the flavor: keep it when it is whole.
        if all(payload.get(k) not in (None, "") for k in ("instance_type", "vcpus", "memory_mb", "root_gb")):
            size = _instance_size(payload)
    else:
        size = _instance_size(payload)
    return _Extracted(
        resource_id=_text(payload, "instance_id"),
        project_id=_optional_text(payload, "tenant_id"),
        size=size,
        status=_optional_text(payload, "state"),
        created_at=_optional_text(payload, "created_at"),
        deleted_at=_optional_text(payload, "deleted_at") or _optional_text(payload, "terminated_at"),
    )


def _instance_size(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "flavor_name": _text(payload, "instance_type"),
        "vcpus": _whole(payload, "vcpus"),
        "ram_mb": _whole(payload, "memory_mb"),
        "disk_gb": _whole(payload, "root_gb"),
    }


def _cinder(payload: dict[str, Any], ctx: _Context) -> _Extracted:
    type_id = _optional_text(payload, "volume_type")
    volume_type = ctx.volume_type_names.get(type_id, type_id) if type_id else None
    return _Extracted(
        resource_id=_text(payload, "volume_id"),
        project_id=_optional_text(payload, "tenant_id"),
        size={"gb": _whole(payload, "size"), "volume_type": volume_type},
        status=_optional_text(payload, "status"),
        created_at=_optional_text(payload, "created_at"),
    )


def _neutron(payload: dict[str, Any], ctx: _Context) -> _Extracted:
    fip = payload.get("floatingip")
    if fip is not None and not isinstance(fip, dict):
        raise _Invalid("payload.floatingip is not an object")
    fip = fip or {}
    # Older neutron sends only {"floatingip_id": ...} on delete; newer adds the address itself.
    resource_id = _optional_text(fip, "id") or _optional_text(payload, "floatingip_id")
    if resource_id is None:
        raise _Invalid("payload has neither floatingip.id nor floatingip_id")
    if ctx.event_type.endswith(".create.end") and not fip:
        raise _Invalid("payload has no floatingip object")
    return _Extracted(
        resource_id=resource_id,
        project_id=_optional_text(fip, "project_id") or _optional_text(fip, "tenant_id"),
        size={"floating_network_id": _optional_text(fip, "floating_network_id")} if fip else None,
        status=_optional_text(fip, "status"),
        created_at=_optional_text(fip, "created_at"),
    )


def _glance(payload: dict[str, Any], ctx: _Context) -> _Extracted:
    raw = payload.get("size")
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw < 0):
        raise _Invalid(f"payload size {raw!r} is not a byte count")
    return _Extracted(
        resource_id=_text(payload, "id"),
        project_id=_optional_text(payload, "owner"),
        size={"bytes": raw},
        status=_optional_text(payload, "status"),
        created_at=_optional_text(payload, "created_at"),
        deleted_at=_optional_text(payload, "deleted_at"),
    )


def _octavia(payload: dict[str, Any], ctx: _Context) -> _Extracted:
    # Octavia sends its provider-driver dict: loadbalancer_id, project_id, vip_*, and a flavor
    # *metadata* dict rather than the flavor's id.
    resource_id = _optional_text(payload, "loadbalancer_id") or _optional_text(payload, "id")
    if resource_id is None:
        raise _Invalid("payload has neither loadbalancer_id nor id")
    return _Extracted(
        resource_id=resource_id,
        project_id=_optional_text(payload, "project_id") or _optional_text(payload, "tenant_id"),
        size={"flavor_id": _optional_text(payload, "flavor_id")},
        status=_optional_text(payload, "provisioning_status"),
        created_at=_optional_text(payload, "created_at"),
        deleted_at=_optional_text(payload, "deleted_at"),
    )


_MAPPINGS: dict[str, _Mapping] = {
    "compute.instance.create.end": _Mapping("instance", _nova),
    "compute.instance.delete.end": _Mapping("instance", _nova),
    "compute.instance.resize.confirm.end": _Mapping("instance", _nova),
    "volume.create.end": _Mapping("volume", _cinder),
    "volume.delete.end": _Mapping("volume", _cinder),
    "volume.resize.end": _Mapping("volume", _cinder),
    "floatingip.create.end": _Mapping("floating_ip", _neutron),
    "floatingip.delete.end": _Mapping("floating_ip", _neutron),
    "image.create": _Mapping("image", _glance),
    "image.upload": _Mapping("image", _glance),
    "image.activate": _Mapping("image", _glance),
    "image.delete": _Mapping("image", _glance),
    "octavia.loadbalancer.create.end": _Mapping("load_balancer", _octavia),
    "octavia.loadbalancer.delete.end": _Mapping("load_balancer", _octavia),
}
#: Event types of these families that are not in the table are deliberately not recorded
#: (``.start``/``.error`` steps, periodic ``exists`` audits, attribute updates without sizes).
_KNOWN_PREFIXES = ("compute.", "volume.", "snapshot.", "floatingip.", "image.", "octavia.", "port.",
                   "network.", "subnet.", "router.", "backup.")
_CREATES = (".create.end", "image.create")
_DELETES = (".delete.end", "image.delete")


# --- field helpers ------------------------------------------------------------------------------


def _unwrap(notification: Mapping[str, Any]) -> Mapping[str, Any] | Unmapped:
    if not isinstance(notification, Mapping):
        return Unmapped("notification is not an object", "invalid")
    wrapped = notification.get("oslo.message")
    if wrapped is None:
        return notification
    try:
        inner = json.loads(wrapped) if isinstance(wrapped, str | bytes) else wrapped
    except ValueError as exc:
        return Unmapped(f"oslo.message is not JSON: {exc}", "invalid")
    if not isinstance(inner, Mapping):
        return Unmapped("oslo.message does not hold an object", "invalid")
    return inner


def _text(payload: Mapping[str, Any], key: str) -> str:
    value = _optional_text(payload, key)
    if value is None:
        raise _Invalid(f"payload has no {key}")
    return value


def _optional_text(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _Invalid(f"payload {key} {value!r} is not a string")
    return value


def _whole(payload: Mapping[str, Any], key: str) -> int:
    value = payload.get(key)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # some payload fields are stringified numbers
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise _Invalid(f"payload {key} {value!r} is not a whole number")
    return int(value)


def _instant(value: Any, what: str) -> datetime | None:
    """OpenStack's many time spellings: ``2026-01-01 00:00:05.123456`` (oslo, naive UTC),
    ``2026-01-01T00:00:00Z``, ``2026-01-01 00:00:00+00:00`` (nova's ``str(datetime)``)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{what} {value!r} is not a string")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise _Invalid(f"{what} {value!r} is not a date and time") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
