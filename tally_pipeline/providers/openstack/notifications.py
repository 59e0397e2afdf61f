"""OpenStack notifications to our event envelope, for collectors listening on the notification bus.

A notification is a message with ``message_id``, ``event_type``, ``publisher_id``, ``timestamp``,
``priority`` and ``payload``, as nova, cinder, neutron, glance and octavia emit it (an
oslo.messaging ``{"oslo.message": "<json>"}`` wrapper is unwrapped). Nova's instance events are
mapped in both its legacy and its versioned format (``providers.openstack.nova_notifications``); the other
services emit only the legacy one.

=====================================  ===============  =========================================
event type                             our type         size from the payload
=====================================  ===============  =========================================
nova instance create / delete /        instance         the flavor, and the status nova's API
soft delete / restore / resize /                        shows after the action (``openstack_nova``;
resize preparation /                                    a resize's preparation: the flavor before it)
power off / on, suspend / resume,
pause / unpause, shelve / offload /
unshelve
volume.create.end / delete.end         volume           size, volume_type (see below)
volume.resize.end                      volume           the new size
volume.retype                          volume           the new volume_type (cinder adds it)
volume.transfer.accept.end             volume           same size; the new project (tenant_id)
floatingip.create.end / delete.end     floating_ip      floating_network_id
image.create / upload / activate /     image            size (bytes; null while queued)
image.delete
octavia.loadbalancer.create.end /      load_balancer    flavor_id (when the payload has one)
delete.end
=====================================  ===============  =========================================

A create is dated where the platform starts accounting for the resource (``providers/openstack/clocks.py``): a
nova server's ``launched_at`` (its request, ``create.start``, is kept as a note), the others'
``created_at`` when the payload has it; a delete at nova's ``terminated_at``, glance's ``deleted_at``;
anything else at the notification's timestamp (not when the message was sent, where the payload knows
better).
Anything else is returned as ``Unmapped`` with a kind and a reason code: reported, never guessed.
Types of these services that never change usage are ``ignored`` (by code: ``error_priority``,
``step``, ``audit``, ``no_usage_change``); ``NotificationOutcomes`` counts them.

Cinder's notifications name the volume type by its *id*, while the volume API shows its *name*;
pass ``volume_type_names`` (id → name, e.g. from ``OpenStackAdapter.volume_type_names()``) so both
paths agree, or reconciliation will correct each new volume's type once.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.providers.openstack.notification_fields import (
    Extracted,
    Invalid,
    check_magnitude,
    instant,
    optional_text,
    text,
    whole,
)
from tally_pipeline.providers.openstack.nova_notifications import NovaAction, NovaFormat, extract_nova, nova_action

#: Namespace of the UUIDv5 event ids derived from (cloud, message_id), or for nova from the action.
EVENT_ID_NAMESPACE = uuid.UUID("3f9d3c1e-7a43-5f1b-9c55-1d6f0e2b8a47")
_NAMESPACE_BYTES = EVENT_ID_NAMESPACE.bytes

UnmappedKind = Literal["unknown_type", "ignored", "invalid"]
#: Why an ``ignored`` notification changes no usage.
IgnoredCode = Literal["error_priority", "step", "audit", "no_usage_change"]


@dataclass(frozen=True, slots=True)
class Unmapped:
    """A notification we do not turn into an event, and why.

    ``code`` is the machine-readable reason: for ``ignored`` one of ``IgnoredCode``; for ``invalid`` the
    kind, or what is wrong with a value the mapping reads (``number_out_of_range``, ``invalid_text``);
    otherwise the kind.
    """

    reason: str
    kind: UnmappedKind
    event_type: str | None = None
    code: str = ""

    def __post_init__(self) -> None:
        if not self.code:
            object.__setattr__(self, "code", self.kind)

    def __str__(self) -> str:
        return f"unmapped: {self.reason}"


@dataclass(slots=True)
class NotificationOutcomes:
    """What a collector did with the notifications it read: mapped, or unmapped by kind and code."""

    mapped: int = 0
    unmapped: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, result: dict[str, Any] | Unmapped) -> None:
        if isinstance(result, Unmapped):
            self.unmapped[(result.kind, result.code)] += 1
        else:
            self.mapped += 1

    def by_kind(self, kind: UnmappedKind) -> dict[str, int]:
        """Counts of one kind by reason code, e.g. ``by_kind("ignored") == {"step": 3, "audit": 1}``."""
        return {code: n for (k, code), n in sorted(self.unmapped.items()) if k == kind}

    def as_dict(self) -> dict[str, Any]:
        return {"mapped": self.mapped, **{kind: self.by_kind(kind) for kind in ("ignored", "unknown_type", "invalid")}}


def map_notifications(
    notifications: Iterable[Mapping[str, Any]],
    *,
    cloud: str,
    volume_type_names: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], NotificationOutcomes]:
    """Map a batch: the envelopes to submit, and the outcome of every notification, counted."""
    outcomes = NotificationOutcomes()
    envelopes: list[dict[str, Any]] = []
    for notification in notifications:
        result = map_notification(notification, cloud=cloud, volume_type_names=volume_type_names)
        outcomes.add(result)
        if not isinstance(result, Unmapped):
            envelopes.append(result)
    return envelopes, outcomes


@dataclass(frozen=True, slots=True)
class _Mapping:
    resource_type: str
    extract: Callable[[dict[str, Any], _Context], Extracted]


@dataclass(frozen=True, slots=True)
class _Context:
    event_type: str
    volume_type_names: Mapping[str, str]


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
    priority = message.get("priority")
    if isinstance(priority, str) and priority.upper() in _FAILURE_PRIORITIES:
        # oslo.messaging's error / critical: an action that failed, which changes no usage.
        return Unmapped(f"{event_type} has priority {priority}: a failed action changes no usage",
                        "ignored", event_type, "error_priority")
    nova = nova_action(event_type)
    mapping = _MAPPINGS.get(event_type)
    if nova is None and mapping is None:
        return _unmapped_type(event_type)
    payload = message.get("payload")
    if not isinstance(payload, dict):
        return Unmapped(f"{event_type}: payload is not an object", "invalid", event_type)
    message_id = message.get("message_id")
    if not isinstance(message_id, str) or not message_id.strip():
        return Unmapped(f"{event_type}: no message_id, so no stable event_id", "invalid", event_type)
    try:
        sent_at = instant(message.get("timestamp"), "timestamp")
        if nova is not None:
            resource_type, stored_type = "instance", nova[0].event_type
            found, occurred_at = _nova_found(payload, nova, sent_at)
        elif mapping is not None:
            resource_type, stored_type = mapping.resource_type, event_type
            found, occurred_at = _service_found(payload, mapping, _Context(event_type, volume_type_names or {}), sent_at)
    except Invalid as exc:
        return Unmapped(f"{event_type}: {exc}", "invalid", event_type, exc.code)
    if occurred_at is None:
        return Unmapped(f"{event_type}: no timestamp", "invalid", event_type)
    occurred = format_rfc3339(occurred_at)
    body: dict[str, Any] = {}
    if nova is not None:
        # Both formats of one action must store the same content under the same id (a different
        # content under one id is a duplicate_conflict): so nothing message-specific goes in.
        body["openstack"] = {"service": "nova", "action": nova[0].name}
        event_id = _nova_event_id(cloud, found.resource_id, nova[0].name, occurred)
    else:
        body["openstack"] = {
            "message_id": message_id,
            "event_type": event_type,
            "publisher_id": message.get("publisher_id"),
            "priority": message.get("priority"),
            "timestamp": format_rfc3339(sent_at) if sent_at else None,
        }
        event_id = _event_uuid(f"{cloud}/{message_id}")
    if found.size is not None:
        body["size"] = found.size
    if found.status:
        body["status"] = found.status
    return {
        "event_id": event_id,
        "event_type": stored_type,
        "cloud": cloud,
        "resource_type": resource_type,
        "resource_id": found.resource_id,
        "project_id": found.project_id,
        "occurred_at": occurred,
        "source": "collector",
        "payload": body,
    }


def _nova_found(
    payload: dict[str, Any], nova: tuple[NovaAction, NovaFormat], sent_at: datetime | None
) -> tuple[Extracted, datetime | None]:
    action, fmt = nova
    found, dated = extract_nova(payload, action, fmt)
    if dated is None:
        return found, sent_at
    field_name, value = dated
    at = instant(value, f"payload {field_name}")
    # Whole seconds: the versioned format writes times to the second (oslo.versionedobjects'
    # isotime), the legacy one with microseconds, and the two must date an action alike.
    return found, at.replace(microsecond=0) if at else sent_at


def _service_found(
    payload: dict[str, Any], mapping: _Mapping, ctx: _Context, sent_at: datetime | None
) -> tuple[Extracted, datetime | None]:
    found = mapping.extract(payload, ctx)
    if ctx.event_type.endswith(_CREATES) and found.created_at:
        return found, instant(found.created_at, "payload created_at")
    if ctx.event_type.endswith(_DELETES) and found.deleted_at:
        return found, instant(found.deleted_at, "payload deleted_at")
    return found, sent_at


def _nova_event_id(cloud: str, instance_id: str, action: str, occurred: str) -> str:
    """Shared by nova's two formats: a cloud emitting both stores one event per payload-dated action,
    and a redelivered message is still a duplicate. ``occurred``: the action's instant in RFC 3339."""
    return _event_uuid(f"{cloud}/nova/{instance_id}/{action}/{occurred}")


def _event_uuid(name: str) -> str:
    """``str(uuid.uuid5(EVENT_ID_NAMESPACE, name))``, the same text without the UUID object (a collector
    makes one per notification)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode("utf-8"), usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _unmapped_type(event_type: str) -> Unmapped:
    if not event_type.startswith(_KNOWN_PREFIXES):
        return Unmapped(f"unknown event type {event_type!r}", "unknown_type", event_type)
    last = event_type.rsplit(".", 1)[-1]
    if last in _STEP_TOKENS:
        return Unmapped(f"{event_type} is a step of an action; its end is what we record", "ignored",
                        event_type, "step")
    if last in _AUDIT_TOKENS:
        return Unmapped(f"{event_type} is a periodic audit, not a change", "ignored", event_type, "audit")
    return Unmapped(f"{event_type} never changes usage", "ignored", event_type, "no_usage_change")
# --- per service (nova's instances: nova_notifications) -------------------------------------


def _cinder(payload: dict[str, Any], ctx: _Context) -> Extracted:
    type_id = optional_text(payload, "volume_type")
    volume_type = ctx.volume_type_names.get(type_id, type_id) if type_id else None
    return Extracted(
        resource_id=text(payload, "volume_id"),
        project_id=optional_text(payload, "tenant_id"),
        size={"gb": whole(payload, "size"), "volume_type": volume_type},
        status=optional_text(payload, "status"),
        created_at=optional_text(payload, "created_at"),
    )


def _neutron(payload: dict[str, Any], ctx: _Context) -> Extracted:
    fip = payload.get("floatingip")
    if fip is not None and not isinstance(fip, dict):
        raise Invalid("payload.floatingip is not an object")
    fip = fip or {}
    # Older neutron sends only {"floatingip_id": ...} on delete; newer adds the address itself.
    resource_id = optional_text(fip, "id") or optional_text(payload, "floatingip_id")
    if resource_id is None:
        raise Invalid("payload has neither floatingip.id nor floatingip_id")
    if ctx.event_type.endswith(".create.end") and not fip:
        raise Invalid("payload has no floatingip object")
    return Extracted(
        resource_id=resource_id,
        project_id=optional_text(fip, "project_id") or optional_text(fip, "tenant_id"),
        size={"floating_network_id": optional_text(fip, "floating_network_id")} if fip else None,
        status=optional_text(fip, "status"),
        created_at=optional_text(fip, "created_at"),
    )


def _glance(payload: dict[str, Any], ctx: _Context) -> Extracted:
    raw = payload.get("size")
    check_magnitude(raw, "payload size")
    if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw < 0):
        raise Invalid(f"payload size {raw!r} is not a byte count")
    return Extracted(
        resource_id=text(payload, "id"),
        project_id=optional_text(payload, "owner"),
        size={"bytes": raw},
        status=optional_text(payload, "status"),
        created_at=optional_text(payload, "created_at"),
        deleted_at=optional_text(payload, "deleted_at"),
    )


def _octavia(payload: dict[str, Any], ctx: _Context) -> Extracted:
    # Two shapes: the worker sends its provider-driver dict (loadbalancer_id, a flavor *metadata*
    # dict, no times); octavia's docs show the API's load balancer (id, flavor_id, created_at).
    # Neither has a deletion time, so a delete is dated at the message.
    resource_id = optional_text(payload, "loadbalancer_id") or optional_text(payload, "id")
    if resource_id is None:
        raise Invalid("payload has neither loadbalancer_id nor id")
    return Extracted(
        resource_id=resource_id,
        project_id=optional_text(payload, "project_id") or optional_text(payload, "tenant_id"),
        size={"flavor_id": optional_text(payload, "flavor_id")},
        status=optional_text(payload, "provisioning_status"),
        created_at=optional_text(payload, "created_at"),
    )


_MAPPINGS: dict[str, _Mapping] = {
    "volume.create.end": _Mapping("volume", _cinder),
    "volume.delete.end": _Mapping("volume", _cinder),
    "volume.resize.end": _Mapping("volume", _cinder),
    # cinder's retype sends the usage payload with volume_type = the new type's id
    # (volume/manager.py: extra_usage_info={'volume_type': new_type_id}); a transfer's accept.end
    # sends the volume as read again after the transfer, so tenant_id is the new project.
    "volume.retype": _Mapping("volume", _cinder),
    "volume.transfer.accept.end": _Mapping("volume", _cinder),
    "floatingip.create.end": _Mapping("floating_ip", _neutron),
    "floatingip.delete.end": _Mapping("floating_ip", _neutron),
    "image.create": _Mapping("image", _glance),
    "image.upload": _Mapping("image", _glance),
    "image.activate": _Mapping("image", _glance),
    "image.delete": _Mapping("image", _glance),
    "octavia.loadbalancer.create.end": _Mapping("load_balancer", _octavia),
    "octavia.loadbalancer.delete.end": _Mapping("load_balancer", _octavia),
}
_CREATES = (".create.end", "image.create")
_DELETES = (".delete.end", "image.delete")
_FAILURE_PRIORITIES = frozenset({"ERROR", "CRITICAL"})
#: Families of the five services' event types. A type of these that is not mapped above (or in
#: openstack_nova) never changes usage, so it is ``ignored``, counted by code; taken from the
#: services' published samples (nova's doc/notification_samples, ceilometer's fixtures, octavia's docs).
_KNOWN_PREFIXES = (
    # nova, legacy and versioned
    "compute.", "instance.", "aggregate.", "keypair.", "servergroup.", "server_group.", "flavor.",
    "service.", "compute_task.", "scheduler.", "libvirt.", "metrics.",
    # cinder
    "volume.", "snapshot.", "backup.", "consistencygroup.", "cgsnapshot.", "group.", "group_snapshot.",
    # neutron
    "floatingip.", "network.", "subnet.", "port.", "router.", "security_group.", "security_group_rule.",
    "subnetpool.", "address_scope.",
    # glance: its images, its async tasks and its metadata definitions (metadef_namespace.create, …)
    "image.", "task.", "metadef_",
    # octavia
    "octavia.",
)
#: The steps of an action before its end; ``error`` steps come with priority ERROR as well.
_STEP_TOKENS = frozenset({"start", "progress", "error"})
#: Periodic audits (nova's and cinder's ``exists``, neutron's and glance's): a snapshot, not a change.
_AUDIT_TOKENS = frozenset({"exists"})


# --- the message ---------------------------------------------------------------------------------


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
