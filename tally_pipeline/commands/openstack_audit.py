"""``tally openstack audit-usage``: the ledger's instance-hours and vCPU-hours per project against nova's
own usage (``os-simple-tenant-usage``) over a window, each difference with its explanation; and
``tally bench audit-usage``: the audit's cost on a fake cloud of N servers."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from tally_pipeline.commands._bench_report import print_report
from tally_pipeline.commands._options import with_runtime
from tally_pipeline.commands.openstack import openstack_adapter
from tally_pipeline.core.timeutil import format_rfc3339, parse_rfc3339
from tally_pipeline.runtime import Runtime


def _instant(text: str, option: str) -> datetime:
    try:
        return parse_rfc3339(text)
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: an RFC 3339 time with its offset, e.g. 2026-12-01T00:00:00Z ({exc})",
                                 param_hint=option) from None


@click.command("audit-usage")
@click.option("--cloud", required=True, help="A configured OpenStack cloud (its credentials must be admin).")
@click.option("--from", "start", required=True, metavar="T1", help="The window's start (RFC 3339, with offset).")
@click.option("--to", "end", required=True, metavar="T2", help="The window's end, excluded (cut to now).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")
@click.option("--all", "show_all", is_flag=True, help="List every difference, explained ones too.")
@with_runtime
def audit_usage(rt: Runtime, cloud: str, start: str, end: str, as_json: bool, show_all: bool) -> None:
    """Compare, per project and server, the ledger's instance-hours and vCPU-hours over [T1, T2) with
    nova's own usage over the same window; list each difference with its explanation where one is known
    (docs/openstack.md, "The usage audit against nova's own usage"). The verdict is kept for /metrics and
    the alert.

    Exits 1 when a project's unexplained difference exceeds the tolerance (audit: in the config), 2 when
    the audit could not be made (nova unreadable, an empty window)."""
    from tally_pipeline.services.usage_audit import audit_usage as run_audit

    t1, t2 = _instant(start, "--from"), _instant(end, "--to")
    if not t1 < t2:
        raise click.BadParameter("must be after --from", param_hint="--to")
    run = run_audit(rt.store, rt.registry, cloud, openstack_adapter(rt, cloud), t1, t2, rt.config.audit)
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2, default=str))
    else:
        _print(run, show_all)
    if run.status == "error":
        raise SystemExit(2)
    if run.status == "failed":
        raise SystemExit(1)


def _print(run: Any, show_all: bool) -> None:
    head = (f"{run.cloud}: usage audit [{format_rfc3339(run.window_start)}, {format_rfc3339(run.window_end)}): "
            f"{run.status.upper()} ({run.api_calls} page(s) of nova's usage, {run.seconds:.1f} s)")
    click.echo(head)
    if run.result is None:
        click.echo(f"  cannot audit: {run.error}")
        return
    result = run.result
    click.echo(f"  servers: nova {result.servers_nova}, tally {result.servers_tally}")
    click.echo(f"  {'project':36} {'meter':15} {'ledger':>14} {'nova':>14} {'explained':>12} {'unexplained':>12}")
    for p in result.projects:
        d = p.to_dict()
        mark = "" if p.passed else f"  FAILS (tolerance {d['tolerance']})"
        click.echo(f"  {p.project_id:36} {p.meter:15} {d['ledger']:>14} {d['nova']:>14} {d['explained']:>12} "
                   f"{d['unexplained']:>12}{mark}")
    shown = [x for x in result.differences if show_all or not x.explained]
    if shown:
        click.echo("  differences" + ("" if show_all else " (unexplained; --all lists the explained ones)") + ":")
    for x in shown:
        d = x.to_dict()
        click.echo(f"    {x.project_id} {x.meter} {x.server_id or '(project)'}: {d['amount']} {x.kind}"
                   f"{'' if x.explained else ' UNEXPLAINED'}: {x.detail}")
    counts = {k: n for k, n in result.by_kind().items() if n}
    if counts:
        click.echo("  by kind: " + ", ".join(f"{k} {n}" for k, n in counts.items()))


# --- the benchmark -------------------------------------------------------------------------------


def bench(servers: int, page_size: int) -> dict[str, Any]:
    """A fake cloud of ``servers`` servers in 97 projects, each with a lifecycle in an embedded store that
    agrees with nova and a ledger posted past the window: the audit's time (folding, nova's pages, the
    ledger's verification and the comparison) and the pages of nova's usage read."""
    import tempfile
    from pathlib import Path

    from tally_pipeline.config import AuditSettings, OpenStackCloud
    from tally_pipeline.fakes.openstack import FakeOpenStack
    from tally_pipeline.fakes.static_view import StaticView
    from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
    from tally_pipeline.providers.simulated.platform import PlatformRecord
    from tally_pipeline.schemas import default_registry
    from tally_pipeline.services.ledger.poster import post_usage
    from tally_pipeline.services.usage_audit import audit_usage as run_audit
    from tally_pipeline.store import open_store

    start = datetime(2026, 1, 1, tzinfo=UTC)
    flavors = [("m1.small", 1, 2048, 20), ("m1.medium", 2, 4096, 40), ("m1.large", 4, 8192, 80)]
    records = []
    for i in range(servers):
        name, vcpus, ram, disk = flavors[i % len(flavors)]
        created = start + timedelta(seconds=i)
        records.append(PlatformRecord("instance", f"00000000-0000-4000-8000-{i:012d}", f"project-{i % 97:03d}",
                                      {"flavor_name": name, "vcpus": vcpus, "ram_mb": ram, "disk_gb": disk},
                                      "ACTIVE", None, created, created, name=f"bench-{i}"))
    now = start + timedelta(days=2)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenStack(StaticView.of(records), at=now) as fake:
        store = open_store(f"duckdb://{Path(tmp) / 'bench.duckdb'}")
        store.migrate()
        _ingest_creates(store, records)
        post_usage(store, default_registry(), now=now, ingest_lag=900, window_days=35)  # the ledger audited
        config = OpenStackCloud(provider="openstack", auth=fake.auth(), page_size=page_size,
                                resource_types=["instance"], timeout=120, retries=0)
        with OpenStackAdapter("bench", config) as adapter:
            adapter.connection.authorize()
            began = time.perf_counter()
            run = run_audit(store, default_registry(), "bench", adapter, start, start + timedelta(days=1),
                            AuditSettings(page_size=page_size), now=now)
            seconds = time.perf_counter() - began
        store.close()
        pages = fake.usage_pages
    result = run.result
    return {"benchmark": "usage_audit", "servers": servers, "page_size": page_size, "status": run.status,
            "error": run.error, "seconds": round(seconds, 3), "api_calls": pages, "audit_pages": run.api_calls,
            "servers_compared": result.servers_nova if result else 0,
            "differences": len(result.differences) if result else None,
            "projects": len({p.project_id for p in result.projects}) if result else 0}


def _ingest_creates(store: Any, records: list[Any]) -> None:
    """One create event per server, at its launch, through the ingest core; then the projection folds them."""
    from tally_pipeline.schemas import default_registry
    from tally_pipeline.services.ingest import Ingestor
    from tally_pipeline.services.projection import refresh

    ingestor = Ingestor(store, default_registry())
    events = [{"event_id": f"create-{r.resource_id}", "event_type": "compute.instance.create.end", "cloud": "bench",
               "resource_type": "instance", "resource_id": r.resource_id, "project_id": r.project_id,
               "occurred_at": format_rfc3339(r.created_at), "payload": {"size": r.size, "status": "active"}}
              for r in records]
    for i in range(0, len(events), 1000):
        outcome = ingestor.ingest(events[i:i + 1000], origin="bench")
        if outcome.rejected:
            raise click.ClickException(f"the bench's events were rejected: {outcome.as_json()['results'][:3]}")
    refresh(store)


@click.command("audit-usage")
@click.option("--servers", type=click.IntRange(min=1), default=5_000, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 1000), default=1000, show_default=True)
def bench_audit_usage(servers: int, page_size: int) -> None:
    """Audit a day of a local fake OpenStack of N servers against an embedded ledger that agrees with it:
    seconds and pages of nova's usage API read."""
    print_report(bench(servers, page_size))
