"""The reconciliation job running a sync the API reserved (run tag ``tally/sync_run_id``), in process on both
backends: it completes that very row; a re-execution of the finished run (its tags copied, as the UI's
*Re-execute* does) is a sync of its own and leaves the first row as it ended."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from tally_pipeline.config import DagsterSettings
from tally_pipeline.definitions import build_definitions
from tally_pipeline.orchestration.launch import DagsterSyncExecutor
from tally_pipeline.orchestration.resources import default_resources
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.reconciliation_launch import reserve


def test_the_job_completes_the_reserved_run_and_a_re_execution_is_a_run_of_its_own(store_url: str,
                                                                                     tmp_path: Path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nclouds:\n  c1: {{provider: simulated, seed: 2, resources: 10, hours: 2}}\n")
    rt = Runtime.load(str(config))
    rt.store.migrate()
    try:
        defs = build_definitions(["c1"], default_resources(str(config)))
        job = defs.resolve_job_def("reconciliation")
        started = reserve(rt.store, "c1", key=None, executor="dagster")
        # The tags the API's Dagster executor submits the run with.
        tags = DagsterSyncExecutor(DagsterSettings(url="http://dagster:3000")).tags("c1", started.run_id)
        instance = dg.DagsterInstance.ephemeral()
        first = job.execute_in_process(partition_key="c1", tags=tags, instance=instance)
        assert first.success
        rows = rt.store.query("SELECT run_id, status, run_key FROM sync_runs ORDER BY started_at")
        assert rows == [(started.run_id, "succeeded", f"api:{started.run_id}")]
        [meta] = [e.step_materialization_data.materialization.metadata for e in first.get_asset_materialization_events()
                  if e.asset_key == dg.AssetKey("sync_runs")]
        assert meta["sync_run_id"].value == started.run_id  # the UI names the run the API answered

        again = job.execute_in_process(partition_key="c1", tags=tags, instance=instance)
        assert again.success
        rows = rt.store.query("SELECT run_id, status FROM sync_runs ORDER BY started_at")
        assert len(rows) == 2 and rows[0] == (started.run_id, "succeeded") and rows[1][0] != started.run_id
    finally:
        rt.close()
