"""Partitions: UTC days for event batches and usage; configured clouds for reconciliation."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import dagster as dg

from tally_pipeline.config import TallyConfig


def first_day(config: TallyConfig, today: date | None = None) -> date:
    """The first daily partition: the config's ``first_day``, else ``ledger.window_days`` before today
    (older days are past what a posting cycle re-bills anyway)."""
    if config.first_day is not None:
        return config.first_day
    return (today or datetime.now(UTC).date()) - timedelta(days=config.ledger.window_days)


def daily_partitions(config: TallyConfig) -> dg.DailyPartitionsDefinition:
    """UTC days from ``first_day`` through tomorrow (landing files may be dated ahead of UTC midnight)."""
    return dg.DailyPartitionsDefinition(start_date=first_day(config).isoformat(), timezone="UTC", end_offset=1)


def cloud_partitions(clouds: list[str]) -> dg.StaticPartitionsDefinition:
    """One partition per configured cloud (a placeholder when none is configured, so the job loads)."""
    return dg.StaticPartitionsDefinition(sorted(clouds) or ["no-clouds-configured"])


def monthly_partitions(config: TallyConfig) -> dg.MonthlyPartitionsDefinition:
    """UTC months, keyed ``YYYY-MM``, from the month of ``first_day`` through the last month that has
    ended (a month is stated only once complete)."""
    start = first_day(config)
    return dg.MonthlyPartitionsDefinition(start_date=f"{start.year:04d}-{start.month:02d}", fmt="%Y-%m", timezone="UTC")
