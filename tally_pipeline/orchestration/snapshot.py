"""After a run that changed the asset tables, a Parquet snapshot for analysts (embedded DuckDB only).

An embedded DuckDB file admits one process at a time; analysts read the snapshot instead, at any
time, without blocking the pipeline (``tally snapshot`` writes the same by hand).
"""

from typing import Any

import dagster as dg

from tally_pipeline.orchestration.resources import TallyStore


def write_analyst_snapshot(context: dg.AssetExecutionContext, db: TallyStore) -> dict[str, Any]:
    """Write the snapshot when the store is DuckDB and snapshots are on; its folder as asset metadata."""
    taken = db.write_analyst_snapshot()
    if taken is None:
        return {}
    context.log.info(f"analyst snapshot in {taken.directory}: {sum(taken.rows.values())} rows over {len(taken.rows)} tables")
    return {"analyst_snapshot": dg.MetadataValue.path(str(taken.directory))}
