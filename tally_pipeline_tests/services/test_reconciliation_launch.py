"""Reserving a sync before it runs (``sync_launch``), on both backends: the reserved row is the one the
sync completes, a second reservation names the run that holds the cloud, and a run that will never
record its end — its lease expired, or its executor refused it — reads as failed with the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.bench.common import free_port
from tally_pipeline.config import DagsterSettings, TallyConfig
from tally_pipeline.orchestration.launch import DagsterSyncExecutor
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.reconciliation import RESERVATION_LEASE, SyncInProgress, leases_of
from tally_pipeline.services.reconciliation_launch import LocalExecutor, SyncLauncher, reserve, run_key_of
from tally_pipeline.store import Store, sync_runs


def _runtime(store: Store) -> Runtime:
    config = TallyConfig.model_validate({"database": store.url, "clouds": {
        "c1": {"provider": "simulated", "seed": 1, "resources": 10, "hours": 2}}})
    return Runtime(config, _store=store)


def _launcher(store: Store) -> SyncLauncher:
    rt = _runtime(store)
    return SyncLauncher(store, LocalExecutor(lambda cloud, run_id: rt.sync(cloud, run_id=run_id), store,
                                             workers=1, grace=0))


def _rows(store: Store) -> list[tuple]:
    return store.query("SELECT run_id, status, error FROM sync_runs ORDER BY started_at")


def test_the_sync_completes_the_row_its_reservation_wrote(store: Store) -> None:
    started = reserve(store, "c1", key=None, executor="api")
    assert _rows(store) == [(started.run_id, "running", None)]
    with pytest.raises(SyncInProgress) as busy:
        reserve(store, "c1", key=None, executor="api")
    assert busy.value.run_id == started.run_id
    run = _runtime(store).sync("c1", run_id=started.run_id, run_key=run_key_of(started.run_id))
    assert run.run_id == started.run_id and run.status == "succeeded" and run.created > 0
    assert _rows(store) == [(started.run_id, "succeeded", None)]
    assert store.query("SELECT count(*) FROM sync_locks") == [(0,)]
    assert reserve(store, "c1", key=None, executor="api").run_id != started.run_id  # the cloud is free again


def test_a_running_run_whose_lease_expired_reads_as_failed(store: Store) -> None:
    long_ago = datetime.now(UTC) - RESERVATION_LEASE - timedelta(minutes=5)
    stale = reserve(store, "c1", key=None, executor="api", now=long_ago)  # its process died with it
    row = _launcher(store).run(stale.run_id)
    assert row is not None and row["status"] == "failed" and row["error"] == sync_runs.ABANDONED
    assert row["executor"] == "api" and row["finished_at"] is not None


def test_a_new_reservation_takes_an_expired_lease_and_records_its_run_failed(store: Store) -> None:
    long_ago = datetime.now(UTC) - RESERVATION_LEASE - timedelta(minutes=5)
    stale = reserve(store, "c1", key=None, executor="api", now=long_ago)
    fresh = reserve(store, "c1", key=None, executor="api")
    assert _rows(store) == [(stale.run_id, "failed", sync_runs.ABANDONED), (fresh.run_id, "running", None)]


def test_a_reservation_outlives_the_run_lease_and_a_started_run_lives_by_its_renewals(store: Store) -> None:
    """A reserved run waiting to start keeps its cloud past ``lock_lease`` (it cannot renew yet); once
    started, its lock lives only a lease past its last renewal."""
    leases = leases_of(300)
    queued_at = datetime.now(UTC) - timedelta(minutes=30)  # older than a 300 s lease, younger than an hour
    queued = reserve(store, "c1", key=None, executor="api", now=queued_at, leases=leases)
    with pytest.raises(SyncInProgress) as busy:
        reserve(store, "c1", key=None, executor="api", leases=leases)
    assert busy.value.run_id == queued.run_id
    assert _rows(store) == [(queued.run_id, "running", None)]
    # The run starts (its lock now renewed), then stops renewing: its process died.
    assert sync_runs.acquire_lock(store, "c1", queued.run_id, queued_at, leases)
    fresh = reserve(store, "c1", key=None, executor="api", leases=leases)
    assert _rows(store) == [(queued.run_id, "failed", sync_runs.ABANDONED), (fresh.run_id, "running", None)]


def test_a_running_row_without_its_lock_reads_as_failed(store: Store) -> None:
    started = reserve(store, "c1", key=None, executor="api")
    sync_runs.release_lock(store, "c1", started.run_id)  # as a run whose final write failed leaves it
    row = _launcher(store).run(started.run_id)
    assert row is not None and (row["status"], row["error"]) == ("failed", sync_runs.ABANDONED)


def test_a_key_claimed_by_a_refused_request_stays_free(store: Store) -> None:
    holder = reserve(store, "c1", key="k1", executor="api")
    with pytest.raises(SyncInProgress):
        reserve(store, "c1", key="k2", executor="api")  # refused: k2 must not name a run
    _runtime(store).sync("c1", run_id=holder.run_id)
    retried = reserve(store, "c1", key="k2", executor="api")
    assert not retried.replayed and retried.run_id != holder.run_id
    assert reserve(store, "c1", key="k1", executor="api").run_id == holder.run_id  # k1 still names its run


def test_a_dagster_webserver_that_cannot_be_reached_gives_a_failed_run(store: Store) -> None:
    executor = DagsterSyncExecutor(DagsterSettings(url=f"http://127.0.0.1:{free_port()}", timeout=5))
    launcher = SyncLauncher(store, executor)
    started = launcher.start("c1", None)
    row = launcher.run(started.run_id)
    assert row is not None and row["status"] == "failed" and row["executor"] == "dagster"
    assert row["error"].startswith("could not start the sync (dagster executor): ")
    assert row["dagster_run_id"] is None
    assert store.query("SELECT count(*) FROM sync_locks") == [(0,)]  # the cloud is free for the next try
