"""``tally openstack check CLOUD``: what the cloud's credentials can see, and whether reconciliation
may delete by absence, per type; with the cloud's latest run; with ``--collector``, per service
whether the bus collector hears it (its queue bound to the exchange the service publishes on)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.core.platform import INSUFFICIENT_SCOPE
from tally_pipeline.core.type_summary import summaries_from_json
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.errors import UnknownCloud

if TYPE_CHECKING:
    from tally_pipeline.providers.openstack.adapter import OpenStackAdapter
    from tally_pipeline.providers.openstack.check import CloudCheck


@click.command("check")
@click.argument("cloud")
@click.option("--sample", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Items read from the start of each type's listing.")
@click.option("--collector", "collector_url", metavar="URL",
              help="The cloud's bus collector's /metrics and /healthz server (tally collect openstack's "
                   "metrics_host:metrics_port), e.g. http://collector:8081: say per service whether it is heard.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@with_runtime
def check(rt: Runtime, cloud: str, sample: int, collector_url: str | None, as_json: bool) -> None:
    """Show, per type, whether CLOUD's credentials list every project (else reconciliation lists
    nothing of it and deletes nothing: insufficient_scope), what the listing's first items show,
    whether nova's deleted servers can be read, and the cloud's latest sync run. With --collector,
    per service: the exchange the collector binds for it, whether its queue is bound there, and when
    a message last arrived.

    Exits 1 when a type cannot be reconciled (scope not proven or listing failing), the latest
    run was not clean (failed, partial, or the mass-delete guard held deletes), or (with --collector)
    the collector does not answer or a service's exchange is not bound."""
    from tally_pipeline.providers.openstack.check import check as check_cloud
    from tally_pipeline.services.reconciliation import sync_runs

    adapter = openstack_adapter(rt, cloud)
    result = check_cloud(adapter, sample=sample)
    latest = next(iter(sync_runs(rt.store, cloud=cloud, limit=1)), None)
    blocked = result.error is not None or any(not t.deletes_allowed for t in result.types)
    types = summaries_from_json(latest["per_type"]) if latest is not None else {}
    unclean = latest is not None and (latest["status"] in ("failed", "partial") or any(
        t.guard_tripped for t in types.values()))
    heard = None if collector_url is None else _collector(collector_url, adapter.resource_types)
    deaf = heard is not None and (heard["error"] is not None or any(h.problem for h in heard["services"]))
    if as_json:
        body = result.as_json()
        if heard is not None:
            body["collector"] = {**heard, "services": {h.service: h.as_json() for h in heard["services"]}}
        body["latest_run"] = None if latest is None else {
            "run_id": latest["run_id"], "status": latest["status"], "error": latest["error"],
            "guard_tripped": sorted(t for t, o in types.items() if o.guard_tripped),
            "insufficient_scope": sorted(t for t, o in types.items() if o.code == INSUFFICIENT_SCOPE)}
        click.echo(json.dumps(body, indent=2, default=str))
    else:
        _print(result, latest)
        if heard is not None:
            _print_collector(heard)
    if blocked or unclean or deaf:
        raise SystemExit(1)


def openstack_adapter(rt: Runtime, cloud: str) -> OpenStackAdapter:
    """CLOUD's adapter, or a usage error naming what CLOUD is when it is not an OpenStack cloud."""
    from tally_pipeline.providers.openstack.adapter import OpenStackAdapter

    try:
        adapter = rt.adapter(cloud)
    except UnknownCloud as exc:
        raise click.ClickException(str(exc)) from None
    if not isinstance(adapter, OpenStackAdapter):
        raise click.ClickException(f"cloud {cloud!r} is not an OpenStack cloud (provider: "
                                   f"{rt.config.clouds[cloud].provider})")
    return adapter


def _collector(url: str, resource_types: Any) -> dict[str, Any]:
    """The collector's ``/healthz`` read per service; ``error`` says why it could not be read."""
    import httpx

    from tally_pipeline.collector.health import hearing

    health_url = url if url.rstrip("/").endswith("/healthz") else url.rstrip("/") + "/healthz"
    out: dict[str, Any] = {"url": health_url, "error": None, "broker_connected": None, "services": []}
    try:
        response = httpx.get(health_url, timeout=10.0)
        body = response.json()  # 503 (failing) still says which exchanges are bound
    except (httpx.HTTPError, ValueError) as exc:
        out["error"] = f"cannot read the collector's health at {health_url}: {type(exc).__name__}: {exc}"
        return out
    if not isinstance(body, dict) or not isinstance(body.get("services"), dict):
        out["error"] = f"{health_url} did not answer as a tally collector's /healthz (HTTP {response.status_code})"
        return out
    out["broker_connected"] = body.get("broker_connected")
    out["status"] = body.get("status")
    out["services"] = hearing(body, resource_types)
    return out


def _print_collector(heard: dict[str, Any]) -> None:
    if heard["error"] is not None:
        click.echo(f"  collector: {heard['error']}")
        return
    connected = "broker connected" if heard["broker_connected"] else "broker NOT connected"
    click.echo(f"  collector {heard['url']}: {heard.get('status')}, {connected}")
    for h in heard["services"]:
        if h.problem is not None and h.exchange is None:
            click.echo(f"    {h.service:10} NOT HEARD: {h.problem}")
            continue
        state = "bound" if h.bound else f"NOT BOUND: {h.why_unbound or 'unknown'}"
        if h.mismatch:
            state += f" (the exchange has other attributes than the collector declares: {h.mismatch})"
        if h.last_message_age_seconds is None:
            last = "no message since the collector started"
        else:
            last = f"last message {_age(h.last_message_age_seconds)} ago" + ("" if h.recent else " (silent)")
        click.echo(f"    {h.service:10} exchange {h.exchange:12} {state}; {last}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _print(result: CloudCheck, latest: dict[str, Any] | None) -> None:
    if result.credentials is None:
        click.echo(f"{result.cloud}: no token: {result.error}")
        return
    c = result.credentials
    scope = "system scope" if c.system_scope else f"project {c.project_name or '?'} ({c.project_id})"
    click.echo(f"{result.cloud}: user {c.user or '?'}, {scope}, roles: {', '.join(sorted(c.roles)) or 'none'}")
    for t in result.types:
        verdict = "deletes by absence ALLOWED" if t.deletes_allowed else "NOT reconciled (nothing deleted)"
        if t.error is not None:
            seen = f"listing failed: {t.error}"
        elif t.listed is None:
            seen = "not listed"
        else:
            seen = (f"{t.listed} items from {t.projects} projects"
                    + (" (the token's own project only)" if t.own_project_only else ""))
        click.echo(f"  {t.resource_type:14} {t.service:14} {verdict}")
        click.echo(f"  {'':14} scope: {t.scope}")
        click.echo(f"  {'':14} sees: {seen}")
    if result.deleted_listing is not None:
        click.echo(f"  nova's deleted servers: {result.deleted_listing}")
    if latest is None:
        click.echo("  latest run: none yet")
        return
    click.echo(f"  latest run: {latest['status']}" + (f": {latest['error']}" if latest["error"] else ""))
    for rtype, o in sorted(summaries_from_json(latest["per_type"]).items()):
        if o.guard_tripped:
            click.echo(f"    {rtype}: mass-delete guard held {o.deferred_by_reason.get('mass_delete_guard', 0)} "
                       "deletes")
