"""Building valid events for tests."""

from __future__ import annotations

import itertools
from typing import Any

_ids = itertools.count()

SIZES: dict[str, dict[str, Any]] = {
    "instance": {"flavor_name": "m1.small", "vcpus": 2, "ram_mb": 2048, "disk_gb": 20},
    "volume": {"gb": 10, "volume_type": "ssd"},
    "floating_ip": {},
    "image": {"bytes": 1073741824},
    "load_balancer": {"flavor_id": None},
}


def event(**overrides: Any) -> dict[str, Any]:
    """A valid instance create event; any field can be overridden (``None`` deletes it)."""
    n = next(_ids)
    base: dict[str, Any] = {
        "event_id": f"evt-{n}",
        "event_type": "compute.instance.create.end",
        "cloud": "region-one",
        "resource_type": "instance",
        "resource_id": f"srv-{n}",
        "project_id": "proj-a",
        "occurred_at": "2026-03-01T12:00:00Z",
        "payload": {"size": dict(SIZES["instance"])},
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}
