"""The ``tally`` command. Every command takes ``--config FILE`` (or ``$TALLY_CONFIG``) and ``--database URL`` (or ``$TALLY_DATABASE``)."""

from __future__ import annotations

import click

from tally_pipeline import commands
from tally_pipeline.commands._options import group_of, with_runtime  # noqa: F401  (re-exported)
from tally_pipeline.redaction import redact_unconfigured_logging
from tally_pipeline.runtime import Runtime


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tally-pipeline")
def main() -> None:
    """tally: usage metering for clouds — events, reconciliation, projections and a convergent ledger."""
    redact_unconfigured_logging()


@main.group()
def db() -> None:
    """Database schema."""


@db.command("migrate")
@with_runtime
def db_migrate(rt: Runtime) -> None:
    """Apply pending migrations from sql/<dialect>/ (Postgres needs this; DuckDB does it on open)."""
    from tally_pipeline.store import open_store

    with open_store(rt.config.database, migrate=False) as store:
        applied = store.migrate()
        names = store.applied_migrations()
    for name in applied:
        click.echo(f"applied {name}")
    click.echo(f"{store.dialect}: {len(names)} migrations applied, {len(applied)} new")


# Commands that live beside the code they drive.
commands.register(main)
