"""usage_daily: per cloud, project, meter and UTC day — daily partitions, backfilled in one run.

Built by ``definitions.py`` when the code location loads: its partitions start at the config's ``first_day``."""

from datetime import date

import dagster as dg

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.projection_refresh import refresh_and_report
from tally_pipeline.orchestration.resources import Clock, TallyStore
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.tags import POOL


def usage_daily_asset(partitions: dg.DailyPartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        group_name="usage",
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        deps=["resource_intervals"],
        pool=POOL,
        description=(
            "Usage per (cloud, project, meter, UTC day), computed from resource_intervals. A partition is replaced "
            "whole (idempotent); a backfill over a range of days runs once and recomputes them together."
        ),
    )
    def usage_daily(context: dg.AssetExecutionContext, store: TallyStore, clock: dg.ResourceParam[Clock]) -> None:
        with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
            window = context.partition_time_window
            first, last = window.start.date(), date.fromordinal(window.end.date().toordinal() - 1)
            refresh_and_report(context, store, "usage_daily")  # usage counts every event stored before the run
            result = store.recompute_usage_daily(first, last, through=clock.now())
            context.log.info(f"usage_daily {first}..{last}: {result.rows} rows, {len(result.skipped)} skipped")
            # A range backfill is one run but one materialization per day: each carries its own day's figures.
            snapshot = write_analyst_snapshot(context, store)
            by_day = store.usage_totals_by_day(first, last)
            skipped: dict[date, int] = {}
            for s in result.skipped:
                skipped[s.day] = skipped.get(s.day, 0) + 1
            for key in context.partition_keys:
                day = date.fromisoformat(key)
                totals = by_day.get(day, {"rows": 0, "meters": {}})
                context.add_asset_metadata(partition_key=key, metadata={
                    **snapshot,
                    "dagster/row_count": totals["rows"],
                    "day": key,
                    # the day in progress is not complete: its figures grow until the nightly run after it
                    "day_complete": day < to_utc(clock.now()).date(),
                    "computed_in_run": f"{first}..{last}",
                    "skipped": skipped.get(day, 0),
                    "totals_by_meter": md_table(["meter", "quantity"], [[m, q] for m, q in totals["meters"].items()]),
                })

    return usage_daily
