"""Dagster wiring only: assets, jobs, schedules, sensors, checks and resources over core/ and store/."""

import warnings

import dagster as dg

# STYLE: time-partitioned assets use BackfillPolicy.single_run(), which Dagster 1.13 still marks beta.
# The choice is deliberate; the warning would greet every `dagster dev` without telling anyone anything.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", category=dg.BetaWarning)
