"""The code location's shape, frozen: asset keys, groups, deps, kinds, automation conditions, checks and
partitions, and the jobs, schedules and sensors with their default status.

A restructuring of defs/ must leave this unchanged (the webserver test and the runbooks name these).
A deliberate change rewrites the snapshot: ``TALLY_UPDATE_SNAPSHOT=1 pytest tally_pipeline_tests/defs/test_asset_graph.py``,
and the diff of ``snapshots/asset_graph.json`` shows it in review. Building the definitions runs nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

from tally_pipeline.definitions import build_definitions

SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "asset_graph.json"


def _condition(condition: dg.AutomationCondition | None) -> str | None:
    if condition is None:
        return None
    return condition.get_label() or str(condition)


def graph_of(defs: dg.Definitions) -> dict[str, Any]:
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "kinds": sorted(node.kinds),
            "automation": _condition(node.automation_condition),
            "checks": sorted(c.name for c in node.check_keys),
            "owners": list(node.owners),
            "freshness_fail_window": (str(node.freshness_policy.fail_window.to_timedelta())
                                      if node.freshness_policy is not None else None),
            "code_reference": "dagster/code_references" in node.metadata,
            "partitions": type(node.partitions_def).__name__ if node.partitions_def else None,
            # a cloud's partitions are its name (daily ones depend on today, so only static keys)
            "partition_keys": (list(node.partitions_def.get_partition_keys())
                               if isinstance(node.partitions_def, dg.StaticPartitionsDefinition) else None),
        }
    repo = defs.get_repository_def()
    return {
        "assets": assets,
        "jobs": sorted(j.name for j in repo.get_all_jobs()),
        "schedules": {s.name: s.default_status.value for s in sorted(repo.schedule_defs, key=lambda s: s.name)},
        "sensors": {s.name: s.default_status.value for s in sorted(repo.sensor_defs, key=lambda s: s.name)},
    }


def _defs(tmp_path: Path, clouds: list[str]) -> dg.Definitions:
    # a config of its own, whatever TALLY_CONFIG or TALLY_DATABASE say: kinds name the database and providers
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'graph.duckdb'}\n", encoding="utf-8")
    return build_definitions(clouds, config_path=str(config))


def test_asset_graph_matches_the_snapshot(tmp_path: Path) -> None:
    current = graph_of(_defs(tmp_path, ["c1", "c2"]))
    if os.environ.get("TALLY_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert current == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_the_snapshot_sees_a_changed_graph(tmp_path: Path) -> None:
    """The dump is not blind: another cloud list is another graph (the reconciliation's partitions)."""
    assert graph_of(_defs(tmp_path, ["c1"])) != graph_of(_defs(tmp_path, ["c1", "c2"]))


def test_no_definition_names_a_database_kind() -> None:
    """Kinds that depend on the config (the database) are added by the catalog policy only."""
    import re

    from tally_pipeline import defs as defs_package

    defs_folder = Path(defs_package.__file__).parent
    declared = {str(p.relative_to(defs_folder)): found for p in sorted(defs_folder.rglob("*.py"))
                if (found := re.findall(r"kinds=\{[^}]*\"(?:duckdb|postgres|python)\"", p.read_text(encoding="utf-8")))}
    assert declared == {}


def naming_faults(defs: dg.Definitions) -> list[str]:
    """The naming rule (docs/operations.md): a job is named for its work, with ``_job`` only where that is an
    asset's own name; a schedule is its job's work (the name without ``_job``) and ``_schedule``; a sensor says what it watches, then ``_sensor``."""
    repo = defs.get_repository_def()
    assets = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    faults = []
    for job in repo.get_all_jobs():
        if job.name.startswith("__"):
            continue  # Dagster's own asset job
        base = job.name.removesuffix("_job")
        if (base in assets) != job.name.endswith("_job"):
            faults.append(f"job {job.name}")
    faults += [f"schedule {s.name}" for s in repo.schedule_defs
               if s.name != f"{s.job_name.removesuffix('_job')}_schedule"]
    faults += [f"sensor {s.name}" for s in repo.sensor_defs if not s.name.endswith("_sensor")]
    return sorted(faults)


def test_jobs_schedules_and_sensors_follow_one_naming_rule(tmp_path: Path) -> None:
    assert naming_faults(_defs(tmp_path, ["c1"])) == []


def test_the_naming_rule_sees_a_misnamed_definition() -> None:
    @dg.op
    def noop() -> None:
        pass

    @dg.job
    def usage_daily() -> None:  # an asset's name: wants _job
        noop()

    defs = dg.Definitions(
        assets=[dg.AssetSpec("usage_daily")], jobs=[usage_daily],
        schedules=[dg.ScheduleDefinition(name="nightly", job=usage_daily, cron_schedule="0 0 * * *")],
        sensors=[dg.SensorDefinition(name="watcher", job=usage_daily, evaluation_fn=lambda _ctx: None)])
    assert naming_faults(defs) == ["job usage_daily", "schedule nightly", "sensor watcher"]
