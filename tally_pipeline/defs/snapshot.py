"""After a run that changed the asset tables, a Parquet snapshot for analysts (embedded DuckDB only).

An embedded DuckDB file admits one process at a time; analysts read the snapshot instead, at any
time, without blocking the pipeline (``tally snapshot`` writes the same by hand).
"""

from typing import Any

import dagster as dg


def write_analyst_snapshot(context: dg.AssetExecutionContext, rt: Any) -> dict[str, Any]:
    """Write the snapshot when the store is DuckDB and snapshots are on; its folder as asset metadata."""
    from tally_pipeline.store.snapshot import takes_snapshots, write_snapshot

    settings = rt.config.analytics
    if not settings.snapshots or not takes_snapshots(rt.store):
        return {}
    taken = write_snapshot(rt.store, settings.snapshot_dir)
    context.log.info(f"analyst snapshot in {taken.directory}: {sum(taken.rows.values())} rows over {len(taken.rows)} tables")
    return {"analyst_snapshot": dg.MetadataValue.path(str(taken.directory))}
