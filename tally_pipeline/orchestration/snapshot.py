"""The Parquet snapshot for analysts (embedded DuckDB only), written by every run that changes the
tables it mirrors, and whether it is current.

An embedded DuckDB file admits one process at a time; analysts read the snapshot instead, at any
time, without blocking the pipeline (``tally snapshot`` writes the same by hand). Every run that
writes the asset tables — a sync, a landing run, a projection run, usage_daily, a posting cycle, the
dead-letter purge — writes it at its end, and records its path and the instant it was taken in the
metadata of each materialization it reports. The ``analyst_snapshot_current`` check (reported every
minute by its sensor) is red while some mirrored asset was materialized after the snapshot was taken
by a write the snapshot does not hold (e.g. an API write recorded by ``api_writes_sensor``, until the
projection run it starts writes a new one).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg

from tally_pipeline.orchestration.catalog import TABLES
from tally_pipeline.orchestration.resources import TallyStore

PATH = "analyst_snapshot"
WRITTEN_AT = "analyst_snapshot_written_at"
CHECK = ("event_log", "analyst_snapshot_current")  # the asset the check sits on, its name


def write_analyst_snapshot(context: dg.AssetExecutionContext | dg.OpExecutionContext, db: TallyStore) -> dict[str, Any]:
    """Write the snapshot when the store is DuckDB and snapshots are on; its folder and time as metadata."""
    taken = db.write_analyst_snapshot()
    if taken is None:
        return {}
    context.log.info(f"analyst snapshot in {taken.directory}: {sum(taken.rows.values())} rows over {len(taken.rows)} tables")
    return {PATH: dg.MetadataValue.path(str(taken.directory)),
            WRITTEN_AT: dg.MetadataValue.timestamp(taken.written_at.timestamp())}


def snapshot_evaluation(instance: dg.DagsterInstance, db: TallyStore, now: datetime | None = None) -> dict[str, Any]:
    """The analyst_snapshot_current check's verdict: ``passed``, ``description``, ``metadata``."""
    where = db.analyst_snapshot_dir()
    if where is None:
        return {"passed": True, "description": "no snapshot to keep: snapshots are off, or the store is Postgres "
                                               "(analysts read it directly)", "metadata": {"state": "off"}}
    directory, written_at = where
    behind = []
    for asset in TABLES:
        latest = instance.get_latest_materialization_event(dg.AssetKey(asset))
        if latest is None or latest.asset_materialization is None:
            continue
        at = datetime.fromtimestamp(latest.timestamp, UTC)
        wrote = latest.asset_materialization.metadata.get(WRITTEN_AT)
        wrote_at = wrote.value if isinstance(wrote, dg.TimestampMetadataValue) else None
        # a materialization that wrote a snapshot is held by it, or by any later one
        held = written_at is not None and (at <= written_at or (wrote_at is not None
                                                                and wrote_at <= written_at.timestamp()))
        if not held:
            behind.append((asset, at))
    now = now or datetime.now(UTC)
    metadata: dict[str, Any] = {
        "state": "stale" if behind else "current", PATH: dg.MetadataValue.path(str(directory)),
        "behind": ", ".join(a for a, _ in behind) or "none",
    }
    if written_at is not None:
        metadata[WRITTEN_AT] = dg.MetadataValue.timestamp(written_at.timestamp())
        metadata["age_seconds"] = round((now - written_at).total_seconds(), 1)
    if not behind:
        return {"passed": True, "metadata": metadata,
                "description": f"the snapshot in {directory} holds every materialization of the tables it mirrors"}
    if written_at is None:
        description = f"no snapshot in {directory}, but {', '.join(a for a, _ in behind)} hold data"
    else:
        oldest = min(at for _, at in behind)
        description = (f"the snapshot in {directory} (taken {written_at.isoformat()}) is older than "
                       f"{', '.join(a for a, _ in behind)} (materialized from {oldest.isoformat()} on)")
    return {"passed": False, "severity": dg.AssetCheckSeverity.ERROR, "description": description, "metadata": metadata}
