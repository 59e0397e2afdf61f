"""The posting job (audit, then one cycle) and its hourly schedule."""

import dagster as dg

posting_job = dg.define_asset_job(
    "delta_posting",
    selection=dg.AssetSelection.assets("ledger_audit", "ledger_postings", "usage_checkpoints", "ledger_cycles",
                                      "ledger_skips"),
    description="Audit the ledger, then post one checkpoint-delta cycle (skipped when the audit's blocking check fails).",
)
posting_schedule = dg.ScheduleDefinition(job=posting_job, cron_schedule="15 * * * *", execution_timezone="UTC",
                                         default_status=dg.DefaultScheduleStatus.RUNNING,
                                         description="Every hour at :15, one posting cycle.")
