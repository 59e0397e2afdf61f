"""``tally bench soak``: the API under sustained concurrent load, then the store checked against what was sent."""

from __future__ import annotations

import click

from tally_pipeline.commands._bench_report import print_report


@click.command("soak")
@click.option("--seconds", type=click.FloatRange(min=1, max=24 * 3600), default=60, show_default=True,
              help="How long the clients post.")
@click.option("--clients", type=click.IntRange(min=1, max=64), default=4, show_default=True,
              help="Concurrent collectors (threads, one connection each).")
@click.option("--database", default=None,
              help="Database URL for `tally serve` (migrated; Postgres: `tally db migrate`). Default: a "
                   "throw-away DuckDB file.")
@click.option("--batch-size", type=click.IntRange(min=1, max=1000), default=500, show_default=True)
@click.option("--duplicates", type=click.FloatRange(0, 0.5), default=0.05, show_default=True,
              help="Share of items that resend an event already answered.")
@click.option("--invalid", type=click.FloatRange(0, 0.5), default=0.05, show_default=True,
              help="Share of items that break the volume size schema.")
@click.option("--max-events", type=click.IntRange(min=1000), default=20_000_000, show_default=True,
              help="Stop early once this many items are sent (all clients together).")
@click.option("--seed", type=int, default=1, show_default=True)
def bench_soak(seconds: float, clients: int, database: str | None, batch_size: int, duplicates: float,
               invalid: float, max_events: int, seed: int) -> None:
    """Drive `tally serve` (its own process, loopback only) with concurrent collectors, then check the store.

    Prints JSON: throughput, p50/p99 batch latency, the server's RSS over the run, and the checks
    (everything accounted for, nothing lost, every invalid event dead-lettered). Exits 1 if a check fails.
    """
    from tally_pipeline.bench import soak
    from tally_pipeline.store import StoreError

    try:
        report = soak.run(database=database, seconds=seconds, clients=clients, batch_size=batch_size,
                          duplicates=duplicates, invalid=invalid, max_events=max_events, seed=seed)
    except (StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    print_report(report)
    if not report["ok"]:
        failed = ", ".join(name for name, ok in report["checks"].items() if not ok)
        raise click.ClickException(f"soak checks failed: {failed}")
