"""Parquet snapshots: an analyst reads the tables while another process holds the DuckDB file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.schemas import default_registry
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import StoreError, open_store
from tally_pipeline.store.snapshot import SNAPSHOT_TABLES, write_snapshot

from ..events import event


def _fill(url: str, n: int) -> None:
    with open_store(url) as store:
        Ingestor(store, default_registry()).ingest([event(event_id=f"e{i}", resource_id=f"r{i % 7}") for i in range(n)],
                                                   origin="test")


def test_snapshot_holds_every_table_and_counts(tmp_path: Path) -> None:
    url = f"duckdb://{tmp_path / 'tally.duckdb'}"
    _fill(url, 25)
    result = CliRunner().invoke(main, ["snapshot", "--database", url])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    folder = tmp_path / "snapshot"
    assert Path(report["directory"]) == folder
    assert report["rows"]["events"] == 25
    assert report["rows"]["current_resources"] == 7  # the projection was refreshed first
    for table in SNAPSHOT_TABLES:
        assert pl.read_parquet(folder / f"{table}.parquet").height == report["rows"][table]
    manifest = json.loads((folder / "_snapshot.json").read_text())
    assert manifest["rows"] == report["rows"]
    assert not list(folder.glob(".*partial"))


def test_analyst_reads_the_snapshot_while_the_pipeline_holds_the_file(tmp_path: Path) -> None:
    url = f"duckdb://{tmp_path / 'tally.duckdb'}"
    _fill(url, 10)
    with open_store(url) as store:
        write_snapshot(store)
        with store.session():  # the pipeline holds the file open, as a Dagster step does
            Ingestor(store, default_registry()).ingest([event(event_id="late", resource_id="r99")], origin="test")
            reader = textwrap.dedent(f"""
                import duckdb, json
                folder = {str(tmp_path / 'snapshot')!r}
                try:
                    duckdb.connect({str(tmp_path / 'tally.duckdb')!r}, read_only=True)
                    locked = False
                except duckdb.IOException:
                    locked = True
                n = duckdb.sql(f"SELECT count(*) FROM '{{folder}}/events.parquet'").fetchall()[0][0]
                print(json.dumps({{"locked": locked, "events": n}}))
            """)
            done = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"locked": True, "events": 10}  # the file itself is locked; the snapshot is readable


def test_a_new_snapshot_replaces_the_old_one(tmp_path: Path) -> None:
    url = f"duckdb://{tmp_path / 'tally.duckdb'}"
    _fill(url, 3)
    with open_store(url) as store:
        first = write_snapshot(store)
        Ingestor(store, default_registry()).ingest([event(event_id="x1", resource_id="r1")], origin="test")
        second = write_snapshot(store)
    assert (first.rows["events"], second.rows["events"]) == (3, 4)
    assert duckdb.sql(f"SELECT count(*) FROM '{second.directory}/events.parquet'").fetchall()[0][0] == 4


def test_postgres_is_refused_with_a_reason(pg_url: str) -> None:
    with open_store(pg_url, migrate=True) as store, pytest.raises(StoreError, match="Postgres serves analysts"):
        write_snapshot(store)


def test_a_command_line_snapshot_holds_the_usage_so_far(tmp_path: Path) -> None:
    """No Dagster schedule fills usage_daily for a command-line user: ``tally snapshot`` recomputes its days first."""
    url = f"duckdb://{tmp_path / 'tally.duckdb'}"
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    with open_store(url) as store:
        Ingestor(store, default_registry()).ingest(
            [event(event_id="vm", resource_id="vm", occurred_at=f"{yesterday.isoformat()}T10:00:00Z")], origin="test")
    kept = CliRunner().invoke(main, ["snapshot", "--database", url, "--no-usage-daily"])
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.output)["rows"]["usage_daily"] == 0  # as the table stood
    result = CliRunner().invoke(main, ["snapshot", "--database", url])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["rows"]["usage_daily"] == report["usage_daily"]["rows"] > 0
    daily = pl.read_parquet(tmp_path / "snapshot" / "usage_daily.parquet")
    hours = daily.filter((pl.col("meter") == "instance_hours") & (pl.col("day") == yesterday))["quantity"]
    assert [float(h) for h in hours] == [14.0]  # 10:00 to midnight
