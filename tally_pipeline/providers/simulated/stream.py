"""The collector stream: the notifications the services emit for the ground truth, delivered lossily.

Each change becomes the real OpenStack notification mapped into our envelope. ``occurred_at`` is
when the change happened (a create at the platform's ``created_at``, an update when the size
changed, a delete at the deletion); the service *emits* an asynchronous create's ``.end``
notification only when the create transition finishes (after BUILD, ``creating``,
PENDING_CREATE). Delivery then loses, duplicates, delays and reorders events.

Every event draws the same number of random values whatever the settings, so one seed with two
loss rates loses different events but delays the survivors identically.
"""

from __future__ import annotations

import math
import random
import uuid
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.providers.openstack.statuses import in_transition
from tally_pipeline.providers.simulated.spec import DeliverySpec
from tally_pipeline.providers.simulated.truth import GroundTruth, Lifecycle, ResourceKey

_EVENT_ID_NAMESPACE = uuid.UUID("7b0d7f7e-4f2a-5b7e-9c57-5f1d2f1b8a10")

# type -> (create.start note or None, create, update or None, delete)
EVENT_TYPES: dict[str, tuple[str | None, str, str | None, str]] = {
    "instance": ("compute.instance.create.start", "compute.instance.create.end",
                 "compute.instance.resize.confirm.end", "compute.instance.delete.end"),
    "volume": ("volume.create.start", "volume.create.end", "volume.resize.end", "volume.delete.end"),
    "floating_ip": (None, "floatingip.create.end", None, "floatingip.delete.end"),
    "image": (None, "image.create", "image.activate", "image.delete"),
    "load_balancer": (None, "octavia.loadbalancer.create.end", None, "octavia.loadbalancer.delete.end"),
}
# glance announces an image when it is registered (queued), the others when the create finishes.
_CREATE_ANNOUNCED_AT_REQUEST = frozenset({"image", "floating_ip"})
_DELETED_STATUS = {"load_balancer": "DELETED", "floating_ip": "DOWN"}
# nova's legacy event for a change of power status: into one, and out of it back to active
_POWER_INTO = {"shutoff": "compute.instance.power_off.end", "suspended": "compute.instance.suspend.end",
               "paused": "compute.instance.pause.end", "shelved_offloaded": "compute.instance.shelve_offload.end"}
_POWER_OUT_OF = {"shutoff": "compute.instance.power_on.end", "suspended": "compute.instance.resume.end",
                 "paused": "compute.instance.unpause.end", "shelved_offloaded": "compute.instance.unshelve.end"}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One copy of an event arriving at the API. A duplicate repeats an earlier copy exactly."""

    delivered_at: datetime
    emitted_at: datetime
    event: dict[str, Any]
    duplicate: bool = False

    @property
    def cloud(self) -> str:
        cloud: str = self.event["cloud"]
        return cloud


@dataclass(frozen=True)
class DeliveryStats:
    """What happened to the stream. Resource counts are inclusive: ``creates_lost`` counts a resource
    whose create was lost whether or not its delete was too; ``both_lost`` counts those with both."""

    events_generated: int
    events_lost: int
    events_duplicated: int
    deliveries: int
    creates_lost: int
    deletes_lost: int
    both_lost: int
    updates_lost: int


@dataclass(frozen=True, slots=True)
class _Emission:
    emitted_at: datetime
    verb: str
    key: ResourceKey
    event: dict[str, Any]


def copy_event(event: dict[str, Any]) -> dict[str, Any]:
    """A copy the caller may mutate without touching the stream."""
    payload = dict(event["payload"])
    if isinstance(payload.get("size"), dict):
        payload["size"] = dict(payload["size"])
    return {**event, "payload": payload}


def _event(lc: Lifecycle, event_type: str, ordinal: int, occurred_at: datetime, size: Any, status: str) -> dict[str, Any]:
    name = f"{lc.cloud}\x1f{lc.resource_type}\x1f{lc.resource_id}\x1f{ordinal}\x1f{event_type}"
    return {
        "event_id": str(uuid.uuid5(_EVENT_ID_NAMESPACE, name)),
        "event_type": event_type,
        "cloud": lc.cloud,
        "resource_type": lc.resource_type,
        "resource_id": lc.resource_id,
        "project_id": lc.project_id,
        "occurred_at": format_rfc3339(occurred_at),
        "source": "collector",
        "payload": {"size": dict(size), "status": status, "name": lc.name},
    }


def lifecycle_emissions(lc: Lifecycle) -> list[_Emission]:
    """The notifications a lifecycle makes the services emit, in emission order."""
    start_type, create_type, update_type, delete_type = EVENT_TYPES[lc.resource_type]
    first = lc.intervals[0]
    out: list[_Emission] = []
    ordinal = 0

    def emit(at: datetime, verb: str, event_type: str, occurred: datetime, size: Any, status: str) -> None:
        nonlocal ordinal
        out.append(_Emission(at, verb, lc.key, _event(lc, event_type, ordinal, occurred, size, status)))
        ordinal += 1

    if start_type is not None:
        emit(lc.created_at, "note", start_type, lc.created_at, first.size, lc.phases[0].status.lower())
    if lc.resource_type in _CREATE_ANNOUNCED_AT_REQUEST:
        announced = lc.phases[0]
    else:
        announced = next(
            (p for p in lc.phases if not in_transition(lc.resource_type, p.status, p.task_state)), lc.phases[-1]
        )
    emit(announced.at, "create", create_type, lc.created_at, first.size, announced.status.lower())
    if update_type is not None:
        for before, interval in zip(lc.intervals, lc.intervals[1:]):
            shown = lc.phase_at(interval.start)
            event_type = update_type
            if interval.size == before.size and interval.status != before.status and before.status and interval.status:
                # a power action, as nova announces it (the status is the API's, lower-cased)
                event_type = (_POWER_INTO[interval.status] if interval.status in _POWER_INTO
                              else _POWER_OUT_OF[before.status])
            emit(interval.start, "update", event_type, interval.start, interval.size,
                 shown.status.lower() if shown else "")
    if lc.deleted_at is not None:
        emit(lc.deleted_at, "delete", delete_type, lc.deleted_at, lc.size,
             _DELETED_STATUS.get(lc.resource_type, "deleted"))
    out.sort(key=lambda e: e.emitted_at)  # stable: same-instant events keep their lifecycle order
    return out


class CollectorStream:
    """All generated events and their deliveries, ordered by delivery instant."""

    def __init__(self, truth: GroundTruth, delivery: DeliverySpec, rng: random.Random):
        self.delivery = delivery
        self._generated: list[dict[str, Any]] = []
        self._deliveries: list[Delivery] = []
        self._lost_by_verb: dict[str, set[ResourceKey]] = {"create": set(), "update": set(), "delete": set(), "note": set()}
        self._lost_events: Counter[tuple[str, str]] = Counter()  # (cloud, verb) -> events lost
        per_cloud: dict[str, list[_Emission]] = {}
        for lc in truth:
            per_cloud.setdefault(lc.cloud, []).extend(lifecycle_emissions(lc))
        for cloud in truth.clouds:
            emissions = per_cloud.get(cloud, [])
            emissions.sort(key=lambda e: e.emitted_at)
            self._deliver(emissions, rng)
        self._deliveries.sort(key=lambda d: d.delivered_at)  # stable: ties keep draw order
        self._times = [d.delivered_at for d in self._deliveries]
        self._by_cloud: dict[str, tuple[list[datetime], list[Delivery]]] = {}
        for d in self._deliveries:
            times, items = self._by_cloud.setdefault(d.cloud, ([], []))
            times.append(d.delivered_at)
            items.append(d)

    def _deliver(self, emissions: list[_Emission], rng: random.Random) -> None:
        spec = self.delivery
        last_first_copy: datetime | None = None
        for emission in emissions:
            # Five draws per event, always, so settings change outcomes but never shift the stream.
            u_loss, u_tail, u_delay, u_dup, u_dup_delay = (rng.random() for _ in range(5))
            self._generated.append(emission.event)
            if u_loss < spec.loss:
                self._lost_by_verb[emission.verb].add(emission.key)
                self._lost_events[(emission.key.cloud, emission.verb)] += 1
                continue
            if u_tail < spec.delay_tail_probability:
                low, high = spec.delay_tail_seconds
                delay = low + (high - low) * u_delay
            else:
                delay = -math.log(1.0 - u_delay) * spec.delay_mean_seconds
            delivered_at = emission.emitted_at + timedelta(seconds=delay)
            if not spec.reorder and last_first_copy is not None and delivered_at < last_first_copy:
                delivered_at = last_first_copy
            last_first_copy = delivered_at
            self._deliveries.append(Delivery(delivered_at, emission.emitted_at, emission.event))
            if u_dup < spec.duplicates:
                low, high = spec.duplicate_delay_seconds
                again = delivered_at + timedelta(seconds=low + (high - low) * u_dup_delay)
                self._deliveries.append(Delivery(again, emission.emitted_at, emission.event, duplicate=True))

    # -- reading -------------------------------------------------------------------------------

    def generated(self, cloud: str | None = None) -> list[dict[str, Any]]:
        """Every event the services emitted (delivered or not), as copies, in emission order per cloud."""
        return [copy_event(e) for e in self._generated if cloud is None or e["cloud"] == cloud]

    def deliveries(self, after: datetime | None = None, until: datetime | None = None,
                   *, cloud: str | None = None) -> list[Delivery]:
        """Deliveries with ``after < delivered_at <= until`` (either bound open when None), in order.

        The ``Delivery`` objects share their event dicts with the stream: treat them as read-only
        (``delivered`` hands out copies).
        """
        if cloud is None:
            times, items = self._times, self._deliveries
        else:
            times, items = self._by_cloud.get(cloud, ([], []))
        low = 0 if after is None else bisect_right(times, to_utc(after))
        high = len(items) if until is None else bisect_right(times, to_utc(until))
        return items[low:high]

    def delivered(self, after: datetime | None = None, until: datetime | None = None,
                  *, cloud: str | None = None) -> list[dict[str, Any]]:
        """The events delivered in ``(after, until]``, as envelope dicts (fresh copies), in arrival order."""
        return [copy_event(d.event) for d in self.deliveries(after, until, cloud=cloud)]

    def lost(self, verb: str, cloud: str | None = None) -> frozenset[ResourceKey]:
        """Resources that lost at least one event of the verb (``create``, ``update``, ``delete``, ``note``)."""
        return frozenset(k for k in self._lost_by_verb[verb] if cloud is None or k.cloud == cloud)

    @property
    def lost_creates(self) -> frozenset[ResourceKey]:
        return frozenset(self._lost_by_verb["create"])

    @property
    def lost_deletes(self) -> frozenset[ResourceKey]:
        return frozenset(self._lost_by_verb["delete"])

    @property
    def lost_both(self) -> frozenset[ResourceKey]:
        return frozenset(self._lost_by_verb["create"] & self._lost_by_verb["delete"])

    def stats(self, cloud: str | None = None) -> DeliveryStats:
        if cloud is None:
            generated = len(self._generated)
            copies: list[Delivery] = self._deliveries
        else:
            generated = sum(1 for e in self._generated if e["cloud"] == cloud)
            copies = self._by_cloud.get(cloud, ([], []))[1]
        lost: Counter[str] = Counter()
        for (lost_cloud, verb), count in self._lost_events.items():
            if cloud is None or lost_cloud == cloud:
                lost[verb] += count
        creates, deletes = self.lost("create", cloud), self.lost("delete", cloud)
        duplicated = sum(1 for d in copies if d.duplicate)
        return DeliveryStats(
            events_generated=generated,
            events_lost=sum(lost.values()),
            events_duplicated=duplicated,
            deliveries=len(copies),
            creates_lost=len(creates),
            deletes_lost=len(deletes),
            both_lost=len(creates & deletes),
            updates_lost=lost["update"],
        )
