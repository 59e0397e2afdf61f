"""The reconciliation tables' SQL: ``sync_runs``, ``sync_deferrals``, ``sync_locks``, and the projection
rows a diff reads. Plain SQL meaning the same in both dialects, except where noted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.store.base import Store, UnitOfWork

RUN_COLUMNS = ("run_id", "cloud", "run_key", "tick", "poll_time", "started_at", "finished_at", "status", "per_type",
               "error", "created", "updated", "deleted", "recovered", "deferred", "unconfirmed", "skipped",
               "live_before", "drift", "first_load", "deleted_listing", "deleted_window_end", "stuck_transition")
#: Each cloud's latest finished run as a relation ``l (cloud, started_at)``: the one definition of
#: "latest finished run per cloud", which the alerts and the follow-up sensor both join to.
LATEST_FINISHED = (
    "(SELECT cloud, max(started_at) AS started_at FROM sync_runs WHERE status <> 'running' GROUP BY cloud) l"
)
DEFERRAL_COLUMNS = ("run_id", "cloud", "resource_type", "resource_id", "action", "reason", "detail", "retry_after",
                    "deferred_at")


def projection_rows(store: Store, cloud: str) -> list[tuple[Any, ...]]:
    """``(resource_type, resource_id, status, project_id, size text, last event as epoch µs, platform_status)``
    per resource."""
    epoch_us = ("epoch_us(last_event_at)" if store.dialect == "duckdb"
                else "(extract(epoch FROM last_event_at) * 1000000)::bigint")
    size = "size::VARCHAR" if store.dialect == "duckdb" else "size::text"
    return store.query(
        f"SELECT resource_type, resource_id, status, project_id, {size}, {epoch_us}, platform_status "
        "FROM current_resources WHERE cloud = %s",
        [cloud],
    )


#: The error of a run whose lock lease ran out while its row still said ``running``.
ABANDONED = ("abandoned: the run's lock lease expired before it recorded its end "
             "(its process stopped, or lost the database, while it ran)")


@dataclass(frozen=True)
class Leases:
    """How long a cloud's lock lives. A *started* run's lock (``renewed_at`` set) lives ``renewal``
    past its last renewal: the run renews it while it lives. A *reserved* run's lock (taken by the
    API before the run starts, ``renewed_at`` null) lives ``reservation`` past its taking: the time a
    queued run has to start."""

    renewal: timedelta
    reservation: timedelta

    def expired(self, at: datetime, alias: str = "") -> tuple[str, tuple[datetime, datetime]]:
        """A SQL condition true for a lock expired at ``at``, and its parameters."""
        a = f"{alias}." if alias else ""
        return (f"(CASE WHEN {a}renewed_at IS NULL THEN {a}acquired_at < %s ELSE {a}renewed_at < %s END)",
                (at - self.reservation, at - self.renewal))


def take_lock(uow: UnitOfWork, cloud: str, run_id: str, wall: datetime, leases: Leases, *, start: bool) -> bool:
    """Take the cloud's lock for ``run_id``; False when another run holds it.

    ``start``: the run starts now (its lease runs from ``wall``, renewed as it goes); a run the API
    reserved, starting, takes over the lock it holds already. Without it the lock is a reservation.
    An expired lock is dropped first, and its run, if its row still says ``running``, is recorded as
    failed (``ABANDONED``): it will never record its end itself.
    """
    expired, cuts = leases.expired(wall)
    uow.execute(
        "UPDATE sync_runs SET status = 'failed', finished_at = %s, error = %s WHERE status = 'running' "
        f"AND run_id IN (SELECT run_id FROM sync_locks WHERE cloud = %s AND {expired})",
        (wall, ABANDONED, cloud, *cuts),
    )
    uow.execute(f"DELETE FROM sync_locks WHERE cloud = %s AND {expired}", (cloud, *cuts))
    got = uow.fetchall(
        "INSERT INTO sync_locks (cloud, run_id, acquired_at, renewed_at) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (cloud) DO UPDATE SET renewed_at = excluded.renewed_at "
        "WHERE sync_locks.run_id = excluded.run_id RETURNING run_id",
        (cloud, run_id, wall, wall if start else None),
    )
    return bool(got)


def acquire_lock(store: Store, cloud: str, run_id: str, wall: datetime, leases: Leases) -> bool:
    """Take the cloud's lock for a run starting now (see ``take_lock``); False when another run holds it."""
    return store.run(lambda uow: take_lock(uow, cloud, run_id, wall, leases, start=True))


def insert_run(uow: UnitOfWork, run: dict[str, Any]) -> None:
    """Write a new run's row (in ``RUN_COLUMNS`` order) in ``uow``: a run reserved before it starts."""
    uow.execute(f"INSERT INTO sync_runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join(['%s'] * len(RUN_COLUMNS))})",
                tuple(run[c] for c in RUN_COLUMNS))


def run_row(store: Store, run_id: str) -> dict[str, Any] | None:
    """One run's row as column → value; None for an unknown run."""
    rows = store.query(f"SELECT {', '.join(RUN_COLUMNS)} FROM sync_runs WHERE run_id = %s", [run_id])
    return dict(zip(RUN_COLUMNS, rows[0])) if rows else None


def abandon(store: Store, cloud: str, run_id: str, error: str, at: datetime) -> bool:
    """Record a run that will not record its own end as failed with ``error``, and free its cloud's lock
    if it holds it. False when the row no longer said ``running`` (the run ended by itself)."""
    def work(uow: UnitOfWork) -> bool:
        got = uow.fetchall(
            "UPDATE sync_runs SET status = 'failed', finished_at = %s, error = %s "
            "WHERE run_id = %s AND status = 'running' RETURNING run_id",
            (at, error[:2000], run_id),
        )
        uow.execute("DELETE FROM sync_locks WHERE cloud = %s AND run_id = %s", (cloud, run_id))
        return bool(got)

    return store.run(work)


def renew_lock(store: Store, cloud: str, run_id: str, wall: datetime) -> bool:
    """Extend the run's lease from ``wall``; False when the run no longer holds the lock."""
    return bool(store.run(lambda uow: uow.fetchall(
        "UPDATE sync_locks SET renewed_at = %s WHERE cloud = %s AND run_id = %s RETURNING run_id",
        (wall, cloud, run_id))))


def settle_orphan(store: Store, run_id: str, at: datetime, leases: Leases) -> bool:
    """Record a ``running`` run that no longer holds a live lease on its cloud as failed (``ABANDONED``).

    A run holds its cloud's lock from before its row says ``running`` until after its row says how
    it ended; a ``running`` row without it belongs to a run whose process stopped. True when settled.
    """
    expired, cuts = leases.expired(at, "l")
    got = store.run(lambda uow: uow.fetchall(
        "UPDATE sync_runs SET status = 'failed', finished_at = %s, error = %s "
        "WHERE run_id = %s AND status = 'running' AND NOT EXISTS (SELECT 1 FROM sync_locks l "
        f"WHERE l.cloud = sync_runs.cloud AND l.run_id = sync_runs.run_id AND NOT {expired}) RETURNING run_id",
        (at, ABANDONED, run_id, *cuts),
    ))
    return bool(got)


def lock_holder(store: Store, cloud: str) -> tuple[str, datetime, datetime | None] | None:
    """``(run_id, acquired_at, renewed_at)`` of the run holding the cloud's lock, if any (``renewed_at``
    None: reserved, not started)."""
    rows = store.query("SELECT run_id, acquired_at, renewed_at FROM sync_locks WHERE cloud = %s", [cloud])
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


def lock_holder_in(uow: UnitOfWork, cloud: str) -> str | None:
    """The run holding the cloud's lock, read in ``uow``."""
    rows = uow.fetchall("SELECT run_id FROM sync_locks WHERE cloud = %s", (cloud,))
    return rows[0][0] if rows else None


def release_lock(store: Store, cloud: str, run_id: str) -> None:
    store.run(lambda uow: uow.execute("DELETE FROM sync_locks WHERE cloud = %s AND run_id = %s", (cloud, run_id)))


def last_deleted_window_end(store: Store, cloud: str, not_after: datetime) -> datetime | None:
    """How far the cloud's deleted listings have covered deletes, up to ``not_after``: the latest
    ``deleted_window_end`` of a run whose instance listing enumerated and whose deleted listing answered."""
    rows = store.query(
        "SELECT max(deleted_window_end) FROM sync_runs WHERE cloud = %s AND status IN ('succeeded', 'partial') "
        "AND deleted_window_end <= %s",
        [cloud, not_after],
    )
    return rows[0][0] if rows and rows[0][0] is not None else None


def write_run(store: Store, run: dict[str, Any], deferrals: Sequence[Sequence[Any]] | None) -> None:
    """Replace the run's row; with ``deferrals`` (rows in ``DEFERRAL_COLUMNS`` order), replace those too."""
    columns = ", ".join(RUN_COLUMNS)
    marks = ", ".join(["%s"] * len(RUN_COLUMNS))

    def work(uow: UnitOfWork) -> None:
        uow.execute("DELETE FROM sync_runs WHERE run_id = %s", (run["run_id"],))
        uow.execute(f"INSERT INTO sync_runs ({columns}) VALUES ({marks})", tuple(run[c] for c in RUN_COLUMNS))
        if deferrals:
            uow.execute("DELETE FROM sync_deferrals WHERE run_id = %s", (run["run_id"],))
            uow.executemany(
                f"INSERT INTO sync_deferrals ({', '.join(DEFERRAL_COLUMNS)}) "
                f"VALUES ({', '.join(['%s'] * len(DEFERRAL_COLUMNS))}) ON CONFLICT DO NOTHING",
                deferrals,
            )

    store.run(work)


def latest_runs(store: Store, *, cloud: str | None, limit: int) -> list[dict[str, Any]]:
    """The latest runs, newest first, as column → value."""
    where, params = ("WHERE cloud = %s", [cloud]) if cloud else ("", [])
    rows = store.query(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM sync_runs {where} ORDER BY started_at DESC LIMIT %s",
        [*params, limit],
    )
    return [dict(zip(RUN_COLUMNS, row)) for row in rows]


def latest_finished_runs(store: Store) -> list[tuple[Any, ...]]:
    """Each cloud's latest finished run: ``(cloud, status, poll_time, drift, error, per_type,
    stuck_transition)``, by cloud."""
    return store.query(
        "SELECT r.cloud, r.status, r.poll_time, r.drift, r.error, r.per_type, r.stuck_transition FROM sync_runs r "
        f"JOIN {LATEST_FINISHED} ON r.cloud = l.cloud AND r.started_at = l.started_at ORDER BY r.cloud"
    )


def previous_reconciled_run(store: Store, cloud: str) -> tuple[datetime, datetime] | None:
    """The cloud's latest run that reconciled something (succeeded or partial): ``(started_at, poll_time)``."""
    rows = store.query(
        "SELECT started_at, poll_time FROM sync_runs WHERE cloud = %s AND status IN ('succeeded', 'partial') "
        "ORDER BY started_at DESC LIMIT 1", [cloud])
    return (rows[0][0], rows[0][1]) if rows else None


def arrived_late(store: Store, key: tuple[str, str, str], received_after: datetime, occurred_by: datetime) -> bool:
    """Whether the resource has a collector event stored after ``received_after`` that occurred at or before
    ``occurred_by``: history a sync that started at the first and polled at the second could not see."""
    where, params = store.resource_events_filter(key)
    return bool(store.query(
        f"SELECT 1 FROM events WHERE {where} AND source = 'collector' AND received_at > %s AND occurred_at <= %s "
        "LIMIT 1", [*params, received_after, occurred_by]))


def reconciled_run_counts(store: Store) -> dict[str, int]:
    """Per cloud, how many runs reconciled something (succeeded or partial): drift_high's warm-up."""
    return {c: int(n) for c, n in store.query(
        "SELECT cloud, count(*) FROM sync_runs WHERE status IN ('succeeded', 'partial') GROUP BY cloud")}


def latest_reconciled_runs(store: Store) -> list[tuple[str, datetime, Any, int]]:
    """Each cloud's two latest runs that reconciled something (succeeded or partial), newest first:
    ``(cloud, poll_time, per_type, 1 for the latest | 2 for the one before)``, by cloud."""
    return [(c, t, per_type, int(rank)) for c, t, per_type, rank in store.query(
        "SELECT cloud, poll_time, per_type, rank FROM (SELECT cloud, poll_time, per_type, started_at, "
        "row_number() OVER (PARTITION BY cloud ORDER BY started_at DESC) AS rank FROM sync_runs "
        "WHERE status IN ('succeeded', 'partial')) r WHERE rank <= 2 ORDER BY cloud, rank")]


def last_success_polls(store: Store) -> list[tuple[str, datetime]]:
    """Each cloud's latest poll time of a succeeded or partial run."""
    return [(c, t) for c, t in store.query(
        "SELECT cloud, max(poll_time) FROM sync_runs WHERE status IN ('succeeded', 'partial') GROUP BY cloud"
    )]


def runs_by_status(store: Store) -> list[tuple[str, str, int]]:
    """``(cloud, status, runs)`` over every run, by cloud and status."""
    return [(c, s, int(n)) for c, s, n in store.query(
        "SELECT cloud, status, count(*) FROM sync_runs GROUP BY cloud, status ORDER BY 1, 2")]


def latest_reconciliation(uow: UnitOfWork, cloud: str) -> tuple[bool, datetime | None, int]:
    """A cloud's reconciliation as a month's closing reads it: whether it has any run, when its latest
    run that reconciled (succeeded or partial) polled the platform (its poll time), and how many
    corrections that run deferred."""
    ever = bool(uow.fetchall("SELECT count(*) FROM sync_runs WHERE cloud = %s", [cloud])[0][0])
    rows = uow.fetchall(
        "SELECT r.run_id, r.poll_time FROM sync_runs r WHERE r.cloud = %s AND r.status IN ('succeeded', 'partial')"
        " ORDER BY r.started_at DESC LIMIT 1", [cloud])
    if not rows:
        return ever, None, 0
    run_id, poll_time = rows[0]
    deferred = uow.fetchall("SELECT count(*) FROM sync_deferrals WHERE run_id = %s", [run_id])[0][0]
    return ever, None if poll_time is None else to_utc(poll_time), int(deferred)
