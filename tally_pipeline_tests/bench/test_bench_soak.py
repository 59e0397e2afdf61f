"""``tally bench soak``: a short run against ``tally serve``, its report checked against the store itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.store import open_store


@pytest.mark.slow
def test_a_short_soak_accounts_for_every_event_and_the_store_agrees(tmp_path: Path) -> None:
    database = f"duckdb://{tmp_path / 'soak.duckdb'}"
    result = CliRunner().invoke(main, ["bench", "soak", "--seconds", "3", "--clients", "2", "--batch-size", "200",
                                       "--duplicates", "0.1", "--invalid", "0.1", "--database", database])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and all(report["checks"].values())
    assert report["batches"] > 0 and report["sent"] == report["batches"] * 200
    assert report["stored"] + report["duplicates"] + report["rejected"] == report["sent"]
    assert report["duplicates"] > 0 and report["rejected"] > 0
    assert 0 < report["batch_latency_ms"]["p50"] <= report["batch_latency_ms"]["p99"] <= report["batch_latency_ms"]["max"]
    assert report["server_rss_mb"]["start"] > 0 and report["server_rss_mb"]["max"] >= report["server_rss_mb"]["end"]
    with open_store(database) as store:  # the run's figures, counted again from the tables
        assert store.event_count() == report["stored"]
        assert store.query("SELECT count(*) FROM rejected_events WHERE reason = 'size_schema'")[0][0] == report["rejected"]
        assert store.query("SELECT count(DISTINCT event_id) FROM events")[0][0] == report["stored"]


def test_a_database_lagging_the_code_is_refused_before_anything_runs(pg_url: str) -> None:
    result = CliRunner().invoke(main, ["bench", "soak", "--seconds", "1", "--database", pg_url])
    assert result.exit_code != 0 and "tally db migrate" in result.output
