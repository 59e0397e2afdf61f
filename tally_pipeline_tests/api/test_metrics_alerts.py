"""/metrics in Prometheus text format, and the alerting rules that read it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.core.alerts import AlertSettings
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.runtime import Runtime
from tally_pipeline.services import alerts
from tally_pipeline.services.reconciliation import run_sync
from tally_pipeline_tests.events import event

pytestmark = pytest.mark.slow  # a real process or a long property search per test

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ("TallyCloudEventsSilent", "TallySyncErrors", "TallySyncStale", "TallyReconciliationDriftHigh",
          "TallyLedgerEntitiesSkipped", "TallyServiceEventsSilent", "TallyUsageAuditFailed")
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


def samples_of(text: str) -> dict[tuple[str, str], float]:
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, f"not Prometheus text format: {line!r}"
        samples[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return samples


def test_metrics_are_valid_exposition_with_the_alert_inputs(store_url, tmp_path) -> None:
    samples = samples_of(scrape(store_url, tmp_path))
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


def test_a_type_only_the_sync_sees_fires_service_events_silent_with_its_inputs_on_metrics(store_url, tmp_path) -> None:
    """The real case: the collector carries nova's events but not cinder's (cinder publishes on an
    exchange it does not read); volumes reach tally only through the sync's corrections."""
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nclouds:\n  region-one: {{provider: simulated}}\n")
    rt = Runtime.load(str(config))
    rt.store.migrate()
    client = TestClient(create_app(ApiContext(store=rt.store, ingestor=rt.ingestor, runtime=rt)))
    now = datetime.now(UTC)
    old = now - timedelta(days=1)
    server = {"flavor_name": "m1.small", "vcpus": 2, "ram_mb": 2048, "disk_gb": 20}
    client.post("/v1/events", json={"events": [
        event(cloud="region-one", resource_id="srv-1", occurred_at=old.isoformat(), payload={"size": server}),
        event(cloud="stray-cloud"), event(cloud="another-stray", resource_type="volume", event_type="volume.create.end",
                                          payload={"size": {"gb": 1, "volume_type": None}})]})
    servers = [PlatformRecord("instance", "srv-1", "proj-a", server, "ACTIVE", None, old, old)]
    volumes: list[PlatformRecord] = []

    def sync(tick: datetime):
        view = StaticView.of([*servers, *volumes])
        return run_sync(rt.store, rt.ingestor, "region-one",
                        SimulatedAdapter(view, "region-one", resource_types=("instance", "volume")),
                        settle_window=300, mass_delete_guard=0.5, now=tick)

    sync(now - timedelta(minutes=20))
    sync(now - timedelta(minutes=10))  # the first two syncs warm up
    volumes.append(PlatformRecord("volume", "vol-1", "proj-a", {"gb": 10, "volume_type": None}, "available", None,
                                  now - timedelta(minutes=8), now - timedelta(minutes=8)))
    assert sync(now).created == 1  # the listing found the volume: no notification of it was stored

    condition = alerts.evaluate(rt.store, ["region-one"], now, AlertSettings())["service_events_silent"]
    assert condition.firing and condition.clouds == ("region-one",)
    assert set(condition.details["region-one"]) == {"volume"}
    assert "no volume event from cinder ever reached the collector" in condition.message
    samples = samples_of(client.get("/metrics").text)
    assert samples[("tally_sync_last_corrections", '{cloud="region-one",resource_type="volume"}')] == 1
    assert samples[("tally_sync_last_corrections", '{cloud="region-one",resource_type="instance"}')] == 0
    assert samples[("tally_sync_previous_success_timestamp_seconds", '{cloud="region-one"}')] == pytest.approx(
        (now - timedelta(minutes=10)).timestamp())
    assert samples[("tally_sync_reconciled_runs", '{cloud="region-one"}')] == 3
    by_type = {k[1]: v for k, v in samples.items() if k[0] == "tally_cloud_type_last_collector_event_timestamp_seconds"}
    # what the Prometheus rule reads: an instance event, no volume event for the cloud; strays are "other"
    assert set(by_type) == {'{cloud="region-one",resource_type="instance"}', '{cloud="other",resource_type="instance"}',
                            '{cloud="other",resource_type="volume"}'}
    assert by_type['{cloud="region-one",resource_type="instance"}'] >= (now - timedelta(minutes=10)).timestamp()

    # the collector now reads cinder's exchange: its next volume event clears the alert
    client.post("/v1/events", json={"events": [event(cloud="region-one", resource_type="volume", resource_id="vol-1",
                                                     event_type="volume.resize.end",
                                                     payload={"size": {"gb": 10, "volume_type": None}})]})
    assert not alerts.evaluate(rt.store, ["region-one"], now, AlertSettings())["service_events_silent"].firing
    samples = samples_of(client.get("/metrics").text)
    assert ("tally_cloud_type_last_collector_event_timestamp_seconds",
            '{cloud="region-one",resource_type="volume"}') in samples
    rt.close()


def test_the_rules_warm_up_is_the_python_rules_default() -> None:
    """Both sync-judging rules skip a cloud's first syncs as the Dagster sensors do (alerts.drift_warmup_syncs)."""
    rules = yaml.safe_load((ROOT / "docs/alerts/prometheus-rules.yaml").read_text())
    [group] = [g for g in rules["groups"] if g["name"] == "tally"]
    by_name = {r["alert"]: r["expr"] for r in group["rules"]}
    for name in ("TallyReconciliationDriftHigh", "TallyServiceEventsSilent"):
        [warmup] = re.findall(r"tally_sync_reconciled_runs\)\s*>\s*(\d+)", by_name[name])
        assert int(warmup) == AlertSettings().drift_warmup_syncs, name
