"""Dagster wiring only: assets, jobs, schedules, sensors, checks and resources over core/ and store/."""

import warnings

import dagster as dg

# STYLE: time-partitioned assets use BackfillPolicy.single_run(), which Dagster 1.13 still marks beta.
# The choice is deliberate; the warning would greet every `dagster dev` without telling anyone anything.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", category=dg.BetaWarning)
# Dagster 1.13 itself reads the deprecated InitResourceContext.dagster_run whenever it initialises a
# nested resource (replace_config in _call_resource_fn_with_default): our Ledger holds the TallyStore,
# so every run printed it although no code of ours calls it. Only that message is silenced.
warnings.filterwarnings("ignore", message=r"InitResourceContext\.dagster_run is deprecated", category=DeprecationWarning)
