"""``tally snapshot``: Parquet copies of the asset tables that analysts read while the pipeline runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.runtime import Runtime
from tally_pipeline.services import projection


@click.command("snapshot")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to write the Parquet files (default: snapshot/ beside the DuckDB file).")
@click.option("--no-usage-daily", "keep_usage_daily", is_flag=True,
              help="Copy usage_daily as it stands instead of recomputing its days first.")
@with_runtime
def snapshot(rt: Runtime, directory: Path | None, keep_usage_daily: bool) -> None:
    """Write the asset tables of an embedded DuckDB database to Parquet (Postgres: read it directly).

    The pending events are folded first, and usage_daily is recomputed from the first daily partition
    (the config's first_day, else ledger.window_days ago) through today, as the Dagster schedule keeps
    it: a command-line user's snapshot holds the usage so far, not only what a `tally usage daily` made.
    """
    from tally_pipeline.orchestration.partitions import first_day
    from tally_pipeline.services.ledger.daily import recompute_usage_daily
    from tally_pipeline.store.snapshot import write_snapshot

    daily: dict[str, object] | None = None
    with rt.store.session():
        projection.refresh(rt.store)
        if not keep_usage_daily:
            now = datetime.now(UTC)
            daily = recompute_usage_daily(rt.store, rt.registry, first_day(rt.config, now.date()), now.date(),
                                          through=now).to_dict()
        taken = write_snapshot(rt.store, directory)
    answer: dict[str, object] = {"directory": str(taken.directory), "written_at": taken.written_at.isoformat(),
                                 "rows": taken.rows}
    if daily is not None:
        answer["usage_daily"] = daily
    click.echo(json.dumps(answer, indent=2, default=str))
