"""``tally alerts rules``: the Prometheus rules, made from the alert definitions (core/alert_defs.py)."""

from __future__ import annotations

import click

from tally_pipeline.commands._options import refusal, shared
from tally_pipeline.config import ConfigError, load_config


@click.command("rules")
@click.option("--config", "config_path", envvar="TALLY_CONFIG", type=click.Path(dir_okay=False),
              help="Configuration file (YAML) whose alerts: thresholds the rules carry. Default: $TALLY_CONFIG, "
                   "else the defaults (those of docs/alerts/prometheus-rules.yaml).")
def rules(config_path: str | None) -> None:
    """Print the Prometheus alerting rules, with the config's thresholds (the Dagster sensors' own).

    A deployment whose alerts: thresholds differ from the defaults loads this output into Prometheus
    instead of docs/alerts/prometheus-rules.yaml, so both judge alike.
    """
    from tally_pipeline.core.alert_rules import prometheus_rules

    try:
        config = load_config(shared("config_path", config_path))
    except ConfigError as exc:
        raise refusal(exc) from None
    click.echo(prometheus_rules(config.alerts.rules()), nl=False)
