"""Meters bill by platform status, as the configuration says; a changed policy re-prices history.

An m1.tiny-like server (2 vCPUs) is created at 00:00, stopped at 10:00 and started at 16:00: its
power notifications (nova's official samples through the collector's mapping) give its intervals
their status. ``tally post-usage`` bills it by the configuration: by default every status (as
ceilometer's notification meters and CloudKitty's default rating do), 24 vCPU-hours per 12 hours
of each day's cycle. The operator then stops billing vCPUs of a stopped server: the next cycle
posts a credit of exactly the 6 stopped hours × 2 vCPUs through the ledger's normal deltas, leaves
instance_hours alone, and the ledger still verifies.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.providers.openstack.notifications import map_notifications
from tally_pipeline.schemas import default_registry
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.notification_samples import versioned_sample

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SERVER, PROJECT = "9a5f6a0c-1b2d-4e3f-8a7b-6c5d4e3f2a1b", "p-billing"
FLAVOR = {"nova_object.data": {"name": "m1.two", "vcpus": 2, "memory_mb": 2048, "root_gb": 0}}


def _oslo(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


def history() -> list[dict]:
    messages = [
        versioned_sample("instance-create-end", message_id="m-create", timestamp=_oslo(T0), uuid=SERVER,
                         tenant_id=PROJECT, flavor=FLAVOR, created_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
                         launched_at=T0.strftime("%Y-%m-%dT%H:%M:%SZ")),  # billed from the launch
        versioned_sample("instance-power_off-end", message_id="m-off", timestamp=_oslo(T0 + timedelta(hours=10)),
                         uuid=SERVER, tenant_id=PROJECT, flavor=FLAVOR),
        versioned_sample("instance-power_on-end", message_id="m-on", timestamp=_oslo(T0 + timedelta(hours=16)),
                         uuid=SERVER, tenant_id=PROJECT, flavor=FLAVOR),
    ]
    envelopes, outcomes = map_notifications(messages, cloud="c1")
    assert outcomes.mapped == 3
    return envelopes


def post(config, now: str) -> dict:
    result = CliRunner().invoke(main, ["post-usage", "--config", str(config), "--now", now], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_changed_status_policy_reprices_history_on_the_next_cycle(tmp_path, store_url) -> None:
    store = open_store(store_url, migrate=True)
    assert Ingestor(store, default_registry()).ingest(history(), origin="collector").stored == 3
    projection.refresh(store)
    store.close()
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nledger: {{ingest_lag: 0, window_days: 35}}\n")

    first = post(config, "2026-03-02T00:00:00Z")
    assert first["totals"]["usage"]["vcpu_hours"] == "48.000000"  # default: every status billed
    assert first["totals"]["usage"]["instance_hours"] == "24.000000"

    config.write_text(f"database: {store_url}\nledger: {{ingest_lag: 0, window_days: 35}}\n"
                      "meters: {vcpu_hours: {unbilled_statuses: [shutoff]}}\n")
    second = post(config, "2026-03-02T01:00:00Z")
    # one more hour running (2 vCPU-h) and the 6 stopped hours credited (-12): the normal delta
    assert second["totals"]["usage"]["vcpu_hours"] == "-10.000000"
    assert second["totals"]["usage"]["instance_hours"] == "1.000000"  # its policy did not change

    store = open_store(store_url)
    try:
        rows = store.query("SELECT amount FROM ledger_postings WHERE meter = 'vcpu_hours' ORDER BY clamp")
    finally:
        store.close()
    assert [str(a) for (a,) in rows] == ["48.000000", "-10.000000"]
    verified = CliRunner().invoke(main, ["ledger", "verify", "--config", str(config)], catch_exceptions=False)
    assert verified.exit_code == 0 and json.loads(verified.output)["ok"] is True


def test_an_unknown_meter_in_the_policy_is_a_clear_configuration_error(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text("meters: {vcpus: {unbilled_statuses: [shutoff]}}\n")
    result = CliRunner().invoke(main, ["post-usage", "--config", str(config), "--now", "2026-03-02T00:00:00Z"])
    assert result.exit_code != 0 and "vcpus is not a meter" in result.output


def _recovered(server: str, start: datetime, end: datetime) -> list[dict]:
    """What reconciliation writes for a server recovered from nova's deleted listing, whose status
    during its life the listing does not show."""
    base = {"cloud": "c1", "resource_type": "instance", "resource_id": server, "source": "reconciliation"}
    return [
        {**base, "event_id": f"{server}-c", "event_type": "sync.create", "project_id": PROJECT,
         "occurred_at": start.isoformat(),
         "payload": {"size": {"flavor_name": "m1.two", "vcpus": 2, "ram_mb": 2048, "disk_gb": 0}, "status": "unknown"}},
        {**base, "event_id": f"{server}-d", "event_type": "sync.delete", "occurred_at": end.isoformat(), "payload": {}},
    ]


def test_an_unknown_status_is_billed_by_default_unbilled_where_a_meter_says_so_and_counted(tmp_path, store_url) -> None:
    from tally_pipeline.api.metrics import exposition, store_families

    store = open_store(store_url, migrate=True)
    events = _recovered("srv-a", T0, T0 + timedelta(hours=3)) + _recovered("srv-b", T0, T0 + timedelta(hours=1))
    assert Ingestor(store, default_registry()).ingest(events, origin="sync", sources=("reconciliation",)).stored == 4
    projection.refresh(store)
    page = exposition(store_families(store, ["c1"]))
    store.close()
    assert 'tally_intervals_unknown_status{cloud="c1",resource_type="instance"} 2.0' in page
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nledger: {{ingest_lag: 0, window_days: 35}}\n"
                      "meters: {vcpu_hours: {unbilled_statuses: [shutoff, unknown]}}\n")
    cycle = post(config, "2026-03-02T00:00:00Z")
    assert cycle["totals"]["usage"]["instance_hours"] == "4.000000"  # unknown billed by default
    assert "vcpu_hours" not in cycle["totals"]["usage"]  # this meter names unknown: nothing billed
    assert cycle["unknown_status"]["instance_hours"] == {"resource_type": "instance", "intervals": 2, "billed": True}
    assert cycle["unknown_status"]["vcpu_hours"] == {"resource_type": "instance", "intervals": 2, "billed": False}
    assert "volume_gb_hours" not in cycle["unknown_status"]  # no volume interval is unknown
