"""``tally sync CLOUD``: one reconciliation run; ``tally sync-runs``: the latest runs."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.core.type_summary import cause_of
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.errors import UnknownCloud

if TYPE_CHECKING:
    from tally_pipeline.services.reconciliation import SyncRun


def _default(value: object) -> str:
    return format_rfc3339(value) if isinstance(value, datetime) else str(value)


#: What each count of a run means, printed under the numbers (docs/reconciliation.md has the rules).
COUNT_MEANINGS = (
    ("created", "live on the platform, unknown to the events: a create written"),
    ("updated", "size, project or status differed: an update written"),
    ("deleted", "gone from the platform, live in the events: a delete written"),
    ("recovered", "created and deleted between two looks, never announced: both ends written, from the "
                  "platform's deleted listing"),
)


def run_lines(run: SyncRun) -> list[str]:
    """``tally sync``'s answer: the outcome, what each count means, and a table per type."""
    drift = (f"first load of the cloud ({run.created} created; not drift)" if run.first_load
             else f"drift {run.drift:.2%} of the {run.live_before} resources live before"
             + (f" ({run.late} late deliveries settled, not drift)" if run.late else ""))
    lines = [f"{run.cloud}: {run.status}, platform listed at {format_rfc3339(run.poll_time)}; {drift}",
             "  corrections written as sync.* events (resources):"]
    lines += [f"    {getattr(run, name):>6} {name:9} {meaning}" for name, meaning in COUNT_MEANINGS]
    deferrals = ", ".join(f"{k} {v}" for k, v in run.deferrals_by_reason().items())
    lines.append(f"  held back: {run.deferred} deferred to a later run" + (f" ({deferrals})" if deferrals else "")
                 + f", {run.skipped} listed but unreadable (skipped)")
    lines.append(f"  {'type':14} {'listed':>7} {'created':>8} {'updated':>8} {'deleted':>8} {'recovered':>10} "
                 f"{'deferred':>9}  (listed: live resources the platform showed)")
    seen: dict[str | None, str] = {}
    for rtype, outcome in run.per_type.items():
        if outcome.status != "enumerated":
            cause, _ = cause_of(outcome.reason)  # the same failure, whatever request id each call carried
            same = seen.get(cause)
            seen.setdefault(cause, rtype)
            lines.append(f"  {rtype:14} NOT LISTED: " + (f"the same error as {same}" if same else str(outcome.reason)))
            continue
        notes = ([f"{outcome.skipped_total} skipped"] if outcome.skipped_total else []) + (
            ["guard held its deletes"] if outcome.guard_tripped else []) + (
            [f"updates dated by {', '.join(f'{k} {v}' for k, v in outcome.dated_by.items())}"]
            if outcome.dated_by else []) + (
            [f"{outcome.size_unknown} created on a size unknown before a resize"] if outcome.size_unknown else [])
        lines.append(f"  {rtype:14} {outcome.listed:>7} {outcome.created:>8} {outcome.updated:>8} {outcome.deleted:>8} "
                     f"{outcome.recovered:>10} {outcome.deferred:>9}" + (f"  ({', '.join(notes)})" if notes else ""))
    return lines


@click.command("sync")
@click.argument("cloud")
@click.option("--run-key", help="Deterministic key for the synthetic event ids (default: manual:<tick>).")
@click.option("--at", "at", help="The run's tick (RFC 3339, default: now): names the run; a simulated cloud answers "
              "as of it. A real cloud's corrections are dated when its listing was observed.")
@click.option("--json", "as_json", is_flag=True, help="Print the sync_runs row as JSON.")
@with_runtime
def sync(rt: Runtime, cloud: str, run_key: str | None, at: str | None, as_json: bool) -> None:
    """Reconcile CLOUD against its platform: list, diff, write sync.* events, record the run."""
    from tally_pipeline.services.reconciliation import SyncInProgress

    try:
        now = parse_rfc3339(at) if at else None
    except TimestampError as exc:
        raise click.BadParameter(str(exc), param_hint="--at") from None
    try:
        run = rt.sync(cloud, now=now, run_key=run_key)
    except (UnknownCloud, SyncInProgress) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(run.as_json(), indent=2, default=_default))
    else:
        for line in run_lines(run):
            click.echo(line)
    if run.status == "failed":
        raise SystemExit(1)


@click.command("sync-runs")
@click.option("--cloud")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@with_runtime
def sync_runs(rt: Runtime, cloud: str | None, limit: int) -> None:
    """The latest reconciliation runs, newest first, as JSON."""
    from tally_pipeline.services.reconciliation import sync_runs as latest

    click.echo(json.dumps(latest(rt.store, cloud=cloud, limit=limit), indent=2, default=_default))


@click.command("sync-remote")
@click.option("--api-url", envvar="TALLY_API_URL", required=True,
              help="The tally API's base URL, e.g. http://tally-api (default: $TALLY_API_URL).")
@click.option("--cloud", "clouds", multiple=True, help="A cloud to reconcile (repeatable). Default: every configured cloud.")
@click.option("--token", envvar="TALLY_SYNC_TOKEN", help="A bearer token with the admin scope (default: $TALLY_SYNC_TOKEN).")
@click.option("--key", envvar="TALLY_SYNC_KEY",
              help="Idempotency key of this invocation (each cloud's request sends KEY:CLOUD), e.g. the Job's name: "
                   "a retry with the same key follows the runs the first started (default: $TALLY_SYNC_KEY; none).")
@click.option("--timeout", type=click.FloatRange(min=1), default=3600.0, show_default=True,
              help="Seconds to wait for every run to end; a run still going then counts as failed.")
@click.option("--json", "as_json", is_flag=True, help="Print each cloud's run as JSON.")
@with_runtime
def sync_remote(rt: Runtime, api_url: str, clouds: tuple[str, ...], token: str | None, key: str | None,
                timeout: float, as_json: bool) -> None:
    """Ask a running tally API to reconcile clouds, and follow each run to its end.

    One POST /internal/sync/{cloud} per cloud (a run already going is followed instead), then each
    run is read until it ends. Progress goes to stderr as it happens; each cloud's outcome to stdout.
    Exit 1 when a run failed, could not be started, or did not end in time.
    """
    import time

    from tally_pipeline.services.reconciliation_remote import SyncClient

    names = list(clouds) or sorted(rt.config.clouds)
    if not names:
        raise click.UsageError("no clouds: give --cloud, or a config file that lists clouds")
    with SyncClient(api_url, token, progress=lambda line: click.echo(line, err=True)) as client:
        runs = client.run_all(names, key=key, deadline=time.monotonic() + timeout)
    for run in runs:
        if as_json:
            click.echo(json.dumps(run.summary()))
            continue
        outcome = run.summary()
        counts = ", ".join(f"{k} {outcome[k]}" for k in ("created", "updated", "deleted", "recovered", "deferred")
                           if outcome[k] is not None)
        joined = " (already running: followed)" if run.joined else ""
        click.echo(f"{run.cloud}: {run.status}{joined}, run {run.run_id or '-'}" + (f": {counts}" if counts else "")
                   + (f"; {outcome['error']}" if outcome["error"] else ""))
    if any(run.failed for run in runs):
        raise SystemExit(1)
