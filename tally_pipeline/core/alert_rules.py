"""The Prometheus rules file, made from the alert definitions (core/alert_defs.py).

``docs/alerts/prometheus-rules.yaml`` is ``prometheus_rules(AlertSettings())`` (a test holds it so);
``tally alerts rules --config FILE`` prints it with a deployment's own thresholds.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import fields
from datetime import timedelta

from tally_pipeline.core.alert_defs import ALERTS, GROUPS, AlertDef
from tally_pipeline.core.alerts import AlertSettings

HEADER = """\
# Prometheus alerting rules over the tally API's /metrics and the collector's.
# GENERATED from tally_pipeline/core/alert_defs.py: edit the definitions, then regenerate
# (TALLY_UPDATE_DOCS=1 pytest tally_pipeline_tests/core/test_alert_defs.py). `tally alerts rules
# --config FILE` prints them with that config's thresholds (`alerts:`); this file has the defaults.
# Every API replica reports the store-wide gauges alike, so the API's rules take max() across replicas.
"""
WIDTH = 100


def _promql(value: object) -> str:
    """A threshold as a PromQL number: durations in seconds."""
    number = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


def _prose(value: object) -> str:
    """A threshold as the rule's comment and summary say it: 1 hour, 30 minutes, 5%."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        for unit, size in (("hour", 3600), ("minute", 60)):
            if seconds >= size and seconds % size == 0:
                n = int(seconds // size)
                return f"{n} {unit}" + ("s" if n != 1 else "")
        return f"{seconds:g} seconds"
    if isinstance(value, float):
        return f"{value * 100:g}%"
    return str(value)


def fill(text: str, alert: AlertDef, settings: AlertSettings, as_text: bool) -> str:
    """``text`` with each ``{threshold}`` of the alert replaced by its value (Prometheus's own ``{{ … }}``
    templates are left alone: only the alert's threshold names are replaced)."""
    if not alert.thresholds:
        return text
    values = {f.name: getattr(settings, f.name) for f in fields(settings) if f.name in alert.thresholds}
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, alert.thresholds)) + r")\}")
    return pattern.sub(lambda m: (_prose if as_text else _promql)(values[m.group(1)]), text)


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                         break_long_words=False, break_on_hyphens=False)


def _rule(alert: AlertDef, settings: AlertSettings) -> list[str]:
    lines = [f"      - alert: {alert.name}", *_comment(fill(alert.description, alert, settings, True), " " * 8),
             "        expr: |"]
    lines += [f"          {line}" for line in fill(alert.expr, alert, settings, False).splitlines()]
    if alert.for_:
        lines.append(f"        for: {alert.for_}")
    # JSON strings are YAML double-quoted scalars: a summary's quotes and braces need nothing more.
    lines += [f"        labels: {{severity: {alert.severity}}}", "        annotations:",
              f"          summary: {json.dumps(fill(alert.summary, alert, settings, True))}",
              f"          runbook: {alert.runbook}"]
    return lines


def prometheus_rules(settings: AlertSettings) -> str:
    """The rules file's text, every alert of ``ALERTS`` in its group, with ``settings``' thresholds."""
    lines = HEADER.splitlines() + ["groups:"]
    for group, note in GROUPS.items():
        if note:
            lines += ["", *_comment(note, "  ")]
        lines += [f"  - name: {group}", "    rules:"]
        for i, alert in enumerate(a for a in ALERTS if a.group == group):
            lines += ([""] if i else []) + _rule(alert, settings)
    return "\n".join(lines) + "\n"
