"""The fake OpenStack's GET by id, per service: what a client asking about one resource is told.

Returns ``(status, body)`` for the HTTP side to send. A resource the platform still holds answers
200 with its record; a deleted one 404 (nova, cinder, neutron, glance), except what the service
keeps showing after a delete: a soft-deleted server (``SOFT_DELETED``, 200). A server in a down
cell answers nova's minimal ``UNKNOWN`` record from microversion 2.69, else 503.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.fakes import openstack_json as render
from tally_pipeline.providers.simulated.platform import PlatformRecord, PlatformView

#: Nova answers minimal records for servers of a down cell from this microversion on.
DOWN_CELL_MICROVERSION = (2, 69)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: What each type's show answer wraps its record in (glance: no wrapper).
WRAPPER = {"instance": "server", "volume": "volume", "floating_ip": "floatingip", "image": None,
           "load_balancer": "loadbalancer"}


def find(view: PlatformView, cloud: str, resource_type: str, resource_id: str, at: datetime) -> PlatformRecord | None:
    """The live record, or for an instance a soft-deleted one; None when the platform holds neither."""
    for record in view.records(cloud, resource_type, at):
        if record.resource_id == resource_id:
            return record
    if resource_type == "instance":
        for record in view.deleted_servers(cloud, _EPOCH, at):
            if record.resource_id == resource_id and record.status == "SOFT_DELETED":
                return record
    return None


def show(resource_type: str, record: PlatformRecord | None, *, down_cell: bool, microversion: tuple[int, int] | None,
         render_one: Callable[[PlatformRecord], dict[str, Any]], not_found: dict[str, Any],
         unreachable: dict[str, Any], base_url: str) -> tuple[int, dict[str, Any]]:
    """The answer to ``GET /<collection>/<id>``."""
    if record is None:
        return 404, not_found
    if down_cell:
        if microversion is not None and microversion >= DOWN_CELL_MICROVERSION:
            return 200, {"server": render.server_unknown_json(record, base_url=base_url)}
        return 503, unreachable
    body = render_one(record)
    key = WRAPPER[resource_type]
    return 200, body if key is None else {key: body}
