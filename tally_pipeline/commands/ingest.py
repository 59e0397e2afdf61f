"""``tally ingest FILE…``: landing files through the ingest core, with a progress bar and a summary."""

from __future__ import annotations

import json
from pathlib import Path

import click
from tqdm import tqdm

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.landing import FileSummary, ingest_file


@click.command("ingest")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@with_runtime
def ingest(rt: Runtime, files: tuple[Path, ...], as_json: bool, quiet: bool) -> None:
    """Ingest landing files (JSON lines or {"events": [...]}, gzip too) in batches of 1000."""
    summaries: list[FileSummary] = []
    with rt.store.session():  # one process owns the embedded file for the whole command
        _ingest_files(rt, files, as_json, quiet, summaries)
    if as_json:
        click.echo(json.dumps({"files": [s.as_json() for s in summaries]}, indent=2))
    if any(s.error for s in summaries):
        raise SystemExit(1)


def _ingest_files(rt: Runtime, files: tuple[Path, ...], as_json: bool, quiet: bool, summaries: list[FileSummary]) -> None:
    for path in files:
        with tqdm(
            total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name,
            disable=quiet or as_json, leave=False,
        ) as bar:
            def advance(position: int, bar: tqdm = bar) -> None:
                bar.update(position - bar.n)

            summary = ingest_file(rt.ingestor, path, progress=advance, limits=rt.config.landing.limits())
        summaries.append(summary)
        if not as_json:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted((summary.reasons or {}).items()))
            line = (
                f"{path}: {summary.items} items: {summary.stored} stored, "
                f"{summary.duplicates} duplicates, {summary.rejected} rejected"
            )
            click.echo(line + (f" ({reasons})" if reasons else ""))
            if summary.error:
                click.echo(f"{path}: stopped: {summary.error}", err=True)
