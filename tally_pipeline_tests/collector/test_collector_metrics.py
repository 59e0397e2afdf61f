"""The collector's /metrics and /healthz (served over HTTP here), and the alerting rules that read them."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tally_pipeline.collector.buffer import BusRejection
from tally_pipeline.collector.client import Collector, SendResult
from tally_pipeline.collector.metrics import CollectorMetrics, MetricsServer
from tally_pipeline_tests.collector_api import volume_event

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ("TallyCollectorBrokerUnreachable", "TallyCollectorBufferGrowing")


def scrape(tmp_path: Path) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], set[str], httpx.Response]:
    metrics = CollectorMetrics(exchanges=["nova", "cinder"], topics=["notifications"], max_events=100,
                               max_bytes=1 << 20, clock=lambda: 2_000_000_000.0)
    with Collector("http://127.0.0.1:9", None, tmp_path, clock=lambda: 1_999_999_940.0) as collector:
        collector.submit_many([volume_event(1), volume_event(2)])
        collector.submit_encoded([], rejected=[BusRejection(None, "{", "unparseable", "not JSON")])
        metrics.watch_buffer(collector.buffer.gauges)
        metrics.on_send(SendResult("sent", requests=1, stored=3, duplicates=1, rejected=2))
        metrics.on_send(SendResult("unavailable", requests=1, error="down"))
        server = MetricsServer(metrics, lambda: (False, {"broker_connected": False}), "127.0.0.1", 0).start()
        try:
            base = f"http://127.0.0.1:{server.port}"
            text = httpx.get(f"{base}/metrics").text
            health = httpx.get(f"{base}/healthz")
            assert httpx.get(f"{base}/livez").status_code == 503  # no live() given: as /healthz
            assert httpx.get(f"{base}/other").status_code == 404
        finally:
            server.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    return samples, names, health


def test_every_series_is_there_from_the_start_and_the_buffer_is_read_when_scraped(tmp_path: Path) -> None:
    samples, _, health = scrape(tmp_path)
    assert samples[("tally_collector_received_total", (("exchange", "cinder"), ("topic", "notifications")))] == 0
    assert samples[("tally_collector_rejected_total", (("reason", "mapping_error"),))] == 0
    assert samples[("tally_collector_ignored_total", (("reason", "audit"),))] == 0
    assert samples[("tally_collector_exchange_bound", (("exchange", "nova"),))] == 0
    assert samples[("tally_collector_sent_total", (("outcome", "stored"),))] == 3
    assert samples[("tally_collector_sent_total", (("outcome", "duplicate"),))] == 1
    assert samples[("tally_collector_sent_total", (("outcome", "rejected"),))] == 2
    assert samples[("tally_collector_send_failures_total", (("outcome", "unavailable"),))] == 1
    assert samples[("tally_collector_last_send_success_timestamp_seconds", ())] == 2_000_000_000
    assert samples[("tally_collector_buffered_events", ())] == 2
    assert samples[("tally_collector_buffered_bytes", ())] > 300
    assert samples[("tally_collector_oldest_buffered_age_seconds", ())] == 60
    assert samples[("tally_collector_rejected_log_entries", ())] == 1
    assert samples[("tally_collector_rejected_log_bytes", ())] == len("{") + len("not JSON")
    assert samples[("tally_collector_rejected_log_dropped", ())] == 0
    assert samples[("tally_collector_buffer_disk_full", ())] == 0
    assert samples[("tally_collector_buffer_disk_free_bytes", ())] > 0
    assert samples[("tally_collector_buffer_limit_events", ())] == 100
    assert health.status_code == 503 and health.json() == {"status": "failing", "broker_connected": False}


def test_collector_rules_read_only_exported_metrics_and_have_runbooks(tmp_path: Path) -> None:
    rules = yaml.safe_load((ROOT / "docs/alerts/prometheus-rules.yaml").read_text())
    [group] = [g for g in rules["groups"] if g["name"] == "tally-collector"]
    by_name = {r["alert"]: r for r in group["rules"]}
    assert set(by_name) == set(ALERTS)
    _, exported, _ = scrape(tmp_path)
    for name, rule in by_name.items():
        used = set(re.findall(r"\btally_[a-z_]+\b", rule["expr"]))
        assert used and used <= exported, (name, used - exported)
        assert (ROOT / rule["annotations"]["runbook"]).is_file()
        assert rule["annotations"]["runbook"] == f"docs/runbooks/{name}.md"
