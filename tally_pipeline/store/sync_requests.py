"""``sync_requests``: the reconciliation runs the API started, who executes each, and the callers'
Idempotency-Keys. Plain SQL meaning the same in both dialects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from tally_pipeline.store.base import Store, UnitOfWork

Executor = Literal["api", "dagster"]


@dataclass(frozen=True)
class SyncRequest:
    run_id: str
    cloud: str
    idempotency_key: str | None
    requested_at: datetime
    executor: Executor
    dagster_run_id: str | None


_COLUMNS = "run_id, cloud, idempotency_key, requested_at, executor, dagster_run_id"


def claim(uow: UnitOfWork, cloud: str, key: str | None, run_id: str, at: datetime, executor: Executor) -> str | None:
    """Record the request for ``run_id``; None when recorded, or the run an earlier request with the
    same (cloud, key) started (then nothing is written).

    On Postgres a concurrent request with the same key waits here for the first one's transaction,
    then finds its run: two retries of one request never start two runs.
    """
    got = uow.fetchall(
        f"INSERT INTO sync_requests ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, NULL) "
        "ON CONFLICT (cloud, idempotency_key) DO NOTHING RETURNING run_id",
        (run_id, cloud, key, at, executor),
    )
    if got or key is None:
        return None
    earlier = uow.fetchall("SELECT run_id FROM sync_requests WHERE cloud = %s AND idempotency_key = %s", (cloud, key))
    return str(earlier[0][0])


def set_dagster_run(store: Store, run_id: str, dagster_run_id: str) -> None:
    store.run(lambda uow: uow.execute("UPDATE sync_requests SET dagster_run_id = %s WHERE run_id = %s",
                                      (dagster_run_id, run_id)))


def request_of(store: Store, run_id: str) -> SyncRequest | None:
    rows = store.query(f"SELECT {_COLUMNS} FROM sync_requests WHERE run_id = %s", [run_id])
    return SyncRequest(*rows[0]) if rows else None
