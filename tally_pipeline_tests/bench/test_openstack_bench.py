"""``tally bench openstack`` runs end to end on small sizes and reports what it measured.

Only the shape and the counts are checked here; the figures themselves are the benchmark's job.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tally_pipeline.cli import main


@pytest.mark.slow
def test_bench_openstack_lists_every_server_and_reports_memory() -> None:
    result = CliRunner().invoke(main, ["bench", "openstack", "--servers", "250", "--servers", "500",
                                       "--page-size", "100", "--drift", "0.02"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["benchmark"] == "openstack_listing" and report["page_size"] == 100
    assert [run["servers"] for run in report["runs"]] == [250, 500]
    assert report["drift"] == 0.02
    for run in report["runs"]:
        # 2 % of the servers are missing from the listing: half in a down cell, half really deleted
        missing = run["servers"] // 50
        assert run["confirmations"] == missing and run["confirmed_gone"] == missing - missing // 2
        assert run["items"] == run["servers"] - missing // 2
        assert run["listing_plus_confirm_seconds"] >= run["seconds"]
        # 100 per page; a full last page is followed by one empty page
        assert run["list_requests"] == run["items"] // 100 + 1
        assert run["deleted_lookups"] == run["confirmed_gone"]  # each 404 asks nova's deleted listing for its date
        assert run["items_per_s"] > 0
        assert run["peak_rss_mb"] >= run["rss_before_mb"] > 0
        assert run["nova_microversion"] == "2.96"
    assert "rss_growth_difference_mb" in report
