"""The standing audit of the ledger against nova's own usage: one asset check per OpenStack cloud on
``ledger_postings`` (``usage_audit_<cloud>``), a job that runs them and its daily schedule. Built from
the cloud list by ``definitions.py``, as the per-cloud reconciliation is."""

import hashlib
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import dagster as dg

from tally_pipeline.core.alert_defs import BY_KEY
from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.resources import AdapterSource, Clock, Ledger

RUNBOOK = BY_KEY["usage_audit"].runbook  # its alert, TallyUsageAuditFailed (core/alert_defs.py)


def check_name(cloud: str) -> str:
    """``usage_audit_<cloud>``: a check name admits ``[A-Za-z0-9_]``; a cloud name that needed changing
    gets a short hash of itself, so two clouds never share a check."""
    safe = re.sub(r"[^A-Za-z0-9_]", "_", cloud)
    if safe != cloud:
        safe += "_" + hashlib.blake2b(cloud.encode(), digest_size=3).hexdigest()
    return f"usage_audit_{safe}"


def _audit_check(cloud: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset="ledger_postings", name=check_name(cloud),
                    description=f"{cloud}: the ledger's instance-hours and vCPU-hours per project over the last "
                                "audit.window_hours against nova's own usage (os-simple-tenant-usage); fails where "
                                f"an unexplained difference exceeds the tolerance (runbook: {RUNBOOK}).")
    def check(ledger: Ledger, adapters: dg.ResourceParam[AdapterSource],
              clock: dg.ResourceParam[Clock]) -> dg.AssetCheckResult:
        with cause_first():
            settings = ledger.config.audit
            now = to_utc(clock.now())
            end = now.replace(minute=0, second=0, microsecond=0)
            run = ledger.audit_usage(cloud, adapters.adapter(cloud), end - timedelta(hours=settings.window_hours),
                                     end, now=now)
            result = run.result
            metadata: dict[str, Any] = {"cloud": cloud, "status": run.status, "window_start": format_rfc3339(run.window_start),
                        "window_end": format_rfc3339(run.window_end), "api_calls": run.api_calls,
                        "seconds": round(run.seconds, 3), "audit_id": run.audit_id, "runbook": RUNBOOK}
            if result is None:
                return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                           description=f"cannot audit {cloud}: {run.error}",
                                           metadata={**metadata, "error": run.error or ""})
            summary = result.to_dict()
            metadata.update({
                "servers_nova": result.servers_nova, "servers_tally": result.servers_tally,
                "projects_failing": len({p.project_id for p in result.failing}),
                "totals": dg.MetadataValue.json(summary["totals"]),
                "differences_by_kind": dg.MetadataValue.json({k: n for k, n in result.by_kind().items() if n}),
                "failing": md_table(["project", "meter", "ledger", "nova", "unexplained", "tolerance"],
                                    [[p.project_id, p.meter, d["ledger"], d["nova"], d["unexplained"], d["tolerance"]]
                                     for p in result.failing[:20] for d in [p.to_dict()]]),
                "unexplained": md_table(["project", "meter", "server", "kind", "amount", "detail"],
                                        [[x.project_id, x.meter, x.server_id or "", x.kind, x.to_dict()["amount"],
                                          x.detail[:80]] for x in result.differences if not x.explained][:20]),
            })
            failing = result.failing
            description = ("ledger and nova agree within the tolerance" if not failing else
                           f"{len(failing)} project meter(s) differ from nova beyond the tolerance: " +
                           ", ".join(f"{p.project_id}/{p.meter} {p.to_dict()['unexplained']}" for p in failing[:5]))
            return dg.AssetCheckResult(passed=result.passed, severity=dg.AssetCheckSeverity.ERROR,
                                       description=description, metadata=metadata)

    return check


def usage_audit_defs(clouds: list[str], providers: Mapping[str, str]) -> dg.Definitions:
    """A check per cloud that is OpenStack (or whose provider the config does not say: the location named
    it), the ``usage_audit`` job running them all, and its daily schedule."""
    audited = [c for c in sorted(clouds) if providers.get(c, "openstack") == "openstack"]
    if not audited:
        return dg.Definitions()
    checks = [_audit_check(c) for c in audited]
    job = dg.define_asset_job("usage_audit", selection=dg.AssetSelection.checks(*checks),
                              description="Audit the ledger against nova's own usage, one check per OpenStack cloud.")
    schedule = dg.ScheduleDefinition(job=job, cron_schedule="40 1 * * *", execution_timezone="UTC",
                                      default_status=dg.DefaultScheduleStatus.RUNNING,
                                      description="Every day at 01:40 UTC: audit the last audit.window_hours "
                                                  "of each OpenStack cloud against nova's usage.")
    return dg.Definitions(asset_checks=checks, jobs=[job], schedules=[schedule])
