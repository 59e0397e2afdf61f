"""The ``simulated`` provider: a ``PlatformAdapter`` over a ``PlatformView`` (the simulator's).

It reports what the view shows, applying the view's injected fault per type: ``error`` raises
``AdapterError``, ``timeout`` raises ``TimeoutError`` at once (nothing ever waits), ``empty``
lists nothing, ``down_cell`` (instances) leaves a down nova cell's servers out of the listings
while they still answer when asked by id, as nova does. Like a real SDK listing, ``enumerate`` is
lazy: the fault surfaces on iteration.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.providers.interface import (
    AdapterError,
    Confirmation,
    DeletedListing,
    DeletedResource,
    ListedResource,
)
from tally_pipeline.providers.openstack import RESIZE_EVENT_TYPES
from tally_pipeline.providers.openstack.statuses import in_transition, never_ran
from tally_pipeline.providers.simulated.platform import PlatformRecord, PlatformView, in_down_cell
from tally_pipeline.providers.simulated.spec import SIMULATED_TYPES

if TYPE_CHECKING:
    from tally_pipeline.config import SimulatedCloud


class SimulatedAdapter:
    """Lists one cloud of a ``PlatformView``; ``resource_types`` defaults to the view's (or all simulated)."""

    #: The simulator speaks OpenStack's event types.
    resize_event_types = RESIZE_EVENT_TYPES

    def __init__(self, platform: PlatformView, cloud: str, resource_types: Iterable[str] | None = None):
        self.platform = platform
        self.cloud = cloud
        if resource_types is None:
            resource_types = getattr(platform, "resource_types", SIMULATED_TYPES)
        self.resource_types: tuple[str, ...] = tuple(resource_types)

    def _raise_fault(self, resource_type: str) -> bool:
        """Raise for ``error`` / ``timeout``; True when the listing must wrongly come back empty."""
        mode = self.platform.failure(self.cloud, resource_type)
        if mode == "error":
            raise AdapterError(f"{self.cloud}: listing {resource_type} failed (injected error)")
        if mode == "unauthorized":  # the same cause for every type, as keystone refusing the credentials
            raise AdapterError(f"{self.cloud}: the platform refused the credentials (injected)")
        if mode == "timeout":
            raise TimeoutError(f"{self.cloud}: listing {resource_type} timed out (injected)")
        return mode == "empty"

    def _cell_down(self, resource_type: str) -> bool:
        return resource_type == "instance" and self.platform.failure(self.cloud, resource_type) == "down_cell"

    def enumerate(self, resource_type: str, *, at: datetime) -> Iterator[ListedResource]:
        if resource_type not in self.resource_types:
            raise AdapterError(f"{self.cloud}: {resource_type!r} is not listed by this adapter")
        if self._raise_fault(resource_type):
            return
        cell_down = self._cell_down(resource_type)
        for record in self.platform.records(self.cloud, resource_type, to_utc(at)):
            if cell_down and in_down_cell(record.resource_id):
                continue  # nova's paged listing skips a down cell's servers without a word
            yield ListedResource(
                resource_type=record.resource_type,
                resource_id=record.resource_id,
                project_id=record.project_id,
                size=record.size,
                status=record.status,
                in_transition=in_transition(record.resource_type, record.status, record.task_state),
                created_at=record.created_at,
                updated_at=record.updated_at,
                never_ran=never_ran(record.resource_type, record.status,
                                    launched=_launched(record) is not None if record.resource_type == "instance"
                                    else None),
                started_at=_launched(record),
            )

    def deleted_since(self, since: datetime, *, at: datetime) -> DeletedListing:
        """Nova-like deleted servers in ``[since, at]``; a fault on ``instance`` applies here too."""
        if "instance" not in self.resource_types:
            return DeletedListing(available=False, reason="instances are not listed by this adapter")
        try:
            empty = self._raise_fault("instance")
        except Exception as exc:  # noqa: BLE001 - the listing's failure becomes its reason
            return DeletedListing(available=False, reason=f"{type(exc).__name__}: {exc}")
        if empty:
            return DeletedListing(available=True, items=[])
        items = [
            DeletedResource(
                resource_type="instance",
                resource_id=record.resource_id,
                project_id=record.project_id,
                size=record.size,
                created_at=record.created_at,
                deleted_at=record.deleted_at,
                started_at=_launched(record),
            )
            for record in self.platform.deleted_servers(self.cloud, to_utc(since), to_utc(at))
            if record.deleted_at is not None and not (self._cell_down("instance") and in_down_cell(record.resource_id))
        ]
        return DeletedListing(available=True, items=items)

    def confirm_gone(self, resource_type: str, resource_ids: Sequence[str], *, at: datetime,
                     deadline: float | None = None) -> dict[str, Confirmation]:
        """Asked by id: gone when the platform no longer holds it at ``at`` (a 404)."""
        mode = self.platform.failure(self.cloud, resource_type)
        if mode in ("error", "timeout"):
            return {rid: Confirmation(rid, False, f"asking for it failed too (injected {mode})") for rid in resource_ids}
        alive = {r.resource_id: r for r in self.platform.records(self.cloud, resource_type, to_utc(at))}
        out = {}
        for rid in resource_ids:
            record = alive.get(rid)
            if record is None:
                out[rid] = Confirmation(rid, True, "not found")
            elif self._cell_down(resource_type) and in_down_cell(rid):
                out[rid] = Confirmation(rid, False, "still answers: status UNKNOWN (unreachable cell)")
            else:
                out[rid] = Confirmation(rid, False, f"still answers: status {record.status}")
        return out


def simulated_adapter(cloud_name: str, config: SimulatedCloud, *, platform: PlatformView | None = None,
                      now: datetime | None = None) -> SimulatedAdapter:
    """An adapter for a ``provider: simulated`` config entry.

    With ``platform`` given (a test's or the demo's shared simulation) the adapter lists it;
    otherwise a simulation is generated from the entry: with no ``start`` in the config its window
    ends at ``now`` (default: the wall clock) floored to the hour, so every call within one hour
    builds the same cloud.
    """
    if platform is None:
        from tally_pipeline.providers.simulated.simulation import simulate_cloud

        platform = simulate_cloud(cloud_name, config, now=now).platform
    return SimulatedAdapter(platform, cloud_name)


def _launched(record: PlatformRecord) -> datetime | None:
    """A simulated server's launch as the fake nova shows it (``fakes.openstack_json.launched_at``):
    its record's own, else its creation, none while it first builds; the other types keep no launch."""
    if record.resource_type != "instance":
        return None
    if record.launched_at is not None:
        return record.launched_at
    return None if record.status == "BUILD" else record.created_at
