"""Run tags the tally jobs read and write."""

POLL_TIME = "tally/poll_time"  # the instant a sync dates its corrections at (a schedule's tick time)
RUN_KEY = "tally/run_key"  # the sync's run key (makes synthetic event ids deterministic per tick)
CLOUD = "tally/cloud"  # one reconciliation run per cloud at a time (deploy/embedded/dagster.yaml tag limit)
SYNC_RUN_ID = "tally/sync_run_id"  # a sync the API reserved (its sync_runs row): the run executes that one
SYNC_STATUS = "tally/sync_status"  # a sync run's outcome: succeeded, partial or failed (the run list shows it)
NOW = "tally/now"  # the instant a posting cycle runs at
POOL = "tally_db"  # steps writing the tally database queue on this pool
