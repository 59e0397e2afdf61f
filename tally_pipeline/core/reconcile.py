"""Reconciliation's diff: what the platform holds against what the projection holds (DESIGN.md §4.5).

Pure: projection rows, per-type listings, the deleted-servers listing, settings and the run's
instant in; corrections (to be written as ``sync.*`` events) and deferrals out. The table:

| platform holds           | projection holds | action |
|--------------------------|------------------|--------|
| resource                 | nothing live     | ``sync.create``: at the platform's ``created_at`` if the projection never knew it, at poll time if it holds it as deleted |
| nothing                  | live resource    | ``sync.delete``: at the real deletion time when the platform gives one, else at poll time |
| resource, other size/project | live resource | ``sync.update`` at poll time |

Deferred, not corrected: a resource the platform reports in transition, or that the platform or
the projection dates inside the settle window before the run; deletes of a type that would lose
more than the mass-delete guard's share of its live resources (types with ≥ 20 live). The
missed-delete pass runs only over types that enumerated.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from tally_pipeline.adapters.base import DeletedListing, DeletedResource, Enumerated, ListedResource, TypeListing

SYNC_NAMESPACE = uuid.UUID("6f1b7c52-3e7a-5b0e-9c39-7a11e0c0ffee")
MASS_DELETE_MIN_LIVE = 20

Action = Literal["create", "update", "delete"]
DeferReason = Literal["in_transition", "settle_window", "mass_delete_guard"]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ProjectedResource:
    """What reconciliation needs of a ``current_resources`` row.

    The last event time is carried as epoch microseconds: a cloud has millions of rows and only the
    few that differ from the listing ever need it as a datetime.
    """

    resource_type: str
    resource_id: str
    status: str  # live | deleted | unborn
    project_id: str | None
    size: dict[str, Any] | None
    last_event_us: int

    @property
    def last_event_at(self) -> datetime:
        return _EPOCH + timedelta(microseconds=self.last_event_us)

    @classmethod
    def at(cls, resource_type: str, resource_id: str, status: str, project_id: str | None,
           size: dict[str, Any] | None, last_event_at: datetime) -> ProjectedResource:
        return cls(resource_type, resource_id, status, project_id, size, (last_event_at - _EPOCH) // timedelta(microseconds=1))


@dataclass(frozen=True, slots=True)
class Correction:
    action: Action
    resource_type: str
    resource_id: str
    occurred_at: datetime
    project_id: str | None
    size: dict[str, Any] | None
    why: str  # e.g. "not in projection", "deleted in projection", "missing from listing", "size differs"
    recovered: bool = False  # created and deleted between runs, found in the deleted listing


@dataclass(frozen=True, slots=True)
class Deferral:
    action: Action
    resource_type: str
    resource_id: str
    reason: DeferReason
    detail: str
    retry_after: datetime | None  # when the settle window has passed (None: needs a person)


@dataclass
class TypeOutcome:
    status: Literal["enumerated", "failed"]
    listed: int = 0
    reason: str | None = None
    live_before: int = 0
    corrections: int = 0
    deferred: int = 0
    guard_tripped: bool = False


@dataclass
class Plan:
    corrections: list[Correction] = field(default_factory=list)
    deferrals: list[Deferral] = field(default_factory=list)
    types: dict[str, TypeOutcome] = field(default_factory=dict)

    def count(self, action: Action) -> int:
        return sum(1 for c in self.corrections if c.action == action)


@dataclass(frozen=True)
class Settings:
    settle_window: timedelta
    mass_delete_guard: float  # share of a type's live resources; 1.0 switches the guard off


def plan(
    projected: Iterable[ProjectedResource],
    listings: Sequence[TypeListing],
    deleted: DeletedListing | None,
    settings: Settings,
    now: datetime,
) -> Plan:
    """Diff one cloud. ``projected`` holds every resource the projection knows for the cloud."""
    result = Plan()
    settle_from = now - settings.settle_window
    # Per type, by id: no tuple keys to build for a million rows.
    by_type: dict[str, dict[str, ProjectedResource]] = {}
    live_by_type: dict[str, dict[str, ProjectedResource]] = {}
    for p in projected:
        by_type.setdefault(p.resource_type, {})[p.resource_id] = p
        if p.status == "live":
            live_by_type.setdefault(p.resource_type, {})[p.resource_id] = p
    gone: dict[tuple[str, str], DeletedResource] = {}
    if deleted is not None and deleted.available:
        gone = {(d.resource_type, d.resource_id): d for d in deleted.items}

    for listing in listings:
        rtype = listing.resource_type
        live = live_by_type.get(rtype, {})
        outcome = TypeOutcome(status=listing.status, live_before=len(live))
        result.types[rtype] = outcome
        if not isinstance(listing, Enumerated):
            outcome.reason = listing.reason
            continue
        outcome.listed = len(listing.items)
        known = by_type.get(rtype, {})
        # Listed live resources are taken out of ``unseen`` as the listing goes by; what is left at
        # the end is missing from the listing, still in projection order.
        unseen = dict(live)
        for item in listing.items:
            p = unseen.pop(item.resource_id, None)
            if p is not None and p.size == item.size and p.project_id == item.project_id:
                continue  # in sync: the common case, kept free of calls
            if p is None:
                p = known.get(item.resource_id)  # not live in the projection, or not known at all
            _diff_listed(item, p, settle_from, settings, now, result, outcome)
        deletes: list[Correction] = []
        for p in unseen.values():
            if p.last_event_at > settle_from:
                _defer(result, outcome, "delete", p.resource_type, p.resource_id, "settle_window",
                       f"missing from listing, but the projection heard of it at {p.last_event_at.isoformat()}",
                       p.last_event_at + settings.settle_window)
                continue
            real = gone.get((rtype, p.resource_id))
            if real is not None:
                deletes.append(Correction("delete", rtype, p.resource_id, real.deleted_at, None, None,
                                          "missing from listing; deleted per the platform"))
            else:
                deletes.append(Correction("delete", rtype, p.resource_id, now, None, None, "missing from listing"))
        guard_on = settings.mass_delete_guard < 1.0 and len(live) >= MASS_DELETE_MIN_LIVE
        if guard_on and deletes and len(deletes) / len(live) > settings.mass_delete_guard:
            outcome.guard_tripped = True
            for c in deletes:
                _defer(result, outcome, "delete", rtype, c.resource_id, "mass_delete_guard",
                       f"{len(deletes)} of {len(live)} live {rtype} resources missing from one listing "
                       f"(guard {settings.mass_delete_guard:.0%})", None)
        else:
            result.corrections.extend(deletes)
            outcome.corrections += len(deletes)

    _recover(gone.values(), by_type, settle_from, settings, result)
    return result


def _diff_listed(item: ListedResource, p: ProjectedResource | None, settle_from: datetime, settings: Settings,
                 now: datetime, result: Plan, outcome: TypeOutcome) -> None:
    rtype, rid = item.resource_type, item.resource_id
    if p is not None and p.status == "live":
        if (item.project_id, item.size) == (p.project_id, p.size):
            return
        what = "size" if item.project_id == p.project_id else "project" if item.size == p.size else "size and project"
        if item.in_transition:
            _defer(result, outcome, "update", rtype, rid, "in_transition", f"{what} differs; status {item.status}",
                   now + settings.settle_window)
        elif _recent(item.updated_at, settle_from) or p.last_event_at > settle_from:
            _defer(result, outcome, "update", rtype, rid, "settle_window", f"{what} differs; changed recently",
                   _latest(item.updated_at, p.last_event_at) + settings.settle_window)
        else:
            result.corrections.append(Correction("update", rtype, rid, now, item.project_id, item.size, f"{what} differs"))
            outcome.corrections += 1
        return
    known_deleted = p is not None and p.status == "deleted"
    if item.in_transition:
        _defer(result, outcome, "create", rtype, rid, "in_transition", f"not live in projection; status {item.status}",
               now + settings.settle_window)
    elif item.created_at > settle_from or (p is not None and p.last_event_at > settle_from):
        latest = item.created_at if p is None else _latest(item.created_at, p.last_event_at)
        _defer(result, outcome, "create", rtype, rid, "settle_window", "not live in projection; seen recently",
               latest + settings.settle_window)
    elif known_deleted:
        result.corrections.append(Correction("create", rtype, rid, now, item.project_id, item.size, "deleted in projection"))
        outcome.corrections += 1
    else:
        result.corrections.append(Correction("create", rtype, rid, item.created_at, item.project_id, item.size,
                                             "not in projection"))
        outcome.corrections += 1


def _recover(gone: Iterable[DeletedResource], by_type: Mapping[str, Mapping[str, ProjectedResource]],
             settle_from: datetime, settings: Settings, result: Plan) -> None:
    """Resources created and deleted between runs whose events were both lost: both ends are known."""
    for d in gone:
        p = by_type.get(d.resource_type, {}).get(d.resource_id)
        if p is not None and p.status != "unborn":
            continue  # known: the missed-delete pass (live) or nothing to do (deleted)
        if d.deleted_at > settle_from or (p is not None and p.last_event_at > settle_from):
            outcome = result.types.get(d.resource_type)
            result.deferrals.append(Deferral("create", d.resource_type, d.resource_id, "settle_window",
                                             "created and deleted since the last run; deleted recently",
                                             d.deleted_at + settings.settle_window))
            if outcome is not None:
                outcome.deferred += 1
            continue
        result.corrections.append(Correction("create", d.resource_type, d.resource_id, d.created_at, d.project_id,
                                             d.size, "created and deleted between runs", recovered=True))
        result.corrections.append(Correction("delete", d.resource_type, d.resource_id, d.deleted_at, None, None,
                                             "created and deleted between runs", recovered=True))


def _defer(result: Plan, outcome: TypeOutcome, action: Action, rtype: str, rid: str, reason: DeferReason,
           detail: str, retry_after: datetime | None) -> None:
    result.deferrals.append(Deferral(action, rtype, rid, reason, detail, retry_after))
    outcome.deferred += 1


def _recent(value: datetime | None, settle_from: datetime) -> bool:
    return value is not None and value > settle_from


def _latest(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a


EVENT_TYPES: dict[Action, str] = {"create": "sync.create", "update": "sync.update", "delete": "sync.delete"}


def synthetic_event_id(cloud: str, run_key: str, resource_type: str, resource_id: str, action: Action) -> str:
    """Deterministic: a retried run (same run key) writes the same ids, and dedup absorbs them."""
    return str(uuid.uuid5(SYNC_NAMESPACE, "\x1f".join((cloud, run_key, resource_type, resource_id, action))))


def synthetic_events(cloud: str, run_key: str, corrections: Iterable[Correction]) -> list[dict[str, Any]]:
    """The corrections as ordinary envelopes, ``source: reconciliation``."""
    events = []
    for c in corrections:
        payload: dict[str, Any] = {"sync": {"run_key": run_key, "why": c.why}}
        if c.size is not None:
            payload["size"] = c.size
        event: dict[str, Any] = {
            "event_id": synthetic_event_id(cloud, run_key, c.resource_type, c.resource_id, c.action),
            "event_type": EVENT_TYPES[c.action],
            "cloud": cloud,
            "resource_type": c.resource_type,
            "resource_id": c.resource_id,
            "occurred_at": c.occurred_at.isoformat(),
            "source": "reconciliation",
            "payload": payload,
        }
        if c.project_id is not None:
            event["project_id"] = c.project_id
        events.append(event)
    return events
