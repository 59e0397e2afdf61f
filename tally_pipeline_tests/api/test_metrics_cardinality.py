"""``/metrics`` stays the same size whatever clouds writers store (issue #26): per-cloud series only for
known clouds (configured, or in ``alerts.clouds``), every other folded into ``other``; the silent-cloud
alert considers only known clouds and ``other``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.core import alerts as rules
from tally_pipeline.runtime import Runtime
from tally_pipeline_tests.events import event

CLOUD_LABEL = re.compile(r'cloud="([^"]*)"')


def _scrape_after(store_url: str, tmp_path: Path, clouds: int) -> str:
    config = tmp_path / f"tally-{clouds}.yaml"
    config.write_text(f"database: {store_url}\nclouds:\n  region-one: {{provider: simulated}}\n"
                      "alerts: {clouds: [edge-one]}\n")
    rt = Runtime.load(str(config))
    try:
        rt.store.migrate()
        client = TestClient(create_app(ApiContext(store=rt.store, ingestor=rt.ingestor, runtime=rt)))
        names = ["region-one", "edge-one"] + [f"junk-{clouds}-{n}" for n in range(clouds)]
        for start in range(0, len(names), 1000):
            batch = [event(cloud=name) for name in names[start:start + 1000]]
            assert client.post("/v1/events", json={"events": batch}).json()["stored"] == len(batch)
        return client.get("/metrics").text
    finally:
        rt.close()


@pytest.mark.slow
def test_stored_clouds_beyond_the_known_ones_fold_into_other(store_url, tmp_path) -> None:
    small = _scrape_after(store_url, tmp_path, 3)
    large = _scrape_after(store_url, tmp_path, 600)  # same database: 603 unknown clouds stored by now
    assert set(CLOUD_LABEL.findall(large)) == {"region-one", "edge-one", "other"}
    assert len(large.splitlines()) == len(small.splitlines())
    stored = re.search(r'tally_cloud_events_stored_total\{cloud="other",source="collector"\} (\S+)', large)
    assert stored is not None and float(stored.group(1)) == 603
    assert 'tally_cloud_known{cloud="edge-one"} 1.0' in large


NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_the_silent_alert_watches_known_clouds_and_other_only() -> None:
    s = rules.AlertSettings()
    quiet = NOW - timedelta(hours=2)
    activity = [rules.CloudActivity(f"junk-{n}", quiet) for n in range(3000)]
    activity += [rules.CloudActivity("region-one", NOW - timedelta(days=3)), rules.CloudActivity("busy", NOW)]
    condition = rules.events_silent(activity, NOW, s, known={"region-one", "busy"})
    # 3,000 quiet unknown clouds are one candidate; a known cloud quiet for 3 days is still watched
    assert condition.clouds == ("other", "region-one")
    assert len(condition.message) < 200
    # an unknown cloud that is still sending keeps "other" quiet
    assert rules.events_silent([*activity, rules.CloudActivity("junk-new", NOW)], NOW, s,
                               known={"region-one", "busy"}).clouds == ("region-one",)
