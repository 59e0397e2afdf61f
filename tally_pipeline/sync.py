"""One reconciliation run for one cloud: refresh, list, diff, write corrections through the ingest core.

Every run is a ``sync_runs`` row; what it deferred goes to ``sync_deferrals``. Two runs of one cloud
never overlap: a run takes the cloud's row in ``sync_locks`` (a lease, so a crashed run's lock
expires) and a second run is refused with ``SyncInProgress`` (the API answers 409).
"""

from __future__ import annotations

import gc
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from tally_pipeline import projection
from tally_pipeline.adapters.base import DeletedListing, PlatformAdapter, list_type
from tally_pipeline.core import reconcile as rules
from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.ingest import Ingestor
from tally_pipeline.store.base import Store

LOCK_LEASE = timedelta(hours=1)
DELETED_MARGIN = timedelta(minutes=10)
FIRST_RUN_LOOKBACK = timedelta(hours=24)
MAX_ROUNDS = 3


class SyncInProgress(RuntimeError):
    pass


@dataclass
class SyncRun:
    run_id: str
    cloud: str
    run_key: str
    poll_time: datetime
    started_at: datetime
    finished_at: datetime | None = None
    status: str = "running"
    per_type: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created: int = 0
    updated: int = 0
    deleted: int = 0
    recovered: int = 0
    deferred: int = 0
    live_before: int = 0
    drift: float | None = None
    deleted_listing: str | None = None
    deferrals: list[rules.Deferral] = field(default_factory=list, repr=False)
    rounds: int = 0

    def as_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("deferrals",)}
        out["deferrals_by_reason"] = self.deferrals_by_reason()
        return out

    def deferrals_by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.deferrals:
            counts[d.reason] = counts.get(d.reason, 0) + 1
        return dict(sorted(counts.items()))


def _wall() -> datetime:
    return datetime.now(UTC)


def projected_resources(store: Store, cloud: str) -> list[rules.ProjectedResource]:
    epoch_us = ("epoch_us(last_event_at)" if store.dialect == "duckdb"
                else "(extract(epoch FROM last_event_at) * 1000000)::bigint")
    size = "size::VARCHAR" if store.dialect == "duckdb" else "size::text"
    rows = store.query(
        f"SELECT resource_type, resource_id, status, project_id, {size}, {epoch_us} "
        "FROM current_resources WHERE cloud = %s",
        [cloud],
    )
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
        return [rules.ProjectedResource(rtype, rid, status, project, parsed(size), last)
                for rtype, rid, status, project, size, last in rows]
    finally:
        if enabled:
            gc.enable()


def _acquire(store: Store, cloud: str, run_id: str, wall: datetime) -> None:
    def work(uow: Any) -> bool:
        uow.execute("DELETE FROM sync_locks WHERE cloud = %s AND acquired_at < %s", (cloud, wall - LOCK_LEASE))
        got = uow.fetchall(
            "INSERT INTO sync_locks (cloud, run_id, acquired_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (cloud) DO NOTHING RETURNING run_id",
            (cloud, run_id, wall),
        )
        return bool(got)

    if not store.run(work):
        holder = store.query("SELECT run_id, acquired_at FROM sync_locks WHERE cloud = %s", [cloud])
        detail = f" (run {holder[0][0]} since {holder[0][1].isoformat()})" if holder else ""
        raise SyncInProgress(f"a reconciliation of cloud {cloud!r} is already running{detail}")


def _release(store: Store, cloud: str, run_id: str) -> None:
    store.run(lambda uow: uow.execute("DELETE FROM sync_locks WHERE cloud = %s AND run_id = %s", (cloud, run_id)))


def _since(store: Store, cloud: str, now: datetime) -> datetime:
    """Ask for deletions since the last successful run (minus a margin), or a day back on a first run."""
    rows = store.query(
        "SELECT max(poll_time) FROM sync_runs WHERE cloud = %s AND status IN ('succeeded', 'partial') AND poll_time <= %s",
        [cloud, now],
    )
    last = rows[0][0] if rows and rows[0][0] is not None else None
    return (to_utc(last) - DELETED_MARGIN) if last is not None else now - FIRST_RUN_LOOKBACK


def _record(store: Store, run: SyncRun) -> None:
    values = (run.cloud, run.run_key, run.poll_time, run.started_at, run.finished_at, run.status,
              orjson.dumps(run.per_type).decode(), run.error, run.created, run.updated, run.deleted,
              run.recovered, run.deferred, run.live_before, run.drift, run.deleted_listing)

    def work(uow: Any) -> None:
        uow.execute("DELETE FROM sync_runs WHERE run_id = %s", (run.run_id,))
        uow.execute(
            "INSERT INTO sync_runs (run_id, cloud, run_key, poll_time, started_at, finished_at, status, per_type, "
            "error, created, updated, deleted, recovered, deferred, live_before, drift, deleted_listing) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (run.run_id, *values),
        )
        if run.status != "running" and run.deferrals:
            uow.execute("DELETE FROM sync_deferrals WHERE run_id = %s", (run.run_id,))
            uow.executemany(
                "INSERT INTO sync_deferrals (run_id, cloud, resource_type, resource_id, action, reason, detail, "
                "retry_after, deferred_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(run.run_id, run.cloud, d.resource_type, d.resource_id, d.action, d.reason, d.detail,
                  d.retry_after, run.poll_time) for d in run.deferrals],
            )

    store.run(work)


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
) -> SyncRun:
    """Reconcile one cloud at ``now`` (default: the wall clock), dating corrections at ``now``.

    ``run_key`` makes the synthetic event ids: a scheduled tick passes its tick time, so a retried
    tick writes the same ids and dedup absorbs them.
    """
    wall = _wall()
    now = to_utc(now) if now is not None else wall
    run = SyncRun(run_id=str(uuid.uuid4()), cloud=cloud, run_key=run_key or f"manual:{now.isoformat()}",
                  poll_time=now, started_at=wall)
    _acquire(store, cloud, run.run_id, wall)
    try:
        _record(store, run)
        try:
            _reconcile(store, ingestor, adapter, run, rules.Settings(timedelta(seconds=settle_window), mass_delete_guard))
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
            _release(store, cloud, run.run_id)
        except Exception:  # noqa: BLE001 - an unreleased lock expires with its lease
            pass


def _reconcile(store: Store, ingestor: Ingestor, adapter: PlatformAdapter, run: SyncRun, settings: rules.Settings) -> None:
    cloud, now = run.cloud, run.poll_time
    types = [t for t in adapter.resource_types if t in ingestor.registry]
    listings = [list_type(adapter, t, at=now) for t in types]
    deleted: DeletedListing | None = None
    deleted_since = getattr(adapter, "deleted_since", None)
    if deleted_since is not None:
        try:
            deleted = deleted_since(_since(store, cloud, now), at=now)
        except Exception as exc:  # noqa: BLE001 - no deletion times this run: deletes fall back to poll time
            deleted = DeletedListing(available=False, reason=f"{type(exc).__name__}: {exc}")
    run.deleted_listing = "available" if deleted is not None and deleted.available else (
        f"unavailable: {deleted.reason}" if deleted is not None else "not offered")

    first: rules.Plan | None = None
    last: rules.Plan | None = None
    for round_no in range(1, MAX_ROUNDS + 1):
        projection.refresh(store)
        current = rules.plan(projected_resources(store, cloud), listings, deleted, settings, now)
        first = first or current
        last = current
        run.rounds = round_no
        if not current.corrections:
            break
        stored = 0
        events = rules.synthetic_events(cloud, run.run_key, current.corrections)
        by_id = {e["event_id"]: c for e, c in zip(events, current.corrections)}
        for outcome in ingestor.ingest_stream(events, origin=f"sync:{cloud}", sources=("reconciliation",),
                                              may_write=lambda c: c == cloud):
            for result in outcome.results:
                if result.status != "stored":
                    continue
                stored += 1
                correction = by_id[result.event_id or ""]
                if correction.recovered:
                    run.recovered += correction.action == "create"
                elif correction.action == "create":
                    run.created += 1
                elif correction.action == "update":
                    run.updated += 1
                else:
                    run.deleted += 1
        if stored == 0:  # a retried run: everything was already written by the same run key
            break
    projection.refresh(store)

    assert first is not None and last is not None
    run.deferrals = last.deferrals
    run.deferred = len(last.deferrals)
    run.live_before = sum(o.live_before for o in first.types.values())
    run.per_type = {
        t: {"status": o.status, "listed": o.listed, "reason": o.reason, "corrections": o.corrections,
            "deferred": o.deferred, "guard_tripped": o.guard_tripped}
        for t, o in sorted(first.types.items())
    }
    guard = sum(1 for d in last.deferrals if d.reason == "mass_delete_guard")
    run.drift = round((run.created + run.updated + run.deleted + run.recovered + guard) / max(1, run.live_before), 6)
    failed = [t for t, o in first.types.items() if o.status == "failed"]
    run.status = "failed" if failed and len(failed) == len(first.types) else "partial" if failed else "succeeded"
    if failed:
        run.error = "; ".join(f"{t}: {first.types[t].reason}" for t in sorted(failed))[:2000]


def sync_runs(store: Store, *, cloud: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The latest runs, newest first."""
    where, params = ("WHERE cloud = %s", [cloud]) if cloud else ("", [])
    rows = store.query(
        "SELECT run_id, cloud, run_key, poll_time, started_at, finished_at, status, per_type, error, created, "
        f"updated, deleted, recovered, deferred, live_before, drift, deleted_listing FROM sync_runs {where} "
        "ORDER BY started_at DESC LIMIT %s",
        [*params, limit],
    )
    names = ("run_id", "cloud", "run_key", "poll_time", "started_at", "finished_at", "status", "per_type", "error",
             "created", "updated", "deleted", "recovered", "deferred", "live_before", "drift", "deleted_listing")
    out = []
    for row in rows:
        item = dict(zip(names, row))
        if isinstance(item["per_type"], str):
            item["per_type"] = orjson.loads(item["per_type"])
        out.append(item)
    return out

