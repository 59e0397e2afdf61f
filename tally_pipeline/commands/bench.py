"""``tally bench …``: benchmarks that print JSON. Other areas add their own to the same group."""

from __future__ import annotations

import click

from tally_pipeline.commands._bench_report import print_report
from tally_pipeline.commands._options import with_runtime
from tally_pipeline.runtime import Runtime


@click.command("ingest")
@click.option("--events", "n_events", type=click.IntRange(min=1000), default=200_000, show_default=True)
@click.option("--clients", type=click.IntRange(min=1, max=16), default=2, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--server-workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="uvicorn workers of the API under test (above 1: Postgres only).")
@click.option("--preload", type=click.IntRange(min=0), default=0, show_default=True,
              help="First add this many generated events to the log (in SQL), to measure a grown log.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Times each phase runs (new events each time), each round starting one phase later; a "
                   "multiple of 3 gives every phase each place once. Rates are over all rounds.")
@with_runtime
def bench_ingest(rt: Runtime, n_events: int, clients: int, seed: int, server_workers: int, preload: int,
                 rounds: int) -> None:
    """Ingest core and HTTP throughput against a raw bulk load (COPY) into the same events table."""
    from tally_pipeline.bench import ingest

    print_report(ingest.run(rt, events=n_events, clients=clients, seed=seed, server_workers=server_workers,
                            preload=preload, rounds=rounds))




# ``--growth`` default sizes: the log grows 8× on each backend (Postgres loads several times slower).
GROWTH_SIZES = {"duckdb": (1_000_000, 2_000_000, 4_000_000, 8_000_000),
                "postgres": (250_000, 500_000, 1_000_000, 2_000_000)}


@click.command("projection")
@click.option("--events", "n_events", type=click.IntRange(min=1000), default=2_000_000, show_default=True)
@click.option("--resources", type=click.IntRange(min=100), default=200_000, show_default=True)
@click.option("--late", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--growth", is_flag=True,
              help="Measure at several log sizes in one run (one database, each step loaded on top of the last) "
                   "and fit the growth exponent; --events/--resources are then ignored.")
@click.option("--size", "sizes", type=click.IntRange(min=1000), multiple=True,
              help="With --growth: the log sizes (default 1M-8M events on DuckDB, 250k-2M on Postgres).")
@click.option("--rounds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Incremental refreshes timed per log size, each after its own late events; the fastest is reported.")
@with_runtime
def bench_projection(rt: Runtime, n_events: int, resources: int, late: int, growth: bool,
                     sizes: tuple[int, ...], rounds: int) -> None:
    """Projection rebuild and incremental refresh against a plain window-function floor."""
    from tally_pipeline.bench import projection

    if growth:
        report = projection.growth(rt, sizes=sizes or GROWTH_SIZES[rt.store.dialect], late=late, rounds=rounds)
    else:
        report = projection.run(rt, events=n_events, resources=resources, late=late, rounds=rounds)
    print_report(report)


@click.command("accuracy")
@click.option("--loss", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--duplicates", type=click.FloatRange(0, 1), default=0.01, show_default=True)
@click.option("--hours", type=click.FloatRange(min=1), default=72, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--clouds", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--resources", type=click.IntRange(min=1), default=60, show_default=True)
@click.option("--down-cell", is_flag=True, help="The first cloud's nova has a cell down: its servers vanish from listings.")
def bench_accuracy(loss: float, duplicates: float, hours: float, seed: int, clouds: int, resources: int,
                   down_cell: bool) -> None:
    """Ground truth vs events alone vs events + 10-minute syncs: resource-hours per type, and per
    (cloud, project, meter) as a tenant sees it (`tenant.abs_error`, `tenant.worst`)."""
    from tqdm import tqdm

    from tally_pipeline.bench import accuracy

    with tqdm(total=int(hours * 6), desc="simulated syncs", unit="tick", leave=False) as bar:
        report = accuracy.run(loss=loss, duplicates=duplicates, hours=hours, seed=seed, clouds=clouds,
                              resources=resources, down_cell=down_cell, progress=lambda _t: bar.update(1))
    print_report(report)


@click.command("reconcile")
@click.option("--resources", "sizes", type=click.IntRange(min=100), multiple=True,
              default=[100_000, 1_000_000], show_default=True)
@click.option("--database", default="duckdb://:memory:", show_default=True, help="Where the projection lives.")
def bench_reconcile(sizes: tuple[int, ...], database: str) -> None:
    """Diff time for a cloud of N resources with 1 % drift (projection read + pure diff)."""
    from tally_pipeline.bench import reconcile

    print_report(reconcile.run(sizes=sorted(sizes), database=database))


@click.command("dead-letter")
@click.option("--rows", type=click.IntRange(min=10), default=2000, show_default=True)
@click.option("--item-kb", type=click.IntRange(min=1), default=100, show_default=True,
              help="Size of each refused item.")
@click.option("--database", default=None, help="Where to write (default: a fresh DuckDB file in a temporary folder).")
@click.option("--linger", type=click.FloatRange(min=0), default=None,
              help="DuckDB: seconds the file stays open after its last use (0: closed after every unit of work, "
                   "as before 0.5 s was the default).")
def bench_dead_letter(rows: int, item_kb: int, database: str | None, linger: float | None) -> None:
    """One rejected item at a time: its write latency as the dead letter grows."""
    import tempfile
    from pathlib import Path

    from tqdm import tqdm

    from tally_pipeline.bench import dead_letter
    from tally_pipeline.store.duckdb.store import SharedFile

    if linger is not None:
        SharedFile.linger_s = linger
    with tempfile.TemporaryDirectory(prefix="tally-bench-") as folder:
        url = database or f"duckdb://{Path(folder) / 'tally.duckdb'}"
        with tqdm(total=rows, desc="rejected items", unit="item", leave=False) as bar:
            report = dead_letter.run(url, rows=rows, item_kb=item_kb, progress=bar.update)
    report["linger_s"] = SharedFile.linger_s if url.startswith("duckdb://") else None
    print_report(report)


@click.command("usage-api")
@click.option("--entities", type=click.IntRange(min=7), default=1_000_000, show_default=True,
              help="Entities in the ledger; one tenant project of 1,000 resources among them.")
@click.option("--requests", "n_requests", type=click.IntRange(min=10), default=200, show_default=True,
              help="Timed requests per query.")
@click.option("--keep", is_flag=True, help="Keep the benchmark's schema (Postgres) instead of dropping it.")
@with_runtime
def bench_usage_api(rt: Runtime, entities: int, n_requests: int, keep: bool) -> None:
    """Time the usage API (a project's live balance, a month's grouped query) over a ledger of N
    entities, in a throw-away schema; print JSON."""
    from tally_pipeline.bench.usage_api import bench_usage_api as run

    print_report(run(rt.config.database, entities, requests=n_requests, keep=keep))
