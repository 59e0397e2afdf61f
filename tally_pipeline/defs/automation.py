"""Declarative automation: the conditions the derived assets follow, and the sensor that evaluates them."""

import dagster as dg

# eager(), except that a never-materialized asset is filled in on the first tick (eager() only acts on
# partitions that *become* missing after it is applied, so a new deployment would wait forever).
FOLLOWS_EVENTS = dg.AutomationCondition.eager().replace("newly_missing", dg.AutomationCondition.missing())

# The event log only records what the ingest core wrote: a day of raw_event_batches that was never
# materialized (no landing files that day, or any day before the data began) must not hold it back.
EVENT_LOG = FOLLOWS_EVENTS.without(~dg.AutomationCondition.any_deps_missing())

# Ships on: the projections follow the event log without anyone switching Dagster's default
# automation sensor on (declaring our own replaces it). With api_writes' 30 s, an API write reaches
# the projections within a minute.
automation_sensor = dg.AutomationConditionSensorDefinition(
    "tally_automation", target=dg.AssetSelection.all(), default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Evaluates the assets' automation conditions every 30 s: event_log and the projections follow new events.",
)
