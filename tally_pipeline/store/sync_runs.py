"""The reconciliation tables' SQL: ``sync_runs``, ``sync_deferrals``, ``sync_locks``, and the projection
rows a diff reads. Plain SQL meaning the same in both dialects, except where noted."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

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
    """``(resource_type, resource_id, status, project_id, size text, last event as epoch µs)`` per resource."""
    epoch_us = ("epoch_us(last_event_at)" if store.dialect == "duckdb"
                else "(extract(epoch FROM last_event_at) * 1000000)::bigint")
    size = "size::VARCHAR" if store.dialect == "duckdb" else "size::text"
    return store.query(
        f"SELECT resource_type, resource_id, status, project_id, {size}, {epoch_us} "
        "FROM current_resources WHERE cloud = %s",
        [cloud],
    )


def acquire_lock(store: Store, cloud: str, run_id: str, wall: datetime, expired_before: datetime) -> bool:
    """Take the cloud's lock (dropping a lease last renewed before ``expired_before``); False when
    another run holds it."""
    def work(uow: UnitOfWork) -> bool:
        uow.execute("DELETE FROM sync_locks WHERE cloud = %s AND coalesce(renewed_at, acquired_at) < %s",
                    (cloud, expired_before))
        got = uow.fetchall(
            "INSERT INTO sync_locks (cloud, run_id, acquired_at, renewed_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (cloud) DO NOTHING RETURNING run_id",
            (cloud, run_id, wall, wall),
        )
        return bool(got)

    return store.run(work)


def renew_lock(store: Store, cloud: str, run_id: str, wall: datetime) -> bool:
    """Extend the run's lease from ``wall``; False when the run no longer holds the lock."""
    return bool(store.run(lambda uow: uow.fetchall(
        "UPDATE sync_locks SET renewed_at = %s WHERE cloud = %s AND run_id = %s RETURNING run_id",
        (wall, cloud, run_id))))


def lock_holder(store: Store, cloud: str) -> tuple[str, datetime, datetime] | None:
    """``(run_id, acquired_at, renewed_at)`` of the run holding the cloud's lock, if any."""
    rows = store.query("SELECT run_id, acquired_at, coalesce(renewed_at, acquired_at) FROM sync_locks "
                       "WHERE cloud = %s", [cloud])
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


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


def last_success_polls(store: Store) -> list[tuple[str, datetime]]:
    """Each cloud's latest poll time of a succeeded or partial run."""
    return [(c, t) for c, t in store.query(
        "SELECT cloud, max(poll_time) FROM sync_runs WHERE status IN ('succeeded', 'partial') GROUP BY cloud"
    )]


def runs_by_status(store: Store) -> list[tuple[str, str, int]]:
    """``(cloud, status, runs)`` over every run, by cloud and status."""
    return [(c, s, int(n)) for c, s, n in store.query(
        "SELECT cloud, status, count(*) FROM sync_runs GROUP BY cloud, status ORDER BY 1, 2")]
