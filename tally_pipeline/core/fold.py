"""The fold: a resource's events, in fold order, become its state and its lifecycle.

Fold order is ``occurred_at``, then verb (create, update, note, delete), then ``event_id``, so any
delivery order of the same events folds to the same result. The rules (docs/projection.md):

- a **create** when the resource is not live starts a lifecycle: an interval opens at its time with
  its project, size and platform status; a create while live acts as an update, except that its
  platform status (none when it gives none) always replaces the current one;
- an **update** while live changes project (if given), size and platform status (if given); a
  change opens a new interval at its time; an update when not live (before any create, or after a
  delete) changes nothing;
- a **delete** while live ends the open interval and the lifecycle at its time; a delete when not
  live changes nothing — so a reconciliation delete dated at poll time never beats an earlier real
  delete that arrives later: whichever is earlier ends the lifecycle, the later one is a no-op;
- a **note** changes nothing;
- an interval that would end where it starts (zero length) is not kept.

The **platform status** is what the platform shows (``payload.status``: active, shutoff,
suspended, paused, shelved_offloaded, error, available…): meters choose which statuses they bill,
so a status change is an interval boundary like a resize.

Interval boundaries are the lifecycle start and every effective update whose (project, size,
platform status) differs from the previous effective create/update of the lifecycle.

Because the fold is a left fold in fold order, events that all come after everything a resource has
seen can be folded onto its stored result (``resume_from``) instead of its history: that gives the
same state and intervals as folding the whole history again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from tally_pipeline.core.verbs import VERB_RANK

Status = Literal["live", "deleted", "unborn"]


@dataclass(frozen=True, slots=True)
class FoldEvent:
    """What the fold needs of a stored event."""

    event_id: str
    verb: str
    occurred_at: datetime
    project_id: str | None
    size: dict[str, Any] | None
    seq: int = 0
    platform_status: str | None = None  # payload.status; None: the event gives none


@dataclass(frozen=True, slots=True)
class Interval:
    """``[start, end)`` with the project and size the resource had; ``end`` None while open."""

    start: datetime
    end: datetime | None
    project_id: str
    size: dict[str, Any]
    lifecycle_no: int
    platform_status: str | None = None  # None: no event of the lifecycle gave one


@dataclass(frozen=True, slots=True)
class ResourceState:
    status: Status
    project_id: str | None
    size: dict[str, Any] | None
    created_at: datetime | None  # start of the current (or last) lifecycle
    deleted_at: datetime | None  # end of the last lifecycle, when deleted
    last_event_at: datetime
    last_seq: int
    event_count: int
    platform_status: str | None = None


@dataclass(frozen=True, slots=True)
class Folded:
    state: ResourceState
    intervals: tuple[Interval, ...]


@dataclass(frozen=True, slots=True)
class FoldStart:
    """Where a stored fold left off: what folding later events onto it needs, instead of the history.

    ``lifecycle`` is the number of the current (or last) lifecycle, -1 before any; ``opened_at``
    the start of the open interval while live. The intervals a resumed fold returns begin with the
    open interval (closed or still open), which replaces the stored one.
    """

    state: ResourceState
    lifecycle: int
    opened_at: datetime | None


def fold_order(event: FoldEvent) -> tuple[datetime, int, str]:
    return (event.occurred_at, VERB_RANK[event.verb], event.event_id)


def fold(events: Iterable[FoldEvent], start: FoldStart | None = None) -> Folded:
    """Fold one resource's events (any order, distinct event_ids) into its state and lifecycle.

    With ``start``, the events are folded onto that stored result; every one of them must come
    after the last event it folded (the caller checks: ``occurred_at`` later than ``last_event_at``).
    """
    ordered: Sequence[FoldEvent] = sorted(events, key=fold_order)
    if not ordered:
        raise ValueError("a resource with no events has nothing to fold")
    intervals: list[Interval] = []
    live = False
    lifecycle = -1
    project: str | None = None
    size: dict[str, Any] | None = None
    platform: str | None = None  # platform status
    opened_at: datetime | None = None  # start of the open interval
    created_at: datetime | None = None
    deleted_at: datetime | None = None
    if start is not None:
        prior = start.state
        if ordered[0].occurred_at <= prior.last_event_at:
            raise ValueError("a resumed fold takes only events later than everything already folded")
        live, lifecycle, opened_at = prior.status == "live", start.lifecycle, start.opened_at
        project, size, platform = prior.project_id, prior.size, prior.platform_status
        created_at, deleted_at = prior.created_at, prior.deleted_at

    def close(at: datetime) -> None:
        if opened_at is not None and at > opened_at:
            intervals.append(Interval(opened_at, at, project or "", size or {}, lifecycle, platform))

    for event in ordered:
        verb = event.verb
        if verb == "create" and not live:
            live = True
            lifecycle += 1
            project, size, platform = event.project_id, event.size, event.platform_status
            opened_at = created_at = event.occurred_at
            deleted_at = None
        elif verb in ("create", "update") and live:
            new_project = event.project_id if event.project_id is not None else project
            new_size = event.size if event.size is not None else size
            # A create states the whole resource: its status replaces the current one even when
            # it gives none (the SQL folds carry a create's "none" like a value).
            given = event.platform_status
            new_platform = given if given is not None or verb == "create" else platform
            if (new_project, new_size, new_platform) != (project, size, platform):
                close(event.occurred_at)
                project, size, platform = new_project, new_size, new_platform
                opened_at = event.occurred_at
        elif verb == "delete" and live:
            close(event.occurred_at)
            live = False
            opened_at = None
            deleted_at = event.occurred_at
    if live and opened_at is not None:
        intervals.append(Interval(opened_at, None, project or "", size or {}, lifecycle, platform))

    status: Status = "unborn" if lifecycle < 0 else ("live" if live else "deleted")
    state = ResourceState(
        status=status,
        project_id=project if lifecycle >= 0 else None,
        size=size if lifecycle >= 0 else None,
        created_at=created_at,
        deleted_at=deleted_at if status == "deleted" else None,
        last_event_at=max(e.occurred_at for e in ordered),
        last_seq=max(e.seq for e in ordered),
        event_count=len(ordered),
        platform_status=platform if lifecycle >= 0 else None,
    )
    if start is not None:
        state = dataclasses.replace(state, last_seq=max(state.last_seq, start.state.last_seq),
                                    event_count=state.event_count + start.state.event_count)
    return Folded(state, tuple(intervals))


#: (cloud, resource_type, resource_id)
ResourceKey = tuple[str, str, str]


def fold_rows_by_resource(rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[ResourceKey, list[FoldEvent]]]:
    """Fold rows ``(cloud, type, id, event_id, verb, occurred_at, project_id, size, seq, status)``, grouped by key.

    The rows come from the store (the projection's pending events, a history read for the ledger);
    sizes arrive as JSON text or decoded."""
    key: ResourceKey | None = None
    batch: list[FoldEvent] = []
    decoded: dict[str, Any] = {}  # sizes repeat (flavors): decode each text once; the fold never mutates them
    for cloud, rtype, rid, event_id, verb, occurred_at, project_id, size, seq, status in rows:
        row_key = (cloud, rtype, rid)
        if row_key != key:
            if key is not None:
                yield key, batch
            key, batch = row_key, []
        if isinstance(size, str):
            text = size
            size = decoded.get(text)
            if size is None:
                size = decoded[text] = orjson.loads(text)
        batch.append(FoldEvent(event_id, verb, occurred_at, project_id, size, seq, status))
    if key is not None:
        yield key, batch
