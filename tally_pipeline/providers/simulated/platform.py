"""The platform's view of one resource, neutral between our simulated adapter and the fake OpenStack.

The simulator produces these; the ``simulated`` adapter maps them to ``ListedResource`` directly,
and the fake OpenStack server renders them as nova / cinder / neutron / glance / octavia JSON.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

#: ``down_cell`` (instances only): one nova cell of ``DOWN_CELLS`` is unreachable, so its servers are
#: missing from every paged listing though they still run (and answer a GET by id).
FailureMode = Literal["error", "timeout", "empty", "down_cell", "unauthorized"]
DOWN_CELLS = 4


def in_down_cell(resource_id: str) -> bool:
    """Whether a server sits in the cell a ``down_cell`` fault takes down (a stable quarter of them)."""
    return hashlib.blake2b(resource_id.encode(), digest_size=1).digest()[0] % DOWN_CELLS == 0


@dataclass(frozen=True, slots=True)
class PlatformRecord:
    resource_type: str  # one of our registered types: instance, volume, floating_ip, image, load_balancer
    resource_id: str
    project_id: str
    size: dict[str, Any]  # in our size schema for the type
    status: str  # as the service shows it: ACTIVE, BUILD, available, creating, PENDING_CREATE, active, DOWN, ...
    task_state: str | None  # nova's OS-EXT-STS:task_state (deleting, resize_prep, ...); None elsewhere
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None  # set only in the deleted-servers listing
    name: str = ""
    #: nova's launch (``OS-SRV-USG:launched_at``), where its usage starts; None: at ``created_at``
    #: (the simulator's servers run as soon as they are made).
    launched_at: datetime | None = None


class PlatformView(Protocol):
    """What a platform shows at an instant, with injectable faults per type."""

    def records(self, cloud: str, resource_type: str, at: datetime) -> list[PlatformRecord]:
        """Every resource of the type the platform lists at ``at`` (live ones, any status)."""
        ...

    def deleted_servers(self, cloud: str, since: datetime, at: datetime) -> list[PlatformRecord]:
        """Instances deleted in ``[since, at]`` still inside the retention horizon, status DELETED."""
        ...

    def failure(self, cloud: str, resource_type: str) -> FailureMode | None:
        """The fault injected for this type, if any."""
        ...
