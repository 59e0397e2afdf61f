"""The delta poster as assets: audit the ledger (a blocking check gates posting), then post a cycle."""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from tally_pipeline.core.timeutil import format_rfc3339, parse_rfc3339, to_utc
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.projection_refresh import refresh_and_report
from tally_pipeline.orchestration.resources import Clock, Ledger
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.tags import NOW, POOL
from tally_pipeline.services.ledger.verify import Verification


def ledger_balanced(result: Verification) -> dict[str, Any]:
    """The ledger_balanced check's verdict over a verification (the audit's rules live in ledger/verify.py)."""
    audit = result.audit()
    return {
        "passed": audit.passed,
        # only a broken ledger stops the cycle; unbilled entities must not stop every other one
        "severity": dg.AssetCheckSeverity.ERROR if audit.blocking else dg.AssetCheckSeverity.WARN,
        "metadata": {
            "entities": result.entities,
            "discrepancies": len(audit.broken),
            "unbilled": len(audit.unbilled),
            "examples": md_table(["kind", "cloud", "project", "meter", "detail"],
                                 [[d.kind, d.cloud, d.project_id, d.meter, d.detail[:80]] for d in audit.failing[:10]]),
        },
    }


def postings_match_usage(result: Verification) -> dict[str, Any]:
    """The postings_match_usage check's verdict over a verification: no orphan or mismatched postings."""
    broken = [d for d in result.discrepancies if d.kind in ("orphan_postings", "ledger_mismatch")]
    return {"passed": not broken, "metadata": {"entities": result.entities, "discrepancies": len(broken)}}


@dg.asset(
    group_name="ledger",
    deps=["resource_intervals"],
    check_specs=[dg.AssetCheckSpec("ledger_balanced", asset="ledger_audit", blocking=True,
                                   description="Every entity's postings sum to its checkpoint (else ERROR: blocks posting), and "
                                               "the latest cycle skipped or excluded nothing (else WARN).")],
    description="Verifies the ledger before a posting cycle; its blocking check stops the cycle if postings do not add up.",
    pool=POOL,
)
def ledger_audit(context: dg.AssetExecutionContext, ledger: Ledger) -> Iterator[dg.MaterializeResult[Any] | dg.AssetCheckResult]:
    with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
        result = ledger.verify()
        audit = result.audit()  # the verdict's rules live in ledger/verify.py
        for d in audit.failing[:20]:
            context.log.error(f"ledger discrepancy {d.kind}: {d.cloud}/{d.project_id}/{d.meter}: {d.detail}")
        yield dg.MaterializeResult(metadata={
            "entities": result.entities,
            "discrepancies": len(audit.broken),
            "unbilled": len(audit.unbilled),
            "pending_next_cycle": len(audit.pending),
        })
        yield dg.AssetCheckResult(check_name="ledger_balanced", **ledger_balanced(result))


@dg.multi_asset(
    specs=[
        dg.AssetSpec("ledger_postings", group_name="ledger",
                     deps=["ledger_audit", "resource_intervals"],
                     description="Signed postings per (cloud, project, meter) and clamp, in accounts usage and aged_out."),
        dg.AssetSpec("usage_checkpoints", group_name="ledger",
                     deps=["ledger_audit", "resource_intervals"],
                     description="Per entity: cumulative usage posted through its clamp."),
        dg.AssetSpec("ledger_cycles", group_name="ledger",
                     deps=["ledger_audit", "resource_intervals"],
                     description="One row per posting cycle: its now and clamp, entities posted, skipped and "
                                 "posted with excluded intervals."),
        dg.AssetSpec("ledger_skips", group_name="ledger",
                     deps=["ledger_audit", "resource_intervals"],
                     description="Per cycle, each entity skipped or posted without some intervals, and why "
                                 "(the ledger_entities_skipped alert reads the latest cycle's)."),
    ],
    check_specs=[dg.AssetCheckSpec("postings_match_usage", asset="ledger_postings",
                                   description="After the cycle, postings equal usage through every checkpoint.")],
    pool=POOL,
)
def delta_posting_cycle(context: dg.AssetExecutionContext, ledger: Ledger, clock: dg.ResourceParam[Clock]
                        ) -> Iterator[dg.MaterializeResult[Any] | dg.AssetCheckResult]:
    """One checkpoint-delta cycle at now: post usage through now − ingest_lag minus each checkpoint."""
    with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
        tags = context.run.tags
        now = parse_rfc3339(tags[NOW]) if NOW in tags else to_utc(clock.now())
        refresh_and_report(context, ledger, "delta_posting_cycle")  # post every stored event; record the fold
        result = ledger.post(now)
        summary = result.to_dict()
        for skipped in (result.skipped + result.excluded)[:20]:
            context.log.warning(f"skipped {skipped.cloud}/{skipped.project_id}/{skipped.meter}: {skipped.reason}")
        rows = [[account, meter, amount] for account, by_meter in summary["totals"].items() for meter, amount in by_meter.items()]
        snapshot = write_analyst_snapshot(context, ledger)
        yield dg.MaterializeResult(asset_key="ledger_postings", metadata={
            **snapshot,
            "cycle_id": result.cycle_id,
            "now": format_rfc3339(result.now),
            "clamp": format_rfc3339(result.clamp),
            "postings": result.postings,
            "entities_posted": len(result.posted),
            "entities_skipped": len(result.skipped),
            "entities_with_excluded_intervals": len(result.excluded),
            "totals_by_account": md_table(["account", "meter", "amount"], rows),
            # intervals whose status is unknowable, per meter, and whether the meter bills them
            "unknown_status": md_table(["meter", "intervals", "billed"],
                                       [[m, u["intervals"], u["billed"]] for m, u in result.unknown_status.items()]),
        })
        yield dg.MaterializeResult(asset_key="ledger_cycles", metadata={
            **snapshot, "cycle_id": result.cycle_id, "entities_posted": len(result.posted),
            "entities_skipped": len(result.skipped), "entities_with_excluded_intervals": len(result.excluded),
        })
        yield dg.MaterializeResult(asset_key="ledger_skips", metadata={
            **snapshot, "cycle_id": result.cycle_id, "dagster/row_count": len(result.skipped) + len(result.excluded),
            "examples": md_table(["cloud", "project", "meter", "reason"],
                                 [[x.cloud, x.project_id, x.meter, x.reason] for x in (result.skipped + result.excluded)[:10]]),
        })
        yield dg.MaterializeResult(asset_key="usage_checkpoints", metadata={
            **snapshot, "entities": result.entities, "unchanged": result.unchanged, "already_posted": result.already_posted,
        })
        yield dg.AssetCheckResult(asset_key="ledger_postings", check_name="postings_match_usage",
                                  **postings_match_usage(ledger.verify()))

