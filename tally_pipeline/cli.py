"""The ``tally`` command. Every command that reads the config or database takes ``--config FILE`` (or
``$TALLY_CONFIG``) and ``--database URL`` (or ``$TALLY_DATABASE``), before the command name or after it."""

from __future__ import annotations

import click

from tally_pipeline.commands import (
    alerts,
    bench,
    collect,
    collector,
    dead_letter,
    demo,
    ingest,
    ledger,
    openstack,
    openstack_audit,
    openstack_bench,
    openstack_simulate,
    query,
    serve,
    snapshot,
    soak,
    sql,
    sync,
    usage,
)
from tally_pipeline.commands._bench_report import record_load_before
from tally_pipeline.commands._options import TallyGroup, global_options, with_runtime
from tally_pipeline.redaction import redact_unconfigured_logging
from tally_pipeline.runtime import Runtime


@click.group(cls=TallyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tally-pipeline")
@global_options
def main(config_path: str | None, database: str | None) -> None:
    """tally: usage metering for clouds — events, reconciliation, projections and a convergent ledger."""
    redact_unconfigured_logging()


@main.group()
def db() -> None:
    """Database schema."""


@db.command("migrate")
@with_runtime
def db_migrate(rt: Runtime) -> None:
    """Apply pending migrations from sql/<dialect>/ (Postgres needs this; DuckDB does it on open)."""
    with rt.open_store(migrate=False) as store:
        applied = store.migrate()
        names = store.applied_migrations()
    for name in applied:
        click.echo(f"applied {name}")
    click.echo(f"{store.dialect}: {len(names)} migrations applied, {len(applied)} new")


# Every command, listed in one place; each is defined at module level in commands/<area>.py.
for command in (serve.serve, ingest.ingest, snapshot.snapshot, demo.demo, query.history, query.inventory,
                query.projection_group, sql.sql, sync.sync, sync.sync_runs, sync.sync_remote, ledger.post_usage_command,
                collector.collector):
    main.add_command(command)

GROUPS: dict[str, tuple[str, tuple[click.Command, ...]]] = {
    "alerts": ("The alerts: the Prometheus rules made from their definitions.", (alerts.rules,)),
    "bench": ("Benchmarks: each prints its measurements as JSON.",
              (bench.bench_ingest, bench.bench_projection, bench.bench_accuracy, bench.bench_reconcile,
               bench.bench_dead_letter, ledger.bench_post_command, bench.bench_usage_api, collect.bench_collect,
               openstack_bench.bench_openstack, openstack_audit.bench_audit_usage, soak.bench_soak)),
    "collect": ("Collectors: read a cloud's own event stream into the ingest API.", (collect.collect_openstack,)),
    "dead-letter": ("The dead letter (rejected_events).", (dead_letter.purge,)),
    "ledger": ("The usage ledger: postings and checkpoints.", (ledger.verify_command,)),
    "openstack": ("OpenStack clouds: credentials and scope, the usage audit against nova's own usage, and a "
                  "simulated cloud served as OpenStack.",
                  (openstack.check, openstack_audit.audit_usage, openstack_simulate.simulate)),
    "usage": ("Usage computed from the lifecycles, and monthly statements.",
              (ledger.daily_command, usage.show, usage.state)),
}
for name, (help_text, members) in GROUPS.items():
    # The bench group notes the load average before its benchmark runs (printed beside its figures).
    group = click.Group(name, help=help_text, callback=record_load_before if name == "bench" else None)
    for command in members:
        group.add_command(command)
    main.add_command(group)
