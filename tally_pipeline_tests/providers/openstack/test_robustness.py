"""Robustness through the real openstacksdk and `tally sync`: ``Retry-After`` is capped, a run's
listing stops at its time bound, the sync lock is renewed while a run lives (two real processes of
one cloud never overlap) and a run that lost it writes nothing, and a listing restarts once when
its paging marker vanished (nova finds a deleted marker by itself)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import psycopg
import pytest

from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.runtime import Runtime
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.reconciliation import run_sync
from tally_pipeline.store import open_store
from tally_pipeline_tests.faults import migrate, wait_until
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    NOW,
    SDK_NOISE,
    SMALL,
    T0,
    config,
    record,
    running_fake,
)
from tally_pipeline_tests.providers.openstack.sync_cli import known, query, tally_sync, write_config

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "region-one"
VOL = {"gb": 1, "volume_type": None}


def volumes(n: int, project: str = "p-alpha"):
    return [record("volume", f"vol-{i}", VOL, "available", minute=i, project=project) for i in range(n)]


def held(fake, resource_type: str, timeout: float = 60):
    """The request of ``resource_type`` the fake is holding, once it is (None after ``timeout``)."""
    return fake.wait_for(lambda r: r.resource_type == resource_type and r.status == 0, timeout=timeout)


def test_a_retry_after_far_above_the_cap_holds_the_run_no_longer_than_the_cap(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    with running_fake(volumes(3)) as fake:
        fake.inject("volume", "throttled", retry_after="3600", times=1)  # a gateway asking for an hour
        path = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                            cloud_options={"resource_types": ["volume"], "retries": 1, "max_retry_delay": 0.5})
        runtime = Runtime.load(str(path))
        done: dict = {}
        worker = threading.Thread(target=lambda: done.setdefault("run", runtime.sync(CLOUD, now=NOW)), daemon=True)
        worker.start()
        worker.join(timeout=120)  # an uncapped wait would sleep for an hour here
        answered = [r.status for r in fake.list_requests("volume")]
        runtime.close()
    assert not worker.is_alive(), "the run waited for the whole Retry-After"
    assert answered == [429, 200, 200]  # throttled once, retried after the capped wait; two pages
    assert done["run"].status == "succeeded" and done["run"].created == 3


def test_a_run_stops_listing_at_its_time_bound(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    gone = record("floating_ip", "fip-gone", {"floating_network_id": "ext"}, "ACTIVE", minute=9)
    known(database, CLOUD, gone, at=T0)
    records = [*volumes(2), record("floating_ip", "fip-1", {"floating_network_id": "ext"}, "ACTIVE", minute=8),
               record("load_balancer", "lb-1", {"flavor_id": None}, "ACTIVE", minute=10)]
    bound = 5.0
    with running_fake(records, hang_limit=120) as fake:
        fake.inject("floating_ip", "hold")
        path = write_config(tmp_path, fake, cloud=CLOUD, database=database, max_run_time=bound,
                            cloud_options={"resource_types": ["volume", "floating_ip", "load_balancer"],
                                           "timeout": 100})
        runtime = Runtime.load(str(path))
        done: dict = {}
        worker = threading.Thread(target=lambda: done.setdefault("run", runtime.sync(CLOUD, now=NOW)), daemon=True)
        worker.start()
        # The floating IP listing is held until the bound has passed. (On a machine so loaded that the
        # bound passes before that listing even starts, the run ends on its own: the same verdict.)
        wait_until(lambda: held(fake, "floating_ip", timeout=0.1) is not None or not worker.is_alive(),
                   "the floating IP listing to be held, or the run to end", timeout=120)
        seen = time.monotonic()  # the run's bound started before this: it has passed after the wait
        wait_until(lambda: time.monotonic() > seen + bound + 0.5, "the run's time bound to pass")
        fake.release_held()
        worker.join(timeout=60)
        load_balancer_requests = fake.list_requests("load_balancer")
        runtime.close()
    run = done["run"]
    for rtype in ("floating_ip", "load_balancer"):
        assert (run.per_type[rtype].status, run.per_type[rtype].code) == ("failed", "run_time_bound"), rtype
    assert load_balancer_requests == []  # not even asked
    assert query(database, "SELECT count(*) FROM events WHERE event_type = 'sync.delete'")[0][0] == 0  # fip-gone stays
    if run.per_type["volume"].status == "enumerated":  # listed inside the bound: reconciled
        assert (run.status, run.created) == ("partial", 2)
    else:
        assert (run.status, run.per_type["volume"].code) == ("failed", "run_time_bound")


def test_a_listing_restarts_once_when_its_marker_vanished_and_nova_needs_none(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    servers = [record("instance", f"srv-{i}", SMALL, "ACTIVE", minute=20 + i) for i in range(5)]
    vols = volumes(5)
    known(database, CLOUD, *vols, *servers, at=T0)
    with running_fake([*vols, *servers]) as fake:
        # Newest first, two a page: page 1 ends with vol-3 / srv-3, which are deleted right after it.
        fake.vanish("vol-3", "volume", after_pages=1)
        fake.vanish("srv-3", "instance", after_pages=1)
        path = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                            cloud_options={"resource_types": ["instance", "volume"]})
        code, run, out = tally_sync(path, CLOUD, at=NOW + timedelta(minutes=10), run_key="tick:markers")
        refused = [r.status for r in fake.list_requests("volume") if r.status != 200]
    assert code == 0 and run["status"] == "succeeded", out
    volume, instance = run["per_type"]["volume"], run["per_type"]["instance"]
    assert refused == [400]  # cinder refused the page after the vanished marker, once
    assert (volume["status"], volume["restarts"], volume["listed"], volume["deleted"]) == ("enumerated", 1, 4, 1)
    # nova paged on from the deleted marker: no restart, and srv-3 was listed before it went
    assert (instance["status"], instance["restarts"], instance["listed"]) == ("enumerated", 0, 5)
    deleted = [r for (r,) in query(database, "SELECT resource_id FROM events WHERE event_type = 'sync.delete'")]
    assert "vol-3" in deleted


def test_a_renewed_lock_keeps_a_second_process_out_however_long_the_run(tmp_path, pg_url) -> None:
    migrate(pg_url)
    with running_fake(volumes(2), hang_limit=120) as fake:
        fake.inject("volume", "hold")
        path = write_config(tmp_path, fake, cloud=CLOUD, database=pg_url, lock_lease=1,
                            cloud_options={"resource_types": ["volume"], "timeout": 100})
        command = [sys.executable, "-m", "tally_pipeline", "sync", CLOUD, "--config", str(path)]
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert held(fake, "volume") is not None
            with psycopg.connect(pg_url, autocommit=True) as conn:
                def renewed_past_two_leases() -> bool:
                    row = conn.execute("SELECT renewed_at - acquired_at FROM sync_locks WHERE cloud = %s",
                                       (CLOUD,)).fetchone()
                    return row is not None and row[0] > timedelta(seconds=2)
                # Without renewal its lease would have expired twice over by now.
                wait_until(renewed_past_two_leases, "the first run to renew its lock past two leases")
            second = subprocess.run(command, capture_output=True, text=True, timeout=120)
            assert second.returncode != 0
            assert "already running" in second.stderr
        finally:
            fake.release_held()
            out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert "succeeded" in out
    rows = query(pg_url, "SELECT status FROM sync_runs WHERE cloud = %s", [CLOUD])
    assert rows == [("succeeded",)]  # the second process never started a run
    assert query(pg_url, "SELECT count(*) FROM sync_locks", [])[0][0] == 0


def test_a_run_whose_lock_was_taken_over_writes_nothing(tmp_path) -> None:
    from tally_pipeline.services.reconciliation import LockLost

    store = open_store(f"duckdb://{tmp_path / 'tally.duckdb'}")
    errors: list[BaseException] = []
    with running_fake(volumes(2), hang_limit=120) as fake:
        fake.inject("volume", "hold")
        adapter = OpenStackAdapter(CLOUD, config(fake, resource_types=["volume"], timeout=100))

        def sync() -> None:
            try:
                run_sync(store, Ingestor(store, default_registry()), CLOUD, adapter, settle_window=300,
                         mass_delete_guard=0.5, now=NOW, run_key="tick:taken", lock_lease=30)
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                errors.append(exc)

        worker = threading.Thread(target=sync, daemon=True)
        worker.start()
        assert held(fake, "volume") is not None
        # Another run takes the cloud over (as one would once this one's lease had expired).
        store.run(lambda uow: uow.execute("UPDATE sync_locks SET run_id = 'intruder' WHERE cloud = %s", (CLOUD,)))
        fake.release_held()
        worker.join(timeout=60)
        adapter.close()
    try:
        assert len(errors) == 1 and isinstance(errors[0], LockLost), errors
        assert "taken over" in str(errors[0])
        assert store.query("SELECT count(*) FROM events")[0][0] == 0  # the two creates were never written
        assert store.query("SELECT status, error FROM sync_runs")[0][0] == "failed"
        assert store.query("SELECT run_id FROM sync_locks") == [("intruder",)]  # not released: not its own
    finally:
        store.close()


@pytest.mark.parametrize("retry_after, limit, expected", [("3600", 30.0, "30"), ("5", 30.0, "5"),
                                                          ("Wed, 21 Oct 2026 07:28:00 GMT", 30.0, None)])
def test_the_retry_after_cap_rewrites_only_what_exceeds_it(retry_after, limit, expected) -> None:
    import requests

    from tally_pipeline.providers.openstack.adapter import cap_retry_after

    response = requests.Response()
    response.headers["Retry-After"] = retry_after
    capped = cap_retry_after(limit)(response)
    assert capped.headers["Retry-After"] == (expected or retry_after)
