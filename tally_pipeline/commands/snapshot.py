"""``tally snapshot``: Parquet copies of the asset tables that analysts read while the pipeline runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.runtime import Runtime
from tally_pipeline.services import projection


@click.command("snapshot")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to write the Parquet files (default: snapshot/ beside the DuckDB file).")
@with_runtime
def snapshot(rt: Runtime, directory: Path | None) -> None:
    """Write the asset tables of an embedded DuckDB database to Parquet (Postgres: read it directly)."""
    from tally_pipeline.store.snapshot import write_snapshot

    with rt.store.session():
        projection.refresh(rt.store)
        taken = write_snapshot(rt.store, directory)
    click.echo(json.dumps({"directory": str(taken.directory), "written_at": taken.written_at.isoformat(),
                           "rows": taken.rows}, indent=2))
