"""The sensor that evaluates the assets' automation conditions (orchestration/conditions.py)."""

import dagster as dg

# Ships on: the projections follow the event log without anyone switching Dagster's default
# automation sensor on (declaring our own replaces it): after a landing run within 30 s, and it fills in
# what was never materialized. (After an API write, api_writes_sensor starts the refresh itself.)
automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation_sensor", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Evaluates the assets' automation conditions every 30 s: event_log and the projections follow new events.",
)
