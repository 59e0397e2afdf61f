"""Reconciliation runs started on request (``POST /internal/sync/{cloud}``): reserved at once, run elsewhere.

A request **reserves** its run before the caller gets an answer: one transaction claims the caller's
Idempotency-Key (``store/sync_requests.py``), takes the cloud's sync lock in the new run's name and
writes the run's ``sync_runs`` row as ``running`` (``store/sync_runs.py``). So the database decides,
across API processes and replicas, whether the caller gets a new run, the run its key started
before, or the id of the run that holds the cloud (409). The sync itself later completes that very
row: ``run_sync(run_id=…)`` renews the lock it finds in its own name instead of refusing it.

Then an **executor** runs it: ``LocalExecutor``, a few worker threads of the API process, or a
Dagster run of the reconciliation job (``orchestration/launch.py``), so the UI shows it.

A run never stays ``running`` for ever. A run that cannot record its own end is recorded ``failed``
with the reason (``abandon``): the executor could not start it, the server stopped before it
started, or stopped waiting for it, or its Dagster run ended without recording it. A run whose
process was killed keeps its cloud's lock until its lease runs out (``sync.RESERVATION_LEASE`` while
it waits to start, then ``reconciliation.lock_lease`` past its last renewal); then the
next read of the run, or the next sync of the cloud, records it ``failed`` (``sync_runs.ABANDONED``).
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from tally_pipeline.core.errors import PlatformError
from tally_pipeline.services.reconciliation import SyncInProgress, leases_of
from tally_pipeline.store import sync_requests, sync_runs
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.sync_requests import SyncRequest

log = logging.getLogger("tally.sync")

FINISHED = frozenset({"succeeded", "partial", "failed"})


class ShuttingDown(PlatformError, RuntimeError):
    """The executor is closed: this process starts no more syncs."""


@dataclass(frozen=True)
class Started:
    run_id: str
    replayed: bool  # the caller's Idempotency-Key had started this run before


class Executor(Protocol):
    """Runs a reserved sync somewhere; ``name`` is what ``sync_requests.executor`` records."""

    name: sync_requests.Executor

    def submit(self, cloud: str, run_id: str) -> str | None:
        """Hand the reserved run over (the Dagster run's id, when there is one); raise when it cannot be."""
        ...

    def ended_without_record(self, request: SyncRequest) -> str | None:
        """Why a run still ``running`` will never record its end (its Dagster run ended), else None."""
        ...

    def close(self) -> None: ...


def _now() -> datetime:
    return datetime.now(UTC)


class _Busy(Exception):
    def __init__(self, holder: str | None):
        self.holder = holder


def reserve(store: Store, cloud: str, *, key: str | None, executor: sync_requests.Executor,
            now: datetime | None = None, leases: sync_runs.Leases | None = None) -> Started:
    """Reserve a run of ``cloud`` (see the module's text); ``SyncInProgress`` names the run holding it."""
    at = now or _now()
    run_id = str(uuid.uuid4())

    def work(uow: UnitOfWork) -> Started:
        earlier = sync_requests.claim(uow, cloud, key, run_id, at, executor)
        if earlier is not None:
            return Started(earlier, replayed=True)
        if not sync_runs.take_lock(uow, cloud, run_id, at, leases or leases_of(), start=False):
            raise _Busy(sync_runs.lock_holder_in(uow, cloud))  # rolls the claimed key back too
        sync_runs.insert_run(uow, _reserved_row(cloud, run_id, at))
        return Started(run_id, replayed=False)

    try:
        return store.run(work)
    except _Busy as busy:
        named = f" (run {busy.holder})" if busy.holder else ""
        raise SyncInProgress(f"a reconciliation of cloud {cloud!r} is already running{named}", busy.holder) from None


def _reserved_row(cloud: str, run_id: str, at: datetime) -> dict[str, Any]:
    counts = dict.fromkeys(("created", "updated", "deleted", "recovered", "deferred", "unconfirmed", "skipped",
                            "live_before"), 0)
    return {"run_id": run_id, "cloud": cloud, "run_key": run_key_of(run_id), "tick": at, "poll_time": at,
            "started_at": at, "finished_at": None, "status": "running", "per_type": "{}", "error": None,
            "drift": None, "first_load": False, "deleted_listing": None, "deleted_window_end": None,
            "stuck_transition": 0, **counts}


def run_key_of(run_id: str) -> str:
    """The run key of a sync started through the API: its synthetic event ids are its own."""
    return f"api:{run_id}"


def public_row(row: dict[str, Any], request: SyncRequest | None) -> dict[str, Any]:
    """A ``sync_runs`` row as the API answers it: ``per_type`` decoded, and who executes the run."""
    out = dict(row)
    if isinstance(out.get("per_type"), str):
        out["per_type"] = orjson.loads(out["per_type"])
    out["per_type"] = out.get("per_type") or {}
    out["executor"] = request.executor if request else None
    out["dagster_run_id"] = request.dagster_run_id if request else None
    return out


class SyncLauncher:
    """What the API holds: reserve a run, hand it to the executor, read it back."""

    def __init__(self, store: Store, executor: Executor, leases: sync_runs.Leases | None = None):
        self.store = store
        self.executor = executor
        self.leases = leases or leases_of()

    def start(self, cloud: str, key: str | None) -> Started:
        """Reserve and hand over a run of ``cloud``; a replayed key hands nothing over again.

        A run the executor refuses is recorded failed with the reason (the caller reads it in the run).
        A cloud held by a run that will never record its end (see ``run``) is freed, not refused.
        """
        try:
            started = reserve(self.store, cloud, key=key, executor=self.executor.name, leases=self.leases)
        except SyncInProgress as busy:
            if busy.run_id is None or not self._settled(busy.run_id):
                raise
            started = reserve(self.store, cloud, key=key, executor=self.executor.name, leases=self.leases)
        if started.replayed:
            return started
        try:
            dagster_run_id = self.executor.submit(cloud, started.run_id)
        except ShuttingDown:
            sync_runs.abandon(self.store, cloud, started.run_id, "the API server was shutting down", _now())
            raise
        except Exception as exc:  # noqa: BLE001 - whatever it was, the run's row says it (failed, with the reason)
            reason = f"could not start the sync ({self.executor.name} executor): {type(exc).__name__}: {exc}"
            log.warning("sync %s of %s: %s", started.run_id, cloud, reason)
            sync_runs.abandon(self.store, cloud, started.run_id, reason, _now())
            return started
        if dagster_run_id is not None:
            sync_requests.set_dagster_run(self.store, started.run_id, dagster_run_id)
        return started

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run's row as the API answers it (None: unknown), a run that will never record its end settled first."""
        row = sync_runs.run_row(self.store, run_id)
        if row is None:
            return None
        request = sync_requests.request_of(self.store, run_id)
        if row["status"] == "running" and self._settle(row, request):
            row = sync_runs.run_row(self.store, run_id) or row
        return public_row(row, request)

    def _settled(self, run_id: str) -> bool:
        """Whether the run holding a cloud turned out to be one that will never end by itself, now recorded failed."""
        row = sync_runs.run_row(self.store, run_id)
        return row is not None and row["status"] == "running" and self._settle(row, sync_requests.request_of(self.store, run_id))

    def _settle(self, row: dict[str, Any], request: SyncRequest | None) -> bool:
        now = _now()
        if sync_runs.settle_orphan(self.store, row["run_id"], now, self.leases):
            return True
        if request is None or request.executor != self.executor.name:
            return False
        reason = self.executor.ended_without_record(request)
        return reason is not None and sync_runs.abandon(self.store, row["cloud"], row["run_id"], reason, now)

    def close(self) -> None:
        self.executor.close()


class LocalExecutor:
    """Runs reserved syncs on ``workers`` threads of this process, in the order they came.

    The queue never holds more than one run per cloud (the cloud's lock is taken at reservation),
    so it is bounded by the configured clouds. The threads are daemons: a stopping server waits
    ``grace`` seconds for its running syncs (``close``), records the rest failed, and exits.
    """

    name: sync_requests.Executor = "api"

    def __init__(self, run: Callable[[str, str], Any], store: Store, *, workers: int, grace: float):
        self._run = run  # (cloud, run_id) -> runs the sync, recording its row
        self._store = store
        self._workers = workers
        self._grace = grace
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._state = threading.Condition()
        self._queued: dict[str, str] = {}  # run id -> cloud
        self._running: dict[str, str] = {}
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, cloud: str, run_id: str) -> None:
        with self._state:
            if self._closed:
                raise ShuttingDown("this API process is shutting down")
            self._queued[run_id] = cloud
            while len(self._threads) < self._workers:
                thread = threading.Thread(target=self._work, name=f"tally-sync-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        self._queue.put((cloud, run_id))

    def ended_without_record(self, request: SyncRequest) -> str | None:
        return None  # a run of this process either runs, or was recorded failed when it could not

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            cloud, run_id = item
            with self._state:
                if self._queued.pop(run_id, None) is None:
                    continue  # recorded failed by close() before it started
                self._running[run_id] = cloud
            try:
                self._run(cloud, run_id)
            except SyncInProgress as exc:
                sync_runs.abandon(self._store, cloud, run_id, f"SyncInProgress: {exc}", _now())
            except Exception as exc:  # noqa: BLE001 - the row says how it ended; the worker goes on
                # run_sync records a failed sync itself; this records one that failed before it began
                # (an adapter that could not be built, the store gone).
                log.warning("sync %s of %s failed: %s: %s", run_id, cloud, type(exc).__name__, exc)
                try:
                    sync_runs.abandon(self._store, cloud, run_id, f"{type(exc).__name__}: {exc}", _now())
                except Exception:  # noqa: BLE001 - the lease expires it (sync_runs.ABANDONED)
                    log.warning("could not record sync %s of %s as failed", run_id, cloud)
            finally:
                with self._state:
                    self._running.pop(run_id, None)
                    self._state.notify_all()

    def close(self) -> None:
        """Start nothing more; record the queued runs failed; wait up to ``grace`` for the running ones,
        then record those still running failed (the process is about to end, and its threads with it)."""
        with self._state:
            self._closed = True
            queued, self._queued = self._queued, {}
            for _ in self._threads:
                self._queue.put(None)
        for run_id, cloud in queued.items():
            self._give_up(cloud, run_id, "the API server shut down before the sync started")
        with self._state:
            self._state.wait_for(lambda: not self._running, timeout=self._grace)
            running = dict(self._running)
        for run_id, cloud in running.items():
            self._give_up(cloud, run_id, f"the API server shut down during the sync (after waiting {self._grace:g} s "
                                         "for it); what it corrected so far is stored, the next run does the rest")

    def _give_up(self, cloud: str, run_id: str, reason: str) -> None:
        try:
            sync_runs.abandon(self._store, cloud, run_id, reason, _now())
        except Exception as exc:  # noqa: BLE001 - the lease expires it (sync_runs.ABANDONED)
            log.warning("could not record sync %s of %s as failed (%s): the lock lease will expire it", run_id, cloud, exc)
