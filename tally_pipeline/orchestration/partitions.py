"""Partitions: UTC days for event batches and usage; configured clouds for reconciliation."""

from __future__ import annotations

import dagster as dg

DAILY = dg.DailyPartitionsDefinition(start_date="2025-01-01", timezone="UTC", end_offset=1)


def cloud_partitions(clouds: list[str]) -> dg.StaticPartitionsDefinition:
    """One partition per configured cloud (a placeholder when none is configured, so the job loads)."""
    return dg.StaticPartitionsDefinition(sorted(clouds) or ["no-clouds-configured"])
