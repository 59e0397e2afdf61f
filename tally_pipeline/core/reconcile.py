"""Reconciliation's diff: what the platform holds against what the projection holds.

Pure: projection rows, per-type listings (each with its poll time: the instant its listing
began), the deleted-servers listing, settings in; corrections (to be written as ``sync.*`` events),
deferrals and deletes awaiting the platform's confirmation out. The table:

| platform holds           | projection holds | action |
|--------------------------|------------------|--------|
| resource                 | nothing live     | ``sync.create``: where billable life starts (``life_start``: the platform's own start instant, e.g. a server's launch, else ``created_at``; the request, when earlier, as a ``sync.create.start`` note) if the projection never knew it; if it holds it as deleted, at the platform's ``updated`` when that is after the projection's delete (a restore), else at poll time |
| nothing                  | live resource    | ``sync.delete``, once the platform confirms it: at the real deletion time when the platform gives one, else at poll time |
| resource, other size/project | live resource | ``sync.update`` at poll time |
| instance, other status | live resource | ``sync.update`` at poll time (``STATUS_TYPES``) |

Deferred, not corrected: a resource the platform reports in transition (unless it has been in
transition longer than ``Settings.stuck_after``: then it is booked as listed and counted
``stuck_transition``), or that the platform (created, updated or deleted time) or the projection
dates inside the settle window before the poll; deletes of a type that would lose more than the
mass-delete guard's share of its live resources (types with >= 20 live; decided once per run, on
the state before it); a delete by absence the platform does not confirm (``unconfirmed``). A listed
``UNKNOWN`` placeholder or a skipped (unreadable) item is present: never deleted, never updated.
A resource the platform shows never ran (a failed build) is never created nor recovered. A
recovered lifecycle (created and deleted between runs) carries the status the deleted listing shows
for its life, else ``unknown`` (``UNKNOWN_STATUS``), never none.

The missed-delete pass runs only over types that enumerated. A listing that holds nothing but the
credentials' own project while the projection holds other projects' live resources is taken as
narrowed by the platform (``insufficient_scope``): the type counts as failed.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from tally_pipeline.core.platform import (
    INSUFFICIENT_SCOPE,
    UNKNOWN_STATUS,
    Confirmation,
    DatedBy,
    DeletedListing,
    DeletedResource,
    Enumerated,
    ListedResource,
    TypeListing,
    life_start,
)

SYNC_NAMESPACE = uuid.UUID("6f1b7c52-3e7a-5b0e-9c39-7a11e0c0ffee")
MASS_DELETE_MIN_LIVE = 20
#: Types whose platform status reconciliation keeps in step with the listing (a difference is a
#: ``sync.update``): a server's power and lifecycle statuses are what a pricing rule tells apart.
#: Other types' statuses (a volume's ``in-use`` / ``available``, an address's ``DOWN``) change with
#: every attach and are recorded as events give them, never corrected.
STATUS_TYPES = frozenset({"instance"})

Action = Literal["create", "update", "delete"]
DeferReason = Literal["in_transition", "settle_window", "mass_delete_guard", "unconfirmed"]


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
    platform_status: str | None = None  # the fold's, as the events gave it

    @property
    def last_event_at(self) -> datetime:
        return _EPOCH + timedelta(microseconds=self.last_event_us)

    @classmethod
    def at(cls, resource_type: str, resource_id: str, status: str, project_id: str | None,
           size: dict[str, Any] | None, last_event_at: datetime, platform_status: str | None = None
           ) -> ProjectedResource:
        return cls(resource_type, resource_id, status, project_id, size,
                   (last_event_at - _EPOCH) // timedelta(microseconds=1), platform_status)


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
    stuck: bool = False  # booked although in transition, for longer than the bound
    status: str | None = None  # the platform status it shows (payload.status), lower-cased
    #: A create whose billable life starts after the platform's request (a server launched after
    #: its request): the request, written as a ``sync.create.start`` note so the history keeps it.
    requested_at: datetime | None = None
    #: What the platform said to date it by, for a status or flavor difference (``redate``):
    #: ``action``, ``updated`` or ``poll``; None where no such rule applies.
    dated_by: DatedBy | None = None
    #: A lifecycle's earlier history is written as several events of one resource in one run: each
    #: after the first is numbered (its event id tells them apart).
    step: int = 0
    #: What dating it by the platform's record needs (``redate``); None: dated as planned.
    basis: Basis | None = field(default=None, compare=False, repr=False)
    #: The size it starts on is not known (resized before, and nothing kept says from what).
    size_unknown: bool = False


@dataclass(frozen=True, slots=True)
class Basis:
    """What ``redate`` needs of an instance correction: the projection's view and the listing's times."""

    observed: datetime | None  # the projection's last event (None: it knew nothing)
    updated: datetime | None  # the platform's last change of any kind
    created: datetime  # the platform's request
    size_differs: bool = False
    status_differs: bool = False
    prior_size: dict[str, Any] | None = None
    prior_status: str | None = None
    prior_project: str | None = None


@dataclass(frozen=True, slots=True)
class KeptUpdate:
    """An update the history kept of a resource the projection has not seen born (its create lost)."""

    occurred_at: datetime
    event_type: str
    size: dict[str, Any] | None
    #: Its event type changes the size (a resize): what the size was before it is not in it.
    resizes: bool = False



@dataclass(frozen=True, slots=True)
class Deferral:
    action: Action
    resource_type: str
    resource_id: str
    reason: DeferReason
    detail: str
    retry_after: datetime | None  # when the settle window has passed (None: no follow-up before the next schedule)


@dataclass
class TypeOutcome:
    status: Literal["enumerated", "failed"]
    listed: int = 0
    reason: str | None = None
    live_before: int = 0
    corrections: int = 0
    deferred: int = 0
    guard_tripped: bool = False
    guard_detail: str | None = None
    poll_time: datetime | None = None
    unknown: int = 0  # listed as present without details (the platform's UNKNOWN placeholders)
    skipped: dict[str, int] = field(default_factory=dict)  # listed but unreadable, by reason
    code: str | None = None  # a failed type's code (``insufficient_scope``, ...)
    never_ran: dict[str, int] = field(default_factory=dict)  # failed builds not billed, by why
    stuck_transition: int = 0  # booked although in transition, for longer than the bound
    restarts: int = 0  # listings started over because their paging marker vanished


@dataclass
class Plan:
    corrections: list[Correction] = field(default_factory=list)
    deferrals: list[Deferral] = field(default_factory=list)
    types: dict[str, TypeOutcome] = field(default_factory=dict)
    #: Deletes by absence waiting for the platform's confirmation (``resolve`` books or defers them).
    pending: list[Correction] = field(default_factory=list)

    def held_by_guard(self) -> dict[str, str]:
        """The types whose mass-delete guard tripped, with why: the run keeps holding them."""
        return {t: o.guard_detail or "" for t, o in self.types.items() if o.guard_tripped}

    def count(self, action: Action) -> int:
        return sum(1 for c in self.corrections if c.action == action)


@dataclass(frozen=True)
class Settings:
    settle_window: timedelta
    mass_delete_guard: float  # share of a type's live resources; 1.0 switches the guard off
    #: A resource in transition since longer than this (by the platform's last change) is booked as
    #: listed instead of deferred again; None never books one.
    stuck_after: timedelta | None = None


def plan(
    projected: Iterable[ProjectedResource],
    listings: Sequence[TypeListing],
    deleted: DeletedListing | None,
    settings: Settings,
    now: datetime,
    *,
    poll_times: Mapping[str, datetime] | None = None,
    held: Mapping[str, str] | None = None,
) -> Plan:
    """Diff one cloud. ``projected`` holds every resource the projection knows for the cloud.

    ``poll_times`` gives each type's poll time (default ``now``). ``held`` is the mass-delete
    guard as decided earlier in the same run (type → why): those types hold every delete and no
    other type trips; ``None`` decides it here. Deletes by absence come back in ``pending``.
    """
    result = Plan()
    polls = poll_times or {}
    by_type, live_by_type = _index(projected)
    gone: dict[tuple[str, str], DeletedResource] = {}
    if deleted is not None and deleted.available:
        gone = {(d.resource_type, d.resource_id): d for d in deleted.items}
    for listing in listings:
        rtype = listing.resource_type
        poll = polls.get(rtype, now)
        live = live_by_type.get(rtype, {})
        outcome = TypeOutcome(status=listing.status, live_before=len(live), poll_time=poll)
        result.types[rtype] = outcome
        if not isinstance(listing, Enumerated):
            outcome.reason, outcome.code = listing.reason, listing.code
            continue
        outcome.listed, outcome.restarts = len(listing.items), listing.restarts
        narrowed = _narrowed(listing, live)
        if narrowed is not None:
            outcome.status, outcome.code, outcome.reason = "failed", INSUFFICIENT_SCOPE, narrowed
            continue
        unseen = _diff_listed_items(listing, live, by_type.get(rtype, {}), poll, settings, result, outcome)
        confirmed, missing = _absent(unseen, rtype, gone, poll, settings, result, outcome)
        if _guard_holds(len(confirmed) + len(missing), len(live), rtype, settings, held, outcome):
            for c in (*confirmed, *missing):  # held before any confirmation is asked for
                _defer(result, outcome, "delete", rtype, c.resource_id, "mass_delete_guard",
                       outcome.guard_detail or "", None)
            continue
        result.corrections.extend(confirmed)
        outcome.corrections += len(confirmed)
        result.pending.extend(missing)

    _recover(gone.values(), by_type, polls, now, settings, result)
    return result


def _index(projected: Iterable[ProjectedResource]
           ) -> tuple[dict[str, dict[str, ProjectedResource]], dict[str, dict[str, ProjectedResource]]]:
    """Every projected resource, and the live ones, per type and id (no tuple keys for a million rows)."""
    by_type: dict[str, dict[str, ProjectedResource]] = {}
    live_by_type: dict[str, dict[str, ProjectedResource]] = {}
    for row in projected:
        by_type.setdefault(row.resource_type, {})[row.resource_id] = row
        if row.status == "live":
            live_by_type.setdefault(row.resource_type, {})[row.resource_id] = row
    return by_type, live_by_type


def _diff_listed_items(listing: Enumerated, live: Mapping[str, ProjectedResource],
                       known: Mapping[str, ProjectedResource], poll: datetime, settings: Settings,
                       result: Plan, outcome: TypeOutcome) -> dict[str, ProjectedResource]:
    """The first pass: each listed item against the projection. Returns the live resources the
    listing did not show (taken out as the listing goes by), still in projection order."""
    settle_from = poll - settings.settle_window
    unseen = dict(live)
    for skip in listing.skipped:  # present, though unreadable: never a delete by absence
        unseen.pop(skip.resource_id, None)
        outcome.skipped[skip.reason] = outcome.skipped.get(skip.reason, 0) + 1
    for item in listing.items:
        p = unseen.pop(item.resource_id, None)
        if item.unknown:
            _unknown(item, p, result, outcome)
            continue
        if (p is not None and p.size == item.size and p.project_id == item.project_id
                and (listing.resource_type not in STATUS_TYPES or p.platform_status == shown_status(item))):
            continue  # in sync: the common case, kept free of calls
        if p is None:
            p = known.get(item.resource_id)  # not live in the projection, or not known at all
        _diff_listed(item, p, settle_from, settings, poll, result, outcome)
    return unseen


def _absent(unseen: Mapping[str, ProjectedResource], rtype: str, gone: Mapping[tuple[str, str], DeletedResource],
            poll: datetime, settings: Settings, result: Plan, outcome: TypeOutcome
            ) -> tuple[list[Correction], list[Correction]]:
    """The second pass: live resources missing from the listing. Returns the deletes the deleted
    listing confirms (and dates), and those still to be confirmed by asking for each one; recent
    ones wait out the settle window."""
    settle_from = poll - settings.settle_window
    confirmed: list[Correction] = []
    missing: list[Correction] = []
    for p in unseen.values():
        if p.last_event_at > settle_from:
            _defer(result, outcome, "delete", p.resource_type, p.resource_id, "settle_window",
                   f"missing from listing, but the projection heard of it at {p.last_event_at.isoformat()}",
                   p.last_event_at + settings.settle_window)
            continue
        real = gone.get((rtype, p.resource_id))
        if real is not None and real.deleted_at > settle_from:
            _defer(result, outcome, "delete", rtype, p.resource_id, "settle_window",
                   f"deleted at {real.deleted_at.isoformat()} per the platform, inside the settle window",
                   real.deleted_at + settings.settle_window)
        elif real is not None:
            confirmed.append(Correction("delete", rtype, p.resource_id, min(real.deleted_at, poll), None, None,
                                        "missing from listing; deleted per the platform"))
        else:
            missing.append(Correction("delete", rtype, p.resource_id, poll, None, None, "missing from listing"))
    return confirmed, missing


def _guard_holds(deletes: int, live: int, rtype: str, settings: Settings, held: Mapping[str, str] | None,
                 outcome: TypeOutcome) -> bool:
    """The third pass: whether the mass-delete guard holds this type's deletes (decided here when
    ``held`` is None, else as the run decided it earlier)."""
    if held is None:
        guard_on = settings.mass_delete_guard < 1.0 and live >= MASS_DELETE_MIN_LIVE
        if guard_on and deletes and deletes / live > settings.mass_delete_guard:
            outcome.guard_tripped = True
            outcome.guard_detail = (f"{deletes} of {live} live {rtype} resources missing from one "
                                    f"listing (guard {settings.mass_delete_guard:.0%})")
    elif rtype in held:
        outcome.guard_tripped = True
        outcome.guard_detail = held[rtype]
    return outcome.guard_tripped


def _narrowed(listing: Enumerated, live: Mapping[str, ProjectedResource]) -> str | None:
    """Why a listing looks narrowed to the credentials' own project, or None.

    A listing holding items of the own project only, while the projection holds live resources
    of other projects, is what a service that silently narrows its listing answers a caller without the
    all-projects policy. An empty listing proves nothing either way (the mass-delete guard and
    the scope proof cover it).
    """
    own = listing.own_project
    if own is None or not listing.items or any(i.project_id != own for i in listing.items):
        return None
    others = sum(1 for p in live.values() if p.project_id != own)
    if not others:
        return None
    return (f"{INSUFFICIENT_SCOPE}: the listing holds only project {own}'s {len(listing.items)} resources while the "
            f"projection holds {others} live {listing.resource_type} resources of other projects")


def resolve(result: Plan, confirmations: Mapping[tuple[str, str], Confirmation], settings: Settings) -> None:
    """Book each pending delete the platform confirmed gone; defer the others as ``unconfirmed``.

    A confirmation that dates the deletion (a record shown as deleted) dates the delete, unless
    that date is inside the settle window (then it waits like any recent change).
    """
    for c in result.pending:
        outcome = result.types[c.resource_type]
        answer = confirmations.get((c.resource_type, c.resource_id))
        if answer is None or not answer.gone:
            detail = answer.detail if answer is not None else "not asked"
            _defer(result, outcome, "delete", c.resource_type, c.resource_id, "unconfirmed",
                   f"missing from listing, but the platform did not confirm it gone: {detail}", None)
            continue
        when = c.occurred_at
        if answer.deleted_at is not None:
            if answer.deleted_at > c.occurred_at - settings.settle_window:
                _defer(result, outcome, "delete", c.resource_type, c.resource_id, "settle_window",
                       f"deleted at {answer.deleted_at.isoformat()} per the platform, inside the settle window",
                       answer.deleted_at + settings.settle_window)
                continue
            when = answer.deleted_at
        result.corrections.append(Correction("delete", c.resource_type, c.resource_id, when, None, None,
                                             f"missing from listing; confirmed: {answer.detail}"))
        outcome.corrections += 1
    result.pending = []


def _unknown(item: ListedResource, p: ProjectedResource | None, result: Plan, outcome: TypeOutcome) -> None:
    """An ``UNKNOWN`` placeholder: present, size unknown. Nothing is corrected on its strength."""
    outcome.unknown += 1
    if p is None or p.status != "live":
        _defer(result, outcome, "create", item.resource_type, item.resource_id, "unconfirmed",
               f"listed as {item.status or 'unknown'} without its details (unreachable cell); size unknown", None)


def _stuck(item: ListedResource, now: datetime, settings: Settings) -> str | None:
    """Why an in-transition item counts as stuck (booked as listed), or None (deferred again).

    The platform's last change (``updated_at``, else ``created_at``) dates the transition's start at
    the latest, so the bound holds across our own outages. A resource that never ran (a build that
    has not launched, a load balancer still being created) is never booked this way.
    """
    if settings.stuck_after is None or item.never_ran is not None:
        return None
    since = item.updated_at or item.created_at
    if now - since <= settings.stuck_after:  # "longer than" the bound
        return None
    return f"stuck in transition: status {item.status or 'none'} since {since.isoformat()}"


def _diff_listed(item: ListedResource, p: ProjectedResource | None, settle_from: datetime, settings: Settings,
                 now: datetime, result: Plan, outcome: TypeOutcome) -> None:
    rtype, rid = item.resource_type, item.resource_id
    stuck = _stuck(item, now, settings) if item.in_transition else None
    waiting = item.in_transition and stuck is None
    status = shown_status(item)
    if p is not None and p.status == "live":
        status_differs = rtype in STATUS_TYPES and p.platform_status != status
        if (item.project_id, item.size) == (p.project_id, p.size) and not status_differs:
            return
        what = _what_differs(item, p, status_differs)
        if waiting:
            _defer(result, outcome, "update", rtype, rid, "in_transition", f"{what} differs; status {item.status}",
                   now + settings.settle_window)
        elif _recent(item.updated_at, settle_from) or p.last_event_at > settle_from:
            _defer(result, outcome, "update", rtype, rid, "settle_window", f"{what} differs; changed recently",
                   _latest(item.updated_at, p.last_event_at) + settings.settle_window)
        else:
            basis = None if stuck is not None or rtype not in STATUS_TYPES else Basis(
                p.last_event_at, item.updated_at, item.created_at, size_differs=item.size != p.size,
                status_differs=status_differs, prior_size=p.size, prior_status=p.platform_status,
                prior_project=p.project_id)
            result.corrections.append(Correction("update", rtype, rid, now, item.project_id, item.size,
                                                 f"{what} differs" + (f"; {stuck}" if stuck else ""),
                                                 stuck=stuck is not None, status=status,
                                                 dated_by="poll", basis=basis))
            outcome.corrections += 1
            outcome.stuck_transition += stuck is not None
        return
    known_deleted = p is not None and p.status == "deleted"
    if waiting:
        _defer(result, outcome, "create", rtype, rid, "in_transition", f"not live in projection; status {item.status}",
               now + settings.settle_window)
    elif item.never_ran is not None:
        # A failed build: the platform never ran it, so neither does the bill (ceilometer and
        # CloudKitty do not bill it either). Counted, so it is never silent.
        outcome.never_ran[item.never_ran] = outcome.never_ran.get(item.never_ran, 0) + 1
    elif (life_start(item.created_at, item.started_at) > settle_from
          or (p is not None and p.last_event_at > settle_from)
          or (known_deleted and _recent(item.updated_at, settle_from))):
        begun = life_start(item.created_at, item.started_at)
        latest = _latest(begun, p.last_event_at) if p is not None else begun
        latest = _latest(item.updated_at, latest) if known_deleted else latest
        _defer(result, outcome, "create", rtype, rid, "settle_window", "not live in projection; seen recently",
               latest + settings.settle_window)
    elif known_deleted:
        # Listed again after a delete (the restore of a soft-deleted server): the platform's last
        # change, when it is after our delete, is the restore; otherwise only the poll time is known.
        assert p is not None
        restored = item.updated_at is not None and p.last_event_at < item.updated_at <= now
        when = item.updated_at if restored and item.updated_at is not None else now
        result.corrections.append(Correction("create", rtype, rid, when, item.project_id, item.size,
                                             "deleted in projection" + (f"; {stuck}" if stuck else ""),
                                             stuck=stuck is not None, status=status))
        outcome.corrections += 1
        outcome.stuck_transition += stuck is not None
    else:
        start = life_start(item.created_at, item.started_at)
        # A resource whose history has events (``unborn``: its create lost) may have kept what
        # its size was before a change; an instance's past is read from the platform's record (``redate``).
        basis = None if stuck is not None else Basis(
            p.last_event_at if p is not None else None, item.updated_at, item.created_at)
        result.corrections.append(Correction("create", rtype, rid, start, item.project_id, item.size,
                                             "not in projection" + (f"; {stuck}" if stuck else ""),
                                             stuck=stuck is not None, status=status,
                                             # a resource with history has its request there already
                                             # (the collector keeps the platform's create.start)
                                             requested_at=_requested(item.created_at, start) if p is None else None,
                                             basis=basis))
        outcome.corrections += 1
        outcome.stuck_transition += stuck is not None


def shown_status(item: ListedResource) -> str | None:
    """The platform status a listing shows, as events carry it: lower-cased (the API says
    ``SHUTOFF``, its notifications' status is ``shutoff``); None when it shows none."""
    return item.status.lower() or None if item.status else None


def _what_differs(item: ListedResource, p: ProjectedResource, status_differs: bool) -> str:
    parts = [name for name, differs in (("size", item.size != p.size), ("project", item.project_id != p.project_id),
                                        ("status", status_differs)) if differs]
    return " and ".join(parts)


def _recover(gone: Iterable[DeletedResource], by_type: Mapping[str, Mapping[str, ProjectedResource]],
             polls: Mapping[str, datetime], now: datetime, settings: Settings, result: Plan) -> None:
    """Resources created and deleted between runs whose events were both lost: both ends are known."""
    for d in gone:
        settle_from = polls.get(d.resource_type, now) - settings.settle_window
        p = by_type.get(d.resource_type, {}).get(d.resource_id)
        if p is not None and p.status != "unborn":
            continue  # known: the missed-delete pass (live) or nothing to do (deleted)
        if d.never_ran is not None:  # a failed build, deleted: no lifecycle to recover
            outcome = result.types.get(d.resource_type)
            if outcome is not None:
                outcome.never_ran[d.never_ran] = outcome.never_ran.get(d.never_ran, 0) + 1
            continue
        if d.deleted_at > settle_from or (p is not None and p.last_event_at > settle_from):
            outcome = result.types.get(d.resource_type)
            result.deferrals.append(Deferral("create", d.resource_type, d.resource_id, "settle_window",
                                             "created and deleted since the last run; deleted recently",
                                             d.deleted_at + settings.settle_window))
            if outcome is not None:
                outcome.deferred += 1
            continue
        start = min(life_start(d.created_at, d.started_at), d.deleted_at)
        # The deleted listing shows the deletion, rarely the life before it: a status it does not
        # show is marked unknowable, never left empty (every meter would bill it silently).
        why = "created and deleted between runs"
        result.corrections.append(Correction(
            "create", d.resource_type, d.resource_id, start, d.project_id, d.size,
            why if d.status else f"{why}; status unknown (the deleted listing shows only the deletion)",
            recovered=True, status=d.status or UNKNOWN_STATUS,
            requested_at=_requested(d.created_at, start) if p is None else None))
        result.corrections.append(Correction("delete", d.resource_type, d.resource_id, d.deleted_at, None, None,
                                             why, recovered=True))


def wants_actions(corrections: Iterable[Correction]) -> list[str]:
    """The instances whose corrections the platform's record of actions dates (``redate``): a status or flavor
    difference, or a lifecycle reconciliation opens. Nothing else is asked about."""
    return sorted({c.resource_id for c in corrections
                   if c.resource_type in STATUS_TYPES and c.basis is not None and c.step == 0
                   and (c.action == "create" or c.basis.size_differs or c.basis.status_differs)})


def born_unseen(corrections: Iterable[Correction]) -> list[tuple[str, str]]:
    """The creates of resources whose history holds events already (their create lost): what those
    kept may say of their size before a change (``KeptUpdate``)."""
    return [(c.resource_type, c.resource_id) for c in corrections
            if c.action == "create" and c.basis is not None and c.basis.observed is not None]


def older_size(kept: Sequence[KeptUpdate], start: datetime, before: datetime | None = None
               ) -> tuple[dict[str, Any] | None, bool]:
    """The size a resource had from ``start``, as the updates its history kept say it: (size, known).

    Without ``before``: the earliest kept update with a size after ``start`` — an update that does
    not resize carries the size it had before too (known); a resize says only the new one (its
    size, unknown). With ``before`` (an instance resized then, per the platform's record): the last kept
    update before it that is not a resize (known), else unknown. (None, True): nothing kept.
    """
    sized = sorted((k for k in kept if k.size is not None and k.occurred_at > start
                    and (before is None or k.occurred_at < before)), key=lambda k: k.occurred_at)
    if before is not None:
        plain = [k for k in sized if not k.resizes]
        return (plain[-1].size, True) if plain else (None, False)
    if not sized:
        return None, True
    return sized[0].size, not sized[0].resizes


class Dating(Protocol):
    """How a platform's own record of what was done to its resources (a server's actions) dates
    reconciliation's corrections. A provider that keeps such a record gives one (``redate``)."""

    def date_update(self, c: Correction, basis: Basis, record: Sequence[Any], poll: datetime
                    ) -> list[Correction]:
        """A status or flavor update dated by the record (split in two when changed apart)."""
        ...

    def with_past(self, c: Correction, basis: Basis, record: Sequence[Any], kept: Sequence[KeptUpdate],
                  poll: datetime) -> list[Correction]:
        """A lifecycle opened now, with its past as the record tells it."""
        ...


def redate(corrections: Sequence[Correction], dating: Dating | None,
           records: Mapping[str, Sequence[Any]] | None, kept: Mapping[tuple[str, str], Sequence[KeptUpdate]],
           polls: Mapping[str, datetime], now: datetime) -> list[Correction]:
    """The corrections dated by the platform's own record.

    ``records`` holds the record per resource asked about (None: the adapter keeps none, so
    nothing is dated by one; then ``dating`` is not used); ``kept`` the updates kept in the history
    of resources created now. A status or flavor update is dated by ``dating``; a lifecycle opened
    for a resource the record speaks of gets its past from it; a create whose history kept updates
    starts on the size they say it had before, or is marked ``size_unknown``.
    """
    if records is not None and dating is None:
        raise ValueError("records to date by, but no rule to date them with")
    out: list[Correction] = []
    for c in corrections:
        if c.basis is None:
            out.append(c)
            continue
        poll = polls.get(c.resource_type, now)
        found = records.get(c.resource_id) if records is not None and c.resource_type in STATUS_TYPES else None
        if c.action == "update":
            out.extend(dating.date_update(c, c.basis, found or (), poll) if dating is not None and records is not None
                       else [_plain(c)])
        elif found is not None and dating is not None:
            out.extend(dating.with_past(c, c.basis, found, kept.get((c.resource_type, c.resource_id), ()), poll))
        else:
            out.append(_sized_from_kept(c, kept.get((c.resource_type, c.resource_id), ())))
    return out


def _plain(c: Correction) -> Correction:
    """The correction as planned: nothing left to date it by."""
    return dataclasses.replace(c, basis=None)


def _sized_from_kept(c: Correction, kept: Sequence[KeptUpdate]) -> Correction:
    """A create whose history kept updates: on the size they say it had (or marked unknown)."""
    older, known = older_size(kept, c.occurred_at)
    if older is None or (known and older == c.size):
        return _plain(c)
    why = c.why + ("; on the size its kept history gives before" if known
                   else "; size before its first kept resize unknown: the earliest size kept")
    return dataclasses.replace(c, size=older, size_unknown=not known, why=why, basis=None)


def _defer(result: Plan, outcome: TypeOutcome, action: Action, rtype: str, rid: str, reason: DeferReason,
           detail: str, retry_after: datetime | None) -> None:
    result.deferrals.append(Deferral(action, rtype, rid, reason, detail, retry_after))
    outcome.deferred += 1


def _recent(value: datetime | None, settle_from: datetime) -> bool:
    return value is not None and value > settle_from


def _requested(created_at: datetime, start: datetime) -> datetime | None:
    """The request's instant when billable life starts later (a note keeps it in the history)."""
    return created_at if created_at < start else None


def _latest(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a


EVENT_TYPES: dict[Action, str] = {"create": "sync.create", "update": "sync.update", "delete": "sync.delete"}


def synthetic_event_id(cloud: str, run_key: str, resource_type: str, resource_id: str, action: str) -> str:
    """Deterministic: a retried run (same run key) writes the same ids, and dedup absorbs them."""
    return str(uuid.uuid5(SYNC_NAMESPACE, "\x1f".join((cloud, run_key, resource_type, resource_id, action))))


#: The note that keeps a create's request in the history when billable life starts later.
REQUEST_EVENT_TYPE = "sync.create.start"


def request_notes(cloud: str, run_key: str, corrections: Iterable[Correction]) -> list[dict[str, Any]]:
    """For each create dated later than the platform's request (a server launched after it), a
    ``sync.create.start`` note at the request: a note changes no state and no meter reads it, so the
    time between request and launch is in the history and never billed, as the collector keeps
    the platform's ``create.start``."""
    notes = []
    for c in corrections:
        if c.action != "create" or c.requested_at is None:
            continue
        payload: dict[str, Any] = {"sync": {"run_key": run_key, "why": "requested; billable life starts at "
                                            f"{c.occurred_at.isoformat()}"}}
        if c.size is not None:
            payload["size"] = c.size
        note: dict[str, Any] = {
            "event_id": synthetic_event_id(cloud, run_key, c.resource_type, c.resource_id, "request"),
            "event_type": REQUEST_EVENT_TYPE, "cloud": cloud, "resource_type": c.resource_type,
            "resource_id": c.resource_id, "occurred_at": c.requested_at.isoformat(), "source": "reconciliation",
            "payload": payload,
        }
        if c.project_id is not None:
            note["project_id"] = c.project_id
        notes.append(note)
    return notes


def synthetic_events(cloud: str, run_key: str, corrections: Iterable[Correction]) -> list[dict[str, Any]]:
    """The corrections as ordinary envelopes, ``source: reconciliation`` (one per correction, in order;
    the requests' notes are ``request_notes``)."""
    events = []
    for c in corrections:
        sync: dict[str, Any] = {"run_key": run_key, "why": c.why}
        if c.dated_by is not None:
            sync["dated_by"] = c.dated_by
        if c.size_unknown:
            sync["size_unknown"] = True
        payload: dict[str, Any] = {"sync": sync}
        if c.size is not None:
            payload["size"] = c.size
        if c.status is not None:
            payload["status"] = c.status
        # the steps of one resource's past are told apart by their number (the first keeps the old id)
        name = c.action if not c.step else f"{c.action}:{c.step}"
        event: dict[str, Any] = {
            "event_id": synthetic_event_id(cloud, run_key, c.resource_type, c.resource_id, name),
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
