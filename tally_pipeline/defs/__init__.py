"""Dagster wiring only: assets, jobs, schedules, sensors, checks and resources over core/ and store/."""
