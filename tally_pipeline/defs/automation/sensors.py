"""The sensor that evaluates the assets' automation conditions (orchestration/conditions.py)."""

import dagster as dg


def automation_sensor(interval: int) -> dg.AutomationConditionSensorDefinition:
    """Ships on: the projections follow the event log without anyone switching Dagster's default automation
    sensor on (declaring our own replaces it). With api_writes_sensor at the same ``interval`` (the config's
    ``automation.interval``), an API write reaches the projections within two intervals."""
    return dg.AutomationConditionSensorDefinition(
        "automation_sensor", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=interval,
        description=f"Evaluates the assets' automation conditions every {interval} s: event_log and the projections "
                    "follow new events.",
    )
