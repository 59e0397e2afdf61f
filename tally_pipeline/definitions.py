"""The Dagster code location: everything under tally_pipeline/defs, with its resources.

``dagster dev -w workspace.yaml`` (or ``dg dev``) loads ``defs``. The clouds to reconcile come from
the tally config file named by ``TALLY_CONFIG``; ``TALLY_DATABASE`` overrides its database.
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg

from tally_pipeline.config import load_config
from tally_pipeline.defs import alerts, ingest, ledger, projection, reconciliation, retention, usage
from tally_pipeline.defs.partitions import cloud_partitions
from tally_pipeline.defs.resources import Ledger, PlatformAdapters, TallyStore, WallClock


def default_resources(config_path: str | None = None, database: str | None = None) -> dict[str, Any]:
    store = TallyStore(config_path=config_path, database=database)
    return {
        "store": store,
        "ledger": Ledger(store=store),
        "adapters": PlatformAdapters(config_path=config_path),
        "clock": WallClock(),
    }


def build_definitions(
    clouds: list[str] | None = None,
    resources: dict[str, Any] | None = None,
    *,
    config_path: str | None = None,
    database: str | None = None,
) -> dg.Definitions:
    """The code location for ``clouds`` (default: the config file's), with production or given resources."""
    if clouds is None:
        clouds = sorted(load_config(config_path, database=database).clouds)
    recon = reconciliation.build(clouds, cloud_partitions(clouds))
    return dg.Definitions(
        assets=[
            ingest.raw_event_batches, ingest.event_log, ingest.dead_letter,
            projection.resource_projection,
            *recon["assets"],
            usage.usage_daily,
            ledger.ledger_audit, ledger.delta_posting_cycle,
        ],
        asset_checks=alerts.alert_checks,
        jobs=[ingest.landing_job, *recon["jobs"], usage.usage_daily_job, ledger.posting_job],
        schedules=[*recon["schedules"], usage.usage_daily_schedule, ledger.posting_schedule, retention.dead_letter_retention_schedule],
        sensors=[ingest.landing_files_sensor, ingest.api_writes, *recon["sensors"], *alerts.alert_sensors],
        resources=resources or default_resources(config_path, database),
    )


defs = build_definitions(
    config_path=os.environ.get("TALLY_CONFIG") or None,
    database=os.environ.get("TALLY_DATABASE") or None,
)
