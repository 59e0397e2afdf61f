"""/metrics in Prometheus text format, and the alerting rules that read it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from tally_pipeline.adapters.simulated import SimulatedAdapter
from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.reconciliation import run_sync
from tally_pipeline_tests.events import event

pytestmark = pytest.mark.slow  # a real process or a long property search per test

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ("TallyCloudEventsSilent", "TallySyncErrors", "TallySyncStale", "TallyReconciliationDriftHigh",
          "TallyLedgerEntitiesSkipped")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.e+]+|NaN)$')


def scrape(store_url: str, tmp_path: Path) -> str:
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nclouds:\n  region-one: {{provider: simulated}}\n  never-synced: {{provider: simulated}}\n")
    rt = Runtime.load(str(config))
    rt.store.migrate()
    client = TestClient(create_app(ApiContext(store=rt.store, ingestor=rt.ingestor, runtime=rt)))
    client.post("/v1/events", json={"events": [event(cloud="region-one"), event(cloud="region-one"), {"bad": 1}]})
    view = StaticView.of([])
    view.failures["volume"] = "error"
    run_sync(rt.store, rt.ingestor, "region-one", SimulatedAdapter(view, "region-one", resource_types=("volume", "instance")),
             settle_window=300, mass_delete_guard=0.5, now=datetime.now(UTC))
    # a posting cycle in another process: one server's size the meters cannot read
    from tally_pipeline.services.ledger.poster import post_usage
    from tally_pipeline_tests.ledger_data import DAY, T0, Row, insert, vm

    insert(rt.store, Row("p1", "vm-1", T0 - DAY, None, vm(vcpus="two")), Row("p1", "vm-2", T0 - DAY, None, vm()))
    post_usage(rt.store, rt.registry, now=T0, ingest_lag=900, window_days=35)
    text = client.get("/metrics").text
    rt.close()
    return text


def test_metrics_are_valid_exposition_with_the_alert_inputs(store_url, tmp_path) -> None:
    text = scrape(store_url, tmp_path)
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, f"not Prometheus text format: {line!r}"
        samples[(match.group(1), match.group(2) or "")] = float(match.group(3))
    assert samples[("tally_events_total", '{cloud="region-one",outcome="stored"}')] == 2
    assert samples[("tally_events_total", '{cloud="other",outcome="rejected"}')] == 1
    assert samples[("tally_cloud_events_stored_total", '{cloud="region-one",source="collector"}')] == 2
    last = samples[("tally_cloud_last_collector_event_timestamp_seconds", '{cloud="region-one"}')]
    assert abs(last - datetime.now(UTC).timestamp()) < 600
    assert samples[("tally_sync_runs_total", '{cloud="region-one",status="partial"}')] == 1
    assert samples[("tally_sync_last_failed", '{cloud="region-one"}')] == 1
    assert ("tally_sync_last_success_timestamp_seconds", '{cloud="region-one"}') in samples
    assert samples[("tally_sync_configured", '{cloud="never-synced"}')] == 1
    assert ("tally_sync_last_success_timestamp_seconds", '{cloud="never-synced"}') not in samples
    # the poster's exclusion, read from the store by the API process; every reason has a series
    assert samples[("tally_ledger_skipped_total", '{reason="bad_size"}')] == 1
    assert samples[("tally_ledger_skipped_total", '{reason="non_monotonic"}')] == 0
    assert samples[("tally_ledger_last_cycle_skipped", '{reason="bad_size"}')] == 1


def test_rules_file_parses_and_reads_only_exported_metrics(store_url, tmp_path) -> None:
    rules = yaml.safe_load((ROOT / "docs/alerts/prometheus-rules.yaml").read_text())
    [group] = [g for g in rules["groups"] if g["name"] == "tally"]  # the API's; the collector's are its own
    by_name = {r["alert"]: r for r in group["rules"]}
    assert set(by_name) == set(ALERTS)
    exported = {line.split()[2] for line in scrape(store_url, tmp_path).splitlines() if line.startswith("# TYPE")}
    for name, rule in by_name.items():
        used = set(re.findall(r"\btally_[a-z_]+\b", rule["expr"]))
        assert used and used <= exported, (name, used - exported)
        runbook = ROOT / rule["annotations"]["runbook"]
        assert runbook.is_file(), runbook
        assert name in runbook.read_text()
