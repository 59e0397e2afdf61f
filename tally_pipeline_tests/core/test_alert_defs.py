"""Every alert is defined once (core/alert_defs.py): the committed Prometheus rules file is what the
definitions make, each alert has its runbook, and each definition's parts agree with each other."""

from __future__ import annotations

import os
import re
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.core.alert_defs import ALERTS, BY_KEY, CHECKED, GROUPS, AlertInputs, evaluate
from tally_pipeline.core.alert_rules import prometheus_rules
from tally_pipeline.core.alerts import AlertSettings, LastRun

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "alerts" / "prometheus-rules.yaml"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_committed_rules_file_is_what_the_definitions_make() -> None:
    generated = prometheus_rules(AlertSettings())
    if os.environ.get("TALLY_UPDATE_DOCS") == "1":
        RULES.write_text(generated, encoding="utf-8")
    assert RULES.read_text(encoding="utf-8") == generated, "regenerate: TALLY_UPDATE_DOCS=1 pytest " + __file__


def test_the_rules_file_holds_each_definition_as_prometheus_reads_it() -> None:
    """The text is made by hand (comments kept): what YAML reads back is each definition, quotes and
    Prometheus templates included."""
    groups = yaml.safe_load(prometheus_rules(AlertSettings()))["groups"]
    assert [g["name"] for g in groups] == list(GROUPS)
    read = {r["alert"]: (g["name"], r) for g in groups for r in g["rules"]}
    assert list(read) == [a.name for a in ALERTS]
    for alert in ALERTS:
        group, rule = read[alert.name]
        assert group == alert.group
        assert rule["labels"] == {"severity": alert.severity}
        assert rule.get("for") == alert.for_
        assert rule["annotations"]["runbook"] == alert.runbook
        assert "{{ $labels." in rule["annotations"]["summary"]
        assert not re.search(r"(?<!\{)\{[a-z_]+\}(?!\})", rule["expr"] + rule["annotations"]["summary"]), alert.name


def test_every_alert_has_its_runbook_and_every_runbook_an_alert() -> None:
    for alert in ALERTS:
        page = ROOT / alert.runbook
        assert page.is_file(), f"{alert.name}: write its runbook, {alert.runbook}"
        assert alert.name in page.read_text(encoding="utf-8"), page
    pages = {p.stem for p in (ROOT / "docs" / "runbooks").glob("*.md")}
    assert pages == {a.name for a in ALERTS}


def test_names_and_keys_are_unique_and_the_known_ones() -> None:
    assert len({a.name for a in ALERTS}) == len({a.key for a in ALERTS}) == len(ALERTS)
    # the checks' (and sensors') names are kept: runs, cursors and dashboards know them
    assert {k: BY_KEY[k].name for k in CHECKED} == {
        "events_silent": "TallyCloudEventsSilent", "sync_stale": "TallySyncStale", "sync_errors": "TallySyncErrors",
        "drift_high": "TallyReconciliationDriftHigh", "ledger_entities_skipped": "TallyLedgerEntitiesSkipped",
        "service_events_silent": "TallyServiceEventsSilent"}


def test_each_threshold_is_a_setting_the_rule_reads_and_every_named_one_is_listed() -> None:
    settings = {f.name for f in fields(AlertSettings)}
    for alert in ALERTS:
        assert set(alert.thresholds) <= settings, alert.name
        for name in alert.thresholds:
            assert "{" + name + "}" in alert.expr, (alert.name, name)
        named = set(re.findall(r"(?<!\{)\{([a-z_]+)\}(?!\})", alert.expr + alert.summary + alert.description))
        assert named <= set(alert.thresholds), (alert.name, named - set(alert.thresholds))


def test_the_rules_carry_the_configured_thresholds() -> None:
    settings = AlertSettings(sync_stale_after=timedelta(hours=2), drift_high=0.125, drift_warmup_syncs=4,
                             events_silent_after=timedelta(seconds=90.5))
    rules = {r["alert"]: r for g in yaml.safe_load(prometheus_rules(settings))["groups"] for r in g["rules"]}
    assert "> 7200\n" in rules["TallySyncStale"]["expr"]
    assert rules["TallySyncStale"]["annotations"]["summary"].endswith("for over 2 hours")
    assert "> 0.125\n" in rules["TallyReconciliationDriftHigh"]["expr"]
    assert "tally_sync_reconciled_runs) > 4)" in rules["TallyReconciliationDriftHigh"]["expr"]
    assert "tally_sync_reconciled_runs) > 4\n" in rules["TallyServiceEventsSilent"]["expr"]
    assert "> 90.5\n" in rules["TallyCloudEventsSilent"]["expr"]


def test_tally_alerts_rules_prints_the_config_thresholds(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text("alerts:\n  sync_stale_after: 3600\n")
    out = CliRunner().invoke(main, ["alerts", "rules", "--config", str(config)], catch_exceptions=False).output
    assert out == prometheus_rules(replace(AlertSettings(), sync_stale_after=timedelta(hours=1)))
    assert "tally_sync_last_success_timestamp_seconds)) > 3600" in out


def test_each_checked_alert_evaluates_under_its_own_name() -> None:
    quiet = evaluate(AlertInputs(NOW, ("c1",), frozenset({"c1"}), last_success={"c1": NOW}), AlertSettings())
    assert list(quiet) == list(CHECKED)
    for key, condition in quiet.items():
        assert condition.alert == BY_KEY[key].name and not condition.firing, key
    failed = LastRun("c1", "failed", NOW, None, "boom", nth=3)
    loud = evaluate(AlertInputs(NOW, ("c1",), frozenset({"c1"}), last_runs=(failed,)), AlertSettings())
    assert loud["sync_errors"].firing and loud["sync_stale"].firing and not loud["drift_high"].firing
