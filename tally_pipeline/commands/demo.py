"""``tally demo``: the whole pipeline on simulated lossy clouds, through Dagster, with a report."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import time
from pathlib import Path

import click


def _say(line: str) -> None:
    click.echo(f"tally demo: {line}", err=True)


class PipedProgress:
    """Progress for a stderr that is not a terminal: each stage, and each tenth of the window, on a line of its own."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.tenths = 0

    def stage(self, what: str) -> None:
        _say(f"{what} ({time.monotonic() - self.started:.0f} s)")

    def tick(self, n: int, total: int) -> None:
        tenths = n * 10 // max(1, total)
        if tenths > self.tenths:
            self.tenths = tenths
            _say(f"{tenths * 10}% of the window ({n}/{total} ticks, {time.monotonic() - self.started:.0f} s)")


@click.command("demo")
@click.option("--clouds", type=click.IntRange(1, 10), default=2, show_default=True, help="Simulated clouds.")
@click.option("--hours", type=click.FloatRange(min=1), default=48, show_default=True, help="Simulated hours.")
@click.option("--loss", type=click.FloatRange(0, 1), default=0.05, show_default=True, help="Share of collector events lost.")
@click.option("--duplicates", type=click.FloatRange(0, 1), default=0.01, show_default=True,
              help="Share of collector events delivered twice.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to leave the databases and the picture (default: a new temporary directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--verbose", is_flag=True,
              help="Also print Dagster's log (always written to dagster.log in the demo directory).")
def demo(clouds: int, hours: float, loss: float, duplicates: float, seed: int, directory: Path | None,
         as_json: bool, verbose: bool) -> None:
    """Run the real pipeline (the Dagster jobs) over simulated clouds on an embedded DuckDB and show the
    ledger converging to the ground truth."""
    from tqdm import tqdm

    if importlib.util.find_spec("matplotlib") is None:  # checked first: the demo runs a minute before it draws
        raise click.ClickException('the demo draws its report with matplotlib, which the core install leaves out: '
                                   'pip install -e ".[demo]"')
    from tally_pipeline.demo import DemoSettings, report, run_demo
    from tally_pipeline.demo_report import picture, text

    if not verbose:  # the report says what happened; the runs' own log is in dagster.log
        logging.getLogger("dagster").setLevel(logging.WARNING)
    settings = DemoSettings(clouds=clouds, hours=hours, loss=loss, duplicates=duplicates, seed=seed,
                            directory=directory.resolve() if directory else None, verbose=verbose)
    if sys.stderr.isatty():  # a bar on a terminal, on stderr, so --json output stays clean
        with tqdm(total=int(hours * 6), desc="simulated 10-minute ticks", unit="tick", leave=False) as bar:
            run = run_demo(settings, progress=lambda n, total: bar.update(n - bar.n),
                           stage=lambda what: bar.write(f"tally demo: {what}", file=sys.stderr))
    else:  # piped or logged: a line per stage and per tenth of the window, as they happen
        lines = PipedProgress()
        run = run_demo(settings, progress=lines.tick, stage=lines.stage)
    figures = report(run)
    _say(f"drawing {figures['picture']}")
    picture(run, Path(figures["picture"]))
    click.echo(json.dumps(figures, indent=2) if as_json else text(figures))
