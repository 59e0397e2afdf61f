"""The sensor that evaluates the assets' automation conditions (orchestration/conditions.py)."""

import dagster as dg

# Ships on: the assets follow their conditions without anyone switching Dagster's default automation sensor
# on (declaring our own replaces it); it fills in what was never materialized. (The writers fold their own
# events into the projections, and api_writes_sensor starts a refresh after API writes: docs/operations.md.)
automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation_sensor", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Evaluates the assets' automation conditions every 30 s: event_log and the projections follow new events.",
)
