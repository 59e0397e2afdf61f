"""Declarative automation: the conditions the derived assets follow (the sensor that evaluates them
is defs/automation/sensors.py)."""

import dagster as dg

# eager(), except that a never-materialized asset is filled in on the first tick (eager() only acts on
# partitions that *become* missing after it is applied, so a new deployment would wait forever).
FOLLOWS_EVENTS = dg.AutomationCondition.eager().replace("newly_missing", dg.AutomationCondition.missing())

# The event log only records what the ingest core wrote: a day of raw_event_batches that was never
# materialized (no landing files that day, or any day before the data began) must not hold it back.
# (eager() is typed as a builtin condition but is an AND of conditions, which has ``without``.)
EVENT_LOG = FOLLOWS_EVENTS.without(~dg.AutomationCondition.any_deps_missing())  # type: ignore[attr-defined]

# The ingest tables (event_log, cloud_activity, dead_letter) are recorded by whoever writes them — a
# landing run, the api_writes_sensor, a sync — so automation only fills in one that was never
# materialized: it never launches a run that records nothing new (a dead_letter run of 0 new rows).
RECORDED_BY_WRITERS = (
    dg.AutomationCondition.missing().since_last_handled() & ~dg.AutomationCondition.in_progress()
).with_label("fill in when never materialized")
