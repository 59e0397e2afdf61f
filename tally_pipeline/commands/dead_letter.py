"""``tally dead-letter purge``: apply the dead letter's retention now (the daily Dagster job does the same)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.dead_letter import purge_dead_letter


@click.command("purge")
@click.option("--retention-days", type=click.IntRange(min=1), default=None,
              help="Keep this many days (default: dead_letter.retention_days of the config, 30).")
@with_runtime
def purge(rt: Runtime, retention_days: int | None) -> None:
    """Delete dead-letter rows last received more than the retention ago; print what went, as JSON."""
    days = retention_days or rt.config.dead_letter.retention_days
    result = purge_dead_letter(rt.store, days, datetime.now(UTC))
    click.echo(json.dumps({"retention_days": days, **result.as_json()}))
