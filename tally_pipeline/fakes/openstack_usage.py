"""The fake nova's ``GET /os-simple-tenant-usage`` (all projects) and ``/os-simple-tenant-usage/{project}``.

Shaped as nova's API reference and computed as nova computes it: the servers active in the window
(launched before its end, not terminated before its start), each billed from ``max(launched_at,
start)`` to ``min(terminated_at, stop)`` in hours (a float), at its current flavor; per project
``total_hours``, ``total_vcpus_usage``, ``total_memory_mb_usage`` and ``total_local_gb_usage`` the
sums of its servers' hours times the flavor's figure. ``end`` after nova's now is cut to now. A server
that never launched (``launched_at`` null) is not listed.

Paging (microversion 2.40+) is nova's: by **server**, ``limit`` servers a page (default and cap
``max_limit`` = 1000) after ``marker`` (a server uuid), ordered by project then uuid; a full page links
the next one in ``tenant_usages_links`` (``tenant_usage_links`` for one project), so one project's
servers may continue on the next page. An unknown marker is a 400. Before 2.40 there is no paging:
the first ``max_limit`` servers, no link. ``start``/``end`` are nova's naive formats
(``%Y-%m-%dT%H:%M:%S`` with optional ``.%f``); anything else is a 400, as is ``start`` not before ``end``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.core.errors import InputError
from tally_pipeline.fakes.openstack_json import launched_at
from tally_pipeline.providers.simulated.platform import PlatformRecord

#: nova's ``[api] max_limit``.
MAX_LIMIT = 1000
#: From this microversion the usage API pages (``limit``, ``marker``, the links).
PAGING_MICROVERSION = (2, 40)
_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%d %H:%M:%S.%f")


class UsageRequestError(InputError, ValueError):
    """A request nova answers 400 (its message is the body's)."""


def parse_nova_time(text: str | None, now: datetime) -> datetime:
    """Nova's ``_parse_datetime``: empty is now; a naive timestamp in one of three formats, taken as UTC."""
    if not text:
        return now
    for fmt in _FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise UsageRequestError("Invalid input for field/attribute. Datetime is in invalid format")


def _naive(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")


def _hours(launched: datetime, terminated: datetime | None, start: datetime, stop: datetime) -> float:
    if terminated is not None and terminated < start:
        return 0
    if launched > stop:
        return 0
    begin = max(launched, start)
    end = stop if terminated is None else min(stop, terminated)
    return (end - begin).total_seconds() / 3600.0


def tenant_usage(
    servers: Iterable[PlatformRecord],
    query: dict[str, list[str]],
    *,
    now: datetime,
    microversion: tuple[int, int],
    next_url: str,
    project_id: str | None = None,
) -> dict[str, Any]:
    """The body nova answers (``servers``: every server it knows, live and deleted)."""

    def one(key: str) -> str | None:
        values = query.get(key)
        return values[-1] if values else None

    start = parse_nova_time(one("start"), now)
    stop = parse_nova_time(one("end"), now)
    if not start < stop:
        raise UsageRequestError("Invalid start time. The start time cannot occur after the end time.")
    stop = min(stop, now)
    detailed = project_id is not None or one("detailed") == "1"
    paging = microversion >= PAGING_MICROVERSION
    limit = MAX_LIMIT
    marker = None
    if paging:
        text = one("limit")
        if text is not None:
            try:
                limit = int(text)
            except ValueError:
                raise UsageRequestError(f"Invalid input for field/attribute limit. Value: {text}") from None
            if limit < 0:
                raise UsageRequestError(f"Invalid input for field/attribute limit. Value: {text}")
            limit = min(limit, MAX_LIMIT)
        marker = one("marker")
    known = sorted(servers, key=lambda r: (r.project_id, r.resource_id))
    active = []
    for record in known:
        launched = launched_at(record)
        terminated = record.deleted_at if record.status == "DELETED" else None
        if launched is None or not launched < stop or (terminated is not None and not terminated > start):
            continue
        if project_id is not None and record.project_id != project_id:
            continue
        active.append((record, launched, terminated))
    first = 0
    if marker is not None:
        position = next((i for i, (r, _, _) in enumerate(active) if r.resource_id == marker), None)
        if position is None:
            raise UsageRequestError(f"Marker {marker} could not be found.")
        first = position + 1
    page = active[first:first + limit] if limit else []
    usages: dict[str, dict[str, Any]] = {}
    for record, launched, terminated in page:
        hours = _hours(launched, terminated, start, stop)
        size = record.size
        vcpus, ram, disk = int(size.get("vcpus") or 0), int(size.get("ram_mb") or 0), int(size.get("disk_gb") or 0)
        summary = usages.get(record.project_id)
        if summary is None:
            summary = usages[record.project_id] = {
                "tenant_id": record.project_id, "total_local_gb_usage": 0, "total_vcpus_usage": 0,
                "total_memory_mb_usage": 0, "total_hours": 0, "start": _naive(start), "stop": _naive(stop),
            }
            if detailed:
                summary["server_usages"] = []
        summary["total_local_gb_usage"] += disk * hours
        summary["total_vcpus_usage"] += vcpus * hours
        summary["total_memory_mb_usage"] += ram * hours
        summary["total_hours"] += hours
        if detailed:
            ended = terminated
            summary["server_usages"].append({
                "instance_id": record.resource_id, "name": record.name, "tenant_id": record.project_id,
                "hours": hours, "flavor": str(size.get("flavor_name") or ""), "memory_mb": ram, "local_gb": disk,
                "vcpus": vcpus, "started_at": _naive(launched), "ended_at": _naive(ended),
                "state": "terminated" if ended is not None else _vm_state(record.status),
                "uptime": int(((ended or now) - launched).total_seconds()),
            })
    key = "tenant_usage" if project_id is not None else "tenant_usages"
    body: dict[str, Any] = {key: (next(iter(usages.values()), {}) if project_id is not None
                                  else list(usages.values()))}
    if paging and limit and len(page) == limit:
        params = [(k, v) for k, values in query.items() if k not in ("limit", "marker") for v in values]
        params += [("limit", str(limit)), ("marker", page[-1][0].resource_id)]
        body[f"{key}_links"] = [{"rel": "next", "href": f"{next_url}?{urllib.parse.urlencode(params)}"}]
    return body


def _vm_state(status: str) -> str:
    return {"SHUTOFF": "stopped", "ERROR": "error", "PAUSED": "paused", "SUSPENDED": "suspended",
            "BUILD": "building", "SHELVED": "shelved", "SHELVED_OFFLOADED": "shelved_offloaded",
            "RESCUE": "rescued", "RESIZE": "active", "VERIFY_RESIZE": "resized"}.get(status, "active")
