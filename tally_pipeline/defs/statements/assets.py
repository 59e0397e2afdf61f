"""usage_statements: monthly partitions (UTC months, keyed YYYY-MM), one statement per cloud, project and
meter; its job, and the nightly schedule that states the month just ended and re-states the one before.

Built by ``definitions.py`` when the code location loads: its partitions start at the month of the
config's ``first_day``. The rules are ``core/statements.py``; the Ledger resource runs them.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from tally_pipeline.core.statements import parse_month, previous_month
from tally_pipeline.core.timeutil import parse_rfc3339, to_utc
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.projection_refresh import refresh_and_report
from tally_pipeline.orchestration.resources import Clock, Ledger
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.tags import NOW, POOL

ASSET = "usage_statements"


def usage_statements_asset(partitions: dg.MonthlyPartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name=ASSET,
        group_name="ledger",
        partitions_def=partitions,
        deps=["ledger_postings", "usage_checkpoints", "resource_intervals"],
        output_required=False,  # a month that is not closed in every cloud is not materialized: it waits
        pool=POOL,
        description=(
            "Per (cloud, project, meter), the usage dated in a UTC month, stated once the month is closed: ended "
            "by the ingest lag, the ledger posted past its end and verified, nothing deferred. Late usage for a "
            "stated month is a new version with the previous amount and the difference, never an overwrite. "
            "A month still waiting in some cloud is not materialized; the run says why (an observation, the log)."
        ),
    )
    def usage_statements(context: dg.AssetExecutionContext, ledger: Ledger,
                         clock: dg.ResourceParam[Clock]) -> Iterator[dg.MaterializeResult[Any]]:
        with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
            tags = context.run.tags
            now = parse_rfc3339(tags[NOW]) if NOW in tags else to_utc(clock.now())
            refresh_and_report(context, ledger, ASSET)  # state every event stored before the run
            month = parse_month(context.partition_key)
            clouds = ledger.statement_clouds()
            outcomes = [ledger.close_month(cloud, month, now) for cloud in clouds]
            waiting = [o for o in outcomes if o.status == "waiting"]
            for o in waiting:
                for why in o.waits:
                    context.log.warning(f"statement {o.cloud} {context.partition_key} waits: {why}")
            new = [n for o in outcomes for n in o.new]
            metadata = {
                "month": context.partition_key,
                "clouds": len(outcomes),
                "clouds_stated": sum(1 for o in outcomes if o.status != "waiting"),
                "clouds_waiting": len(waiting),
                "new_versions": len(new),
                "restated_lines": sum(1 for n in new if n.version > 1),
                "by_cloud": md_table(["cloud", "status", "lines", "new versions", "waits"],
                                     [[o.cloud, o.status, o.lines, len(o.new), "; ".join(w.split(":")[0] for w in o.waits)]
                                      for o in outcomes]),
            }
            if waiting:
                context.log.warning(f"statement {context.partition_key}: {len(waiting)} of {len(outcomes)} clouds wait; "
                                    "the month is not materialized until every cloud is closed")
                context.log_event(dg.AssetObservation(asset_key=ASSET, partition=context.partition_key, metadata={
                    **metadata,
                    "waits": md_table(["cloud", "reason"], [[o.cloud, w] for o in waiting for w in o.waits]),
                }))
                return
            context.log.info(f"statement {context.partition_key}: {len(outcomes)} clouds, {len(new)} new versions")
            yield dg.MaterializeResult(metadata={
                **metadata,
                "dagster/row_count": sum(o.lines for o in outcomes),
                **write_analyst_snapshot(context, ledger),
            })

    return usage_statements


usage_statements_job = dg.define_asset_job(
    "usage_statements_job", selection=dg.AssetSelection.assets(ASSET),
    description="State a month (or re-state it with the late usage it received), cloud by cloud.")


def months_to_state(tick: datetime, partitions: dg.MonthlyPartitionsDefinition) -> list[str]:
    """What a nightly tick asks for: the month that ended before the tick's month and the one before it
    (late usage for it is re-stated), those of them that are partitions."""
    last = previous_month(tick)
    before = previous_month(datetime(last.year, last.month, 1, tzinfo=UTC))
    keys = set(partitions.get_partition_keys(current_time=tick))
    return [m for m in (f"{before:%Y-%m}", f"{last:%Y-%m}") if m in keys]


def statements_defs(partitions: dg.MonthlyPartitionsDefinition) -> dg.Definitions:
    @dg.schedule(job=usage_statements_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description="Each night at 02:00 UTC: state the month just ended once it is closed, and re-state "
                             "the month before with any late usage it received.")
    def usage_statements_schedule(context: dg.ScheduleEvaluationContext) -> Iterator[dg.RunRequest]:
        tick = to_utc(context.scheduled_execution_time)
        for key in months_to_state(tick, partitions):
            # one run per month and night: a month still waiting is asked again the next night
            yield dg.RunRequest(run_key=f"{key}@{tick:%Y-%m-%d}", partition_key=key)

    return dg.Definitions(assets=[usage_statements_asset(partitions)], jobs=[usage_statements_job],
                          schedules=[usage_statements_schedule])
