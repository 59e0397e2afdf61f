"""The per-cloud usage audit check, executed in-process by its job against the fake nova: green when the
ledger agrees with nova, red (ERROR) when a posting is tampered with; what /metrics then shows."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import yaml

from tally_pipeline.api.metrics import exposition, store_families
from tally_pipeline.definitions import build_definitions
from tally_pipeline.defs.ledger.usage_audit import check_name
from tally_pipeline.orchestration.resources import Ledger, PlatformAdapters, TallyStore
from tally_pipeline_tests.providers.openstack.openstack_cloud import SDK_NOISE
from tally_pipeline_tests.providers.openstack.usage_audit_cloud import T2, agreeing, make

__all__ = ["make"]  # the fixture
pytestmark = SDK_NOISE


class FixedClock:
    def __init__(self, now):
        self.value = now

    def now(self):
        return self.value


def run_audit_job(cloud):
    path = str(cloud.config_path)
    # the check audits the window_hours up to the last whole hour before the clock's now
    defs = build_definitions(["c1"], {"store": TallyStore(config_path=path), "ledger": Ledger(config_path=path),
                                      "adapters": PlatformAdapters(config_path=path),
                                      "clock": FixedClock(T2 + timedelta(minutes=20))})
    result = defs.resolve_job_def("usage_audit").execute_in_process(instance=dg.DagsterInstance.ephemeral(),
                                                                     raise_on_error=False)
    [evaluation] = result.get_asset_check_evaluations()
    return evaluation


def test_the_check_is_green_when_the_ledger_agrees_and_red_when_a_posting_is_tampered_with(make) -> None:
    cloud = agreeing(make)
    cloud.rt.close()  # the resources open the embedded database themselves
    evaluation = run_audit_job(cloud)
    assert evaluation.check_name == check_name("c1") == "usage_audit_c1"
    assert evaluation.asset_key == dg.AssetKey("ledger_postings")
    assert evaluation.passed, evaluation.description
    meta = evaluation.metadata
    assert meta["status"].value == "passed" and meta["window_start"].value == "2026-03-01T00:00:00Z"
    assert meta["servers_nova"].value == 3 and meta["api_calls"].value == 1

    cloud.tamper("p1", "instance_hours", "2")
    cloud.rt.close()
    evaluation = run_audit_job(cloud)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert "p1/instance_hours 2.000000" in evaluation.description
    assert "ledger_mismatch" in evaluation.metadata["unexplained"].value

    text = exposition(store_families(cloud.rt.store, ["c1", "other-cloud"]))
    cloud.rt.close()
    assert 'tally_usage_audit_last_failed{cloud="c1"} 1.0' in text
    assert 'tally_usage_audit_unexplained{cloud="c1",meter="instance_hours"} 2.0' in text
    assert 'tally_usage_audit_differences{cloud="c1",kind="ledger_mismatch"} 1.0' in text
    assert 'tally_usage_audit_api_calls{cloud="c1"} 1.0' in text
    assert 'cloud="other-cloud"' not in text.split("tally_usage_audit_last_timestamp_seconds", 1)[1]


def test_only_openstack_clouds_get_a_check_and_names_stay_distinct(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(yaml.safe_dump({"database": f"duckdb://{tmp_path / 'x.duckdb'}", "clouds": {
        "sim": {"provider": "simulated"}, "region.one": {"provider": "openstack", "os_cloud": "x"},
        "region_one": {"provider": "openstack", "os_cloud": "y"}}}))
    defs = build_definitions(config_path=str(config))
    checks = sorted(k.name for k in defs.resolve_asset_graph().get(dg.AssetKey("ledger_postings")).check_keys
                    if k.name.startswith("usage_audit_"))
    assert checks == sorted([check_name("region.one"), "usage_audit_region_one"])
    assert check_name("region.one") != "usage_audit_region_one"
    assert defs.resolve_schedule_def("usage_audit_schedule").cron_schedule == "40 1 * * *"
    # the hourly posting job runs its own checks, never the audits (they read nova's usage)
    posting = set(defs.resolve_job_def("delta_posting").graph.node_dict)
    assert not [n for n in posting if "usage_audit" in n] and "ledger_audit" in posting
    assert set(defs.resolve_job_def("usage_audit").graph.node_dict) == {
        f"ledger_postings_{name}" for name in checks}
