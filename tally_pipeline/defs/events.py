"""The event log as seen from Dagster."""

from __future__ import annotations

import dagster as dg

from tally_pipeline.defs.resources import TallyStore


@dg.asset(
    group_name="events",
    kinds={"duckdb", "postgres"},
    description="The event log: one row per distinct event_id, written only by the ingest core.",
)
def event_log(tally: TallyStore) -> dg.MaterializeResult:
    with tally.runtime() as rt:
        rows = rt.store.query("SELECT cloud, verb, count(*) FROM events GROUP BY cloud, verb ORDER BY cloud, verb")
        rejected = rt.store.query("SELECT count(*) FROM rejected_events")[0][0]
    total = sum(r[2] for r in rows)
    table = "\n".join(f"| {c} | {v} | {n} |" for c, v, n in rows)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": total,
            "rejected_events": int(rejected),
            "by_cloud_and_verb": dg.MetadataValue.md("| cloud | verb | events |\n|---|---|---|\n" + table),
        }
    )
