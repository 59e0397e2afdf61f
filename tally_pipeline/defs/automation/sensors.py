"""The sensor that evaluates the assets' automation conditions (orchestration/conditions.py)."""

import dagster as dg

# Ships on: the projections follow the event log without anyone switching Dagster's default
# automation sensor on (declaring our own replaces it). With api_writes' 30 s, an API write reaches
# the projections within a minute.
automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation_sensor", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Evaluates the assets' automation conditions every 30 s: event_log and the projections follow new events.",
)
