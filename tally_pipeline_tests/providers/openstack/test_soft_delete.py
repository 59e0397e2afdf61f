"""Nova's soft delete and restore: reconciliation gives the lifecycle the collector path gives.

The collector path is written by hand as the events a soft delete and a restore map to (a
delete at the soft delete, a create at the restore), so this test stands without the notification
mapping. Reconciliation sees only what nova shows: the server missing from the live listing and
``SOFT_DELETED`` in the deleted one, then listed again with ``updated`` at the restore.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
from tally_pipeline.schemas import default_registry
from tally_pipeline.services import queries
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.reconciliation import run_sync
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import (
    NOW,
    SDK_NOISE,
    SMALL,
    T0,
    config,
    record,
    running_fake,
)

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "os"
SOFT = NOW - timedelta(hours=5)
RESTORE = NOW - timedelta(hours=2)


def event(eid: str, event_type: str, when, **extra) -> dict:
    return {"event_id": eid, "event_type": event_type, "cloud": CLOUD, "resource_type": "instance",
            "resource_id": "srv-soft", "occurred_at": when.isoformat(), **extra}


CREATE = event("n-create", "compute.instance.create.end", T0, project_id="p-alpha", payload={"size": SMALL})


def test_soft_delete_then_restore_gives_the_collector_paths_lifecycle(tmp_path) -> None:
    by_events = open_store(f"duckdb://{tmp_path / 'events.duckdb'}")
    reconciled = open_store(f"duckdb://{tmp_path / 'sync.duckdb'}")
    try:
        Ingestor(by_events, default_registry()).ingest([
            CREATE,
            event("n-soft", "compute.instance.delete.end", SOFT, payload={}),  # soft_delete.end ends billing
            event("n-restore", "compute.instance.create.end", RESTORE, project_id="p-alpha",
                  payload={"size": SMALL}),  # restore.end starts a new lifecycle
        ], origin="collector")
        ingestor = Ingestor(reconciled, default_registry())
        ingestor.ingest([CREATE], origin="collector")  # both later notifications were lost

        live = record("instance", "srv-soft", SMALL, "ACTIVE")
        soft = replace(live, status="SOFT_DELETED", updated_at=SOFT, deleted_at=SOFT)
        with running_fake([], deleted=[soft]) as fake, OpenStackAdapter(CLOUD, config(fake)) as adapter:
            def sync(at):
                fake.set_time(at)
                run = run_sync(reconciled, ingestor, CLOUD, adapter, settle_window=300, mass_delete_guard=0.5,
                               now=at, run_key=f"tick:{at.isoformat()}")
                assert run.deleted_listing == "available", run.deleted_listing
                return run

            assert sync(SOFT + timedelta(minutes=10)).deleted == 1
            fake.view.deleted.clear()  # restored: listed again, changed at the restore
            fake.view.records_by_type["instance"] = [replace(live, updated_at=RESTORE)]
            assert sync(RESTORE + timedelta(minutes=10)).created == 1

        def lifecycle(store):
            return [(i["start"], i["end"], i["project_id"], i["size"])
                    for i in queries.lifecycle(store, CLOUD, "instance", "srv-soft")]

        assert lifecycle(reconciled) == lifecycle(by_events) == [
            (T0, SOFT, "p-alpha", SMALL), (RESTORE, None, "p-alpha", SMALL)]
    finally:
        by_events.close()
        reconciled.close()
