"""The posting job (audit, then one cycle) and its hourly schedule."""

import dagster as dg

# The cycle's own checks and the skipped-entities alert; not the per-cloud usage audits on ledger_postings
# (they read nova's usage: their own daily job, defs/ledger/usage_audit.py).
_CYCLE_CHECKS = (dg.AssetCheckKey(dg.AssetKey("ledger_audit"), "ledger_balanced"),
                 dg.AssetCheckKey(dg.AssetKey("ledger_postings"), "postings_match_usage"),
                 dg.AssetCheckKey(dg.AssetKey("ledger_postings"), "ledger_entities_skipped"))

posting_job = dg.define_asset_job(
    "delta_posting",
    selection=dg.AssetSelection.assets("ledger_audit", "ledger_postings", "usage_checkpoints", "ledger_cycles",
                                      "ledger_skips").without_checks() | dg.AssetSelection.checks(*_CYCLE_CHECKS),
    description="Audit the ledger, then post one checkpoint-delta cycle (skipped when the audit's blocking check fails).",
)
posting_schedule = dg.ScheduleDefinition(job=posting_job, cron_schedule="15 * * * *", execution_timezone="UTC",
                                         default_status=dg.DefaultScheduleStatus.RUNNING,
                                         description="Every hour at :15, one posting cycle.")
