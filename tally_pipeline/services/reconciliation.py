"""One reconciliation run for one cloud: refresh, list, diff, confirm, write corrections through the ingest core.

Every run is a ``sync_runs`` row; what it deferred goes to ``sync_deferrals``. Two runs of one cloud
never overlap: a run takes the cloud's row in ``sync_locks`` and renews that lease while it lives
(a crashed run's lock expires one lease after its last renewal); a second run is refused with
``SyncInProgress`` (the API answers 409). A run that finds its lock gone writes nothing more
(``LockLost``). A run's listing and confirmations stop at ``max_run_time``.

The run's ``tick`` (a schedule's instant) only names the run: it makes the run key, so a retried
tick writes the same event ids. Each type's corrections are dated at its own poll time, the
instant its listing began as the platform dated it (a simulated platform answers as of the tick).
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from tally_pipeline.core import reconcile as rules
from tally_pipeline.core.errors import PlatformError
from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.core.type_summary import TypeSummary, grouped_causes
from tally_pipeline.providers.interface import (
    RUN_TIME_BOUND,
    Confirmation,
    DeletedListing,
    Failed,
    PlatformAdapter,
    TypeListing,
    list_type,
)
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import resource_reads
from tally_pipeline.store import sync_runs as runs_sql
from tally_pipeline.store.base import Store

DELETED_MARGIN = timedelta(minutes=10)
FIRST_RUN_LOOKBACK = timedelta(hours=24)
MAX_ROUNDS = 3
#: At most this many servers' instance actions are read per run (one listing each, and one request per
#: status- or flavor-changing action): corrections of the others are dated by ``updated`` or the poll,
#: counted per type as ``actions_not_asked``. A first load of a large cloud stays bounded this way.
MAX_ACTION_LOOKUPS = 2000
#: The defaults of the ``reconciliation:`` config section, for callers that pass none.
LOCK_LEASE_S = 300.0
#: How long a run the API reserved has to start (a queued local worker, a queued Dagster run).
RESERVATION_LEASE = timedelta(hours=1)
MAX_RUN_TIME_S = 1800.0
STUCK_TRANSITION_HOURS = 24.0


def leases_of(lock_lease: float = LOCK_LEASE_S) -> runs_sql.Leases:
    """The lock's lifetimes: ``lock_lease`` seconds past a started run's last renewal, and
    ``RESERVATION_LEASE`` for a run reserved but not started."""
    return runs_sql.Leases(renewal=timedelta(seconds=lock_lease), reservation=RESERVATION_LEASE)


class SyncInProgress(PlatformError, RuntimeError):
    """Another run holds the cloud's lock; ``run_id`` names it when known."""

    def __init__(self, message: str, run_id: str | None = None):
        super().__init__(message)
        self.run_id = run_id


class LockLost(PlatformError, RuntimeError):
    """The run's lock expired or was taken over (its renewals failed for a whole lease): it stops writing."""


@dataclass
class SyncRun:
    run_id: str
    cloud: str
    run_key: str
    poll_time: datetime  # the instant the run's first listing began
    started_at: datetime
    tick: datetime | None = None  # the instant the run is named after (a schedule's tick)
    finished_at: datetime | None = None
    status: str = "running"
    per_type: dict[str, TypeSummary] = field(default_factory=dict)
    error: str | None = None
    created: int = 0
    updated: int = 0
    deleted: int = 0
    recovered: int = 0
    deferred: int = 0
    unconfirmed: int = 0  # deletes by absence the platform did not confirm (deferred, never booked)
    skipped: int = 0  # listed items unreadable, so neither billed nor deleted
    live_before: int = 0
    first_load: bool = False  # the projection held nothing of the cloud: everything is new, not drift
    drift: float | None = None
    late: int = 0  # corrections that settled late deliveries (not in drift); per type in per_type
    deleted_listing: str | None = None
    #: How far nova's deleted listing covered deletes: the instance poll time, when the instance
    #: listing enumerated and the deleted listing answered (the next run's window starts here).
    deleted_window_end: datetime | None = None
    stuck_transition: int = 0  # resources booked as listed after too long in transition
    deferrals: list[rules.Deferral] = field(default_factory=list, repr=False)
    rounds: int = 0

    def as_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("deferrals",)}
        out["per_type"] = {t: s.as_json() for t, s in self.per_type.items()}
        out["deferrals_by_reason"] = self.deferrals_by_reason()
        out["dated_by"] = self.dated_by()
        return out

    def as_row(self) -> dict[str, Any]:
        row = {k: v for k, v in self.__dict__.items() if k in runs_sql.RUN_COLUMNS}
        row["per_type"] = orjson.dumps({t: s.as_json() for t, s in self.per_type.items()}).decode()
        return row

    def dated_by(self) -> dict[str, int]:
        """What dated the run's status and size corrections (``action``, ``updated``, ``poll``), all types."""
        totals: dict[str, int] = {}
        for summary in self.per_type.values():
            for source, n in summary.dated_by.items():
                totals[source] = totals.get(source, 0) + n
        return dict(sorted(totals.items()))

    def deferrals_by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.deferrals:
            counts[d.reason] = counts.get(d.reason, 0) + 1
        return dict(sorted(counts.items()))


def _wall() -> datetime:
    return datetime.now(UTC)


def projected_resources(store: Store, cloud: str) -> list[rules.ProjectedResource]:
    rows = runs_sql.projection_rows(store, cloud)
    sizes: dict[str, Any] = {}  # sizes repeat (a few flavors): parse each distinct text once

    def parsed(size: Any) -> Any:
        if not isinstance(size, str):
            return size
        found = sizes.get(size)
        if found is None:
            found = sizes[size] = orjson.loads(size)
        return found

    # Millions of small objects and no cycles among them: the collector would only rescan them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return [rules.ProjectedResource(rtype, rid, status, project, parsed(size), last, platform)
                for rtype, rid, status, project, size, last, platform in rows]
    finally:
        if enabled:
            gc.enable()


class _Lease:
    """The cloud's lock, held for one run and renewed every third of ``lease`` seconds by a thread.

    Renewal keeps a long run's lock (a slow cloud, ``Retry-After``, many confirmations) from
    expiring under it; a crashed process stops renewing, so its lock expires one lease later. A
    renewal that finds the lock gone, or renewals failing for a whole lease (the store down),
    mark the lease lost: ``check`` then raises ``LockLost`` before the run writes again.
    """

    def __init__(self, store: Store, cloud: str, run_id: str, lease: float):
        self.store, self.cloud, self.run_id, self.lease = store, cloud, run_id, lease
        self.leases = leases_of(lease)
        self._stop = threading.Event()
        self._renewed = time.monotonic()
        self._lost: str | None = None
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        wall = _wall()
        if not runs_sql.acquire_lock(self.store, self.cloud, self.run_id, wall, self.leases):
            holder = runs_sql.lock_holder(self.store, self.cloud)
            renewed = f", renewed {holder[2].isoformat()}" if holder and holder[2] else ""
            detail = f" (run {holder[0]} since {holder[1].isoformat()}{renewed})" if holder else ""
            raise SyncInProgress(f"a reconciliation of cloud {self.cloud!r} is already running{detail}",
                                 holder[0] if holder else None)
        self._renewed = time.monotonic()
        self._thread = threading.Thread(target=self._renew, name=f"sync-lease-{self.cloud}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease / 3):
            try:
                held = runs_sql.renew_lock(self.store, self.cloud, self.run_id, _wall())
            except Exception:  # noqa: BLE001 - a store hiccup: try again; check() judges the gap
                continue
            if not held:
                self._lost = "its lock was taken over by another run"
                return
            self._renewed = time.monotonic()

    def check(self) -> None:
        """Raise ``LockLost`` unless the run still holds its lock, renewing it on the way: asked of
        the store itself, so a takeover since the last renewal is seen before the run writes."""
        if self._lost is None and time.monotonic() - self._renewed > self.lease:
            self._lost = f"its lock was not renewed for {self.lease:g}s (the store did not answer)"
        if self._lost is None:
            if runs_sql.renew_lock(self.store, self.cloud, self.run_id, _wall()):
                self._renewed = time.monotonic()
            else:
                self._lost = "its lock was taken over by another run"
        if self._lost is not None:
            raise LockLost(f"the reconciliation of cloud {self.cloud!r} stopped: {self._lost}")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        runs_sql.release_lock(self.store, self.cloud, self.run_id)


def _since(store: Store, cloud: str, now: datetime) -> datetime:
    """Ask for deletions from where the deleted listings last covered them (minus a margin), or a day back.

    Only a run whose instance listing enumerated and whose deleted listing answered moves that point:
    after an outage of either, the next window reaches back over the whole outage.
    """
    last = runs_sql.last_deleted_window_end(store, cloud, now)
    return (to_utc(last) - DELETED_MARGIN) if last is not None else now - FIRST_RUN_LOOKBACK


def _record(store: Store, run: SyncRun) -> None:
    deferrals = None
    if run.status != "running" and run.deferrals:
        deferrals = [(run.run_id, run.cloud, d.resource_type, d.resource_id, d.action, d.reason, d.detail,
                      d.retry_after, run.poll_time) for d in run.deferrals]
    runs_sql.write_run(store, run.as_row(), deferrals)


def run_sync(
    store: Store,
    ingestor: Ingestor,
    cloud: str,
    adapter: PlatformAdapter,
    *,
    settle_window: float,
    mass_delete_guard: float,
    now: datetime | None = None,
    run_key: str | None = None,
    clock: Callable[[], datetime] | None = None,
    stuck_transition_hours: float | None = STUCK_TRANSITION_HOURS,
    max_run_time: float | None = MAX_RUN_TIME_S,
    lock_lease: float = LOCK_LEASE_S,
    run_id: str | None = None,
) -> SyncRun:
    """Reconcile one cloud; ``now`` is the run's tick (default: the wall clock).

    ``run_key`` makes the synthetic event ids: a scheduled tick passes its tick time, so a retried
    tick writes the same ids and dedup absorbs them. Each type's poll time is when the adapter says
    it observed the listing (``observed_at``: OpenStack's answer dates), else ``clock`` read as the
    listing begins, else ``now`` (a simulated platform answers as of the tick).

    ``stuck_transition_hours`` bounds deferral as in transition (None: no bound); ``max_run_time``
    (seconds, None: none) bounds listing and confirming; ``lock_lease`` is the lock's lease in seconds.
    ``run_id`` is a run reserved beforehand (``sync_launch.reserve``: its lock and ``running`` row
    exist already), which takes its reservation over; by default a new one.
    """
    wall = _wall()
    tick = to_utc(now) if now is not None else wall
    observe = clock or (lambda: tick)
    run = SyncRun(run_id=run_id or str(uuid.uuid4()), cloud=cloud, run_key=run_key or f"manual:{tick.isoformat()}",
                  poll_time=tick, started_at=wall, tick=tick)
    settings = rules.Settings(timedelta(seconds=settle_window), mass_delete_guard,
                              None if stuck_transition_hours is None else timedelta(hours=stuck_transition_hours))
    deadline = None if max_run_time is None else time.monotonic() + max_run_time
    lease = _Lease(store, cloud, run.run_id, lock_lease)
    lease.acquire()
    try:
        _record(store, run)
        try:
            _reconcile(store, ingestor, adapter, run, settings, observe, lease, deadline)
        except Exception as exc:
            run.status = "failed"
            run.error = f"{type(exc).__name__}: {exc}"[:2000]
            run.finished_at = _wall()
            try:
                _record(store, run)
            except Exception:  # noqa: BLE001 - the store itself failed; the original error matters more
                pass
            raise
        run.finished_at = _wall()
        _record(store, run)
        return run
    finally:
        try:
            lease.release()
        except Exception:  # noqa: BLE001 - an unreleased lock expires with its lease
            pass


def _confirm(adapter: PlatformAdapter, pending: list[rules.Correction], asked: dict[tuple[str, str], Confirmation],
             polls: dict[str, datetime], deadline: float | None) -> None:
    """Ask the platform about the deletes by absence not asked yet this run (one batch per type)."""
    todo: dict[str, list[str]] = {}
    for c in pending:
        if (c.resource_type, c.resource_id) not in asked:
            todo.setdefault(c.resource_type, []).append(c.resource_id)
    confirm = getattr(adapter, "confirm_gone", None)
    for rtype, ids in todo.items():
        if confirm is None:  # a provider that cannot be asked by id: its listing is taken as complete
            answers = {rid: Confirmation(rid, True, "the adapter cannot confirm by id; listing taken as complete")
                       for rid in ids}
        elif deadline is not None and time.monotonic() > deadline:
            answers = {rid: Confirmation(rid, False, f"not asked: {RUN_TIME_BOUND}") for rid in ids}
        else:
            answers = confirm(rtype, ids, at=polls[rtype], deadline=deadline)
        for rid in ids:
            asked[(rtype, rid)] = answers.get(rid) or Confirmation(rid, False, "no answer from the adapter")


@dataclass
class _Lookups:
    """The instance actions read this run (asked once per server), and what the bound left unasked."""

    found: dict[str, list[Any]] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)
    not_asked: set[str] = field(default_factory=set)

    def per_type(self) -> dict[str, tuple[int, int]]:
        if not self.asked and not self.not_asked:
            return {}
        return {"instance": (len(self.asked), len(self.not_asked - self.asked))}


def _kept_updates(store: Store, cloud: str, rtype: str, rid: str, resizes: frozenset[str]) -> list[rules.KeptUpdate]:
    """The updates a resource's history kept before reconciliation creates it (``resizes``: the
    event types that change its size, as its provider names them)."""
    names = resource_reads.HISTORY_COLUMNS
    kept = []
    for row in resource_reads.resource_history(store, (cloud, rtype, rid)):
        event = dict(zip(names, row))
        if event["verb"] != "update":
            continue
        payload = event["payload"]
        payload = orjson.loads(payload) if isinstance(payload, str | bytes) else payload
        size = payload.get("size") if isinstance(payload, dict) else None
        kept.append(rules.KeptUpdate(to_utc(event["occurred_at"]), event["event_type"],
                                     size if isinstance(size, dict) else None,
                                     resizes=event["event_type"] in resizes))
    return kept


def _redated(store: Store, cloud: str, adapter: PlatformAdapter, corrections: list[rules.Correction],
             polls: dict[str, datetime], run: SyncRun, deadline: float | None, lookups: _Lookups
             ) -> list[rules.Correction]:
    """The corrections dated by the platform's own record (``core.reconcile.redate``): the recorded
    actions of the servers corrected, where the adapter reads them (``instance_actions``, with its
    ``dating``; read once per run, at most ``MAX_ACTION_LOOKUPS``), and the updates kept in the
    history of resources created now."""
    ask = getattr(adapter, "instance_actions", None)
    dating: rules.Dating | None = getattr(adapter, "dating", None)
    actions: dict[str, list[Any]] | None = None
    if ask is not None and dating is not None:
        wanted = [sid for sid in rules.wants_actions(corrections) if sid not in lookups.asked]
        room = max(0, MAX_ACTION_LOOKUPS - len(lookups.asked))
        lookups.not_asked.update(wanted[room:])
        wanted = wanted[:room]
        if wanted:
            # a difference found on a resource the projection held: only actions since its last event matter
            since = {c.resource_id: c.basis.observed for c in corrections
                     if c.action == "update" and c.basis is not None and c.basis.observed is not None}
            lookups.found.update(ask(wanted, since={sid: since[sid] for sid in wanted if sid in since},
                                     deadline=deadline))
            lookups.asked.update(wanted)
        actions = lookups.found
    resizes: frozenset[str] = getattr(adapter, "resize_event_types", frozenset())
    kept = {key: _kept_updates(store, cloud, *key, resizes) for key in rules.born_unseen(corrections)}
    return rules.redate(corrections, dating, actions, kept, polls, run.poll_time)


def _reconcile(store: Store, ingestor: Ingestor, adapter: PlatformAdapter, run: SyncRun, settings: rules.Settings,
               observe: Callable[[], datetime], lease: _Lease, deadline: float | None) -> None:
    cloud = run.cloud
    types = [t for t in adapter.resource_types if t in ingestor.registry]
    polls: dict[str, datetime] = {}
    listings: list[TypeListing] = []
    observed_at = getattr(adapter, "observed_at", None)
    for rtype in types:
        began = to_utc(observe())
        if deadline is not None and time.monotonic() > deadline:
            listings.append(Failed(rtype, f"{RUN_TIME_BOUND}: not listed, the run's time bound was reached",
                                   code=RUN_TIME_BOUND))
            polls[rtype] = began
            continue
        listings.append(list_type(adapter, rtype, at=began, deadline=deadline))
        # A platform that dates its answers (OpenStack: the first page's Date) says best when it was seen.
        seen = observed_at(rtype) if observed_at is not None else None
        polls[rtype] = to_utc(seen) if seen is not None else began
    run.poll_time = min(polls.values(), default=run.poll_time)
    deleted: DeletedListing | None = None
    deleted_since = getattr(adapter, "deleted_since", None)
    if deleted_since is not None and deadline is not None and time.monotonic() > deadline:
        deleted = DeletedListing(available=False, reason=f"{RUN_TIME_BOUND}: not asked")
    elif deleted_since is not None:
        at = polls.get("instance", run.poll_time)
        try:
            deleted = deleted_since(_since(store, cloud, run.poll_time), at=at)
        except Exception as exc:  # noqa: BLE001 - no deletion times this run: deletes fall back to poll time
            deleted = DeletedListing(available=False, reason=f"{type(exc).__name__}: {exc}")
    run.deleted_listing = "available" if deleted is not None and deleted.available else (
        f"unavailable: {deleted.reason}" if deleted is not None else "not offered")

    first: rules.Plan | None = None
    last: rules.Plan | None = None
    held: dict[str, str] | None = None  # the mass-delete guard, decided by the first round for the whole run
    asked: dict[tuple[str, str], Confirmation] = {}
    stored_by_type: dict[str, dict[str, int]] = {}
    lookups = _Lookups()
    previous = runs_sql.previous_reconciled_run(store, cloud)  # what the last sync could have seen
    for round_no in range(1, MAX_ROUNDS + 1):
        projection.refresh(store)
        projected = projected_resources(store, cloud)
        if first is None:
            run.first_load = not projected
        current = rules.plan(projected, listings, deleted, settings, run.poll_time, poll_times=polls, held=held)
        if current.pending:
            _confirm(adapter, current.pending, asked, polls, deadline)
            rules.resolve(current, asked, settings)
        if first is None:
            first, held = current, current.held_by_guard()
        last = current
        run.rounds = round_no
        if not current.corrections:
            break
        # Dated by the platform's own record where it keeps one (nova's instance actions, the
        # history's kept updates), asked only about the resources corrected.
        current.corrections = _redated(store, cloud, adapter, current.corrections, polls, run, deadline, lookups)
        lease.check()  # a run that lost its lock writes nothing more: another may be running
        stored = 0
        events = rules.synthetic_events(cloud, run.run_key, current.corrections)
        by_id = {e["event_id"]: c for e, c in zip(events, current.corrections)}
        # The requests' notes (history only: a note changes no state) go with their creates.
        events += rules.request_notes(cloud, run.run_key, current.corrections)
        for outcome in ingestor.ingest_stream(events, origin=f"sync:{cloud}", sources=("reconciliation",),
                                              may_write=lambda c: c == cloud):
            for result in outcome.results:
                correction = by_id.get(result.event_id or "")
                if result.status != "stored" or correction is None:
                    continue
                stored += 1
                key = "recovered" if correction.recovered else {"create": "created", "update": "updated",
                                                                "delete": "deleted"}[correction.action]
                counts = stored_by_type.setdefault(correction.resource_type, {})
                if correction.dated_by is not None and correction.action == "update":
                    counts[f"dated_by:{correction.dated_by}"] = counts.get(f"dated_by:{correction.dated_by}", 0) + 1
                if (correction.recovered and correction.action == "delete") or correction.step:
                    continue  # a resource counts once: a recovered one by its create, a past by its first event
                counts[key] = counts.get(key, 0) + 1
                if previous is not None and runs_sql.arrived_late(
                        store, (cloud, correction.resource_type, correction.resource_id), *previous):
                    counts["late"] = counts.get("late", 0) + 1
                if correction.stuck:
                    counts["stuck_transition"] = counts.get("stuck_transition", 0) + 1
                if correction.size_unknown:
                    counts["size_unknown"] = counts.get("size_unknown", 0) + 1
        if stored == 0:  # a retried run: everything was already written by the same run key
            break
    projection.refresh(store)

    assert first is not None and last is not None
    for rtype, (n_asked, n_not_asked) in lookups.per_type().items():
        counts = stored_by_type.setdefault(rtype, {})
        counts["actions_asked"], counts["actions_not_asked"] = n_asked, n_not_asked
    _summarise(run, first, last, stored_by_type)
    instance = first.types.get("instance")
    if instance is not None and instance.status == "enumerated" and deleted is not None and deleted.available:
        run.deleted_window_end = polls["instance"]


def _summarise(run: SyncRun, first: rules.Plan, last: rules.Plan, stored: dict[str, dict[str, int]]) -> None:
    """Per-type numbers and the run's totals, from the same counts so they always agree.

    Listing outcomes, live counts and the guard come from the first round (the state before the
    run); deferrals from the last (what is still waiting when the run ends); corrections are what
    every round stored.
    """
    run.deferrals = last.deferrals
    deferred_by_type: dict[str, dict[str, int]] = {}
    for d in last.deferrals:
        reasons = deferred_by_type.setdefault(d.resource_type, {})
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
    run.per_type = {}
    for rtype, o in sorted(first.types.items()):
        counts = stored.get(rtype, {})
        deferred = deferred_by_type.get(rtype, {})
        skipped = last.types[rtype].skipped if rtype in last.types else o.skipped
        run.per_type[rtype] = TypeSummary(
            status=o.status, listed=o.listed, reason=o.reason, live_before=o.live_before,
            poll_time=o.poll_time.isoformat() if o.poll_time else None,
            created=counts.get("created", 0), updated=counts.get("updated", 0),
            deleted=counts.get("deleted", 0), recovered=counts.get("recovered", 0),
            corrections=sum(counts.get(k, 0) for k in ("created", "updated", "deleted", "recovered")),
            deferred=sum(deferred.values()), deferred_by_reason=dict(sorted(deferred.items())),
            unknown=o.unknown, skipped=dict(sorted(skipped.items())),
            guard_tripped=o.guard_tripped, code=o.code,
            never_ran=dict(sorted(o.never_ran.items())), stuck_transition=counts.get("stuck_transition", 0),
            restarts=o.restarts, late=counts.get("late", 0),
            dated_by={k.removeprefix("dated_by:"): n for k, n in sorted(counts.items()) if k.startswith("dated_by:")},
            size_unknown=counts.get("size_unknown", 0), actions_asked=counts.get("actions_asked", 0),
            actions_not_asked=counts.get("actions_not_asked", 0),
        )
    types = run.per_type.values()
    run.created, run.updated = sum(t.created for t in types), sum(t.updated for t in types)
    run.deleted, run.recovered = sum(t.deleted for t in types), sum(t.recovered for t in types)
    run.deferred, run.stuck_transition = sum(t.deferred for t in types), sum(t.stuck_transition for t in types)
    run.unconfirmed = sum(t.deferred_by_reason.get("unconfirmed", 0) for t in types)
    run.skipped = sum(t.skipped_total for t in types)
    run.live_before = sum(o.live_before for o in first.types.values())
    # Drift: the share of the live resources before the run that it corrected or held behind the
    # guard, over what the previous sync could have seen (docs/reconciliation.md, "Drift"): a
    # correction of a resource whose collector events arrived after the previous sync started yet
    # occurred before its poll settles a late delivery (a landing backlog), not a loss since; it is
    # counted as ``late``. A first load (the projection knew nothing of the cloud) is not drift.
    guard = sum(t.deferred_by_reason.get("mass_delete_guard", 0) for t in types)
    run.late = sum(t.late for t in types)
    changed = run.created + run.updated + run.deleted + run.recovered + guard - run.late
    run.drift = 0.0 if run.first_load else round(max(0, changed) / max(1, run.live_before), 6)
    failed = [t for t, o in first.types.items() if o.status == "failed"]
    guarded = [t for t, o in first.types.items() if o.guard_tripped]
    # A guard that held deletes leaves the type unreconciled as surely as a failed listing: partial.
    run.status = ("failed" if failed and len(failed) == len(first.types)
                  else "partial" if failed or guarded else "succeeded")
    problems = grouped_causes({t: first.types[t].reason for t in failed})
    problems += [f"{t}: mass_delete_guard held deletes: {first.types[t].guard_detail}" for t in sorted(guarded)]
    if problems:
        run.error = "; ".join(problems)[:2000]


def sync_runs(store: Store, *, cloud: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The latest runs, newest first."""
    out = runs_sql.latest_runs(store, cloud=cloud, limit=limit)
    for item in out:
        if isinstance(item["per_type"], str):
            item["per_type"] = orjson.loads(item["per_type"])
    return out
