"""The Dagster code location: everything under tally_pipeline/defs, with its resources.

``dagster dev -w workspace.yaml`` (or ``dg dev``) loads ``defs``. The clouds to reconcile come from
the tally config file named by ``TALLY_CONFIG``; ``TALLY_DATABASE`` overrides its database.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dagster as dg

from tally_pipeline.config import load_config
from tally_pipeline.defs import alerts, automation, ingest, ledger, projection, reconciliation, retention, usage
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


# asset -> the table it is (the catalog's table name and column schema come from the migrations)
TABLES = {
    "event_log": "events", "cloud_activity": "cloud_activity", "dead_letter": "rejected_events",
    "current_resources": "current_resources", "resource_intervals": "resource_intervals",
    "projection_state": "projection_state", "sync_runs": "sync_runs", "sync_deferrals": "sync_deferrals",
    "usage_daily": "usage_daily", "ledger_postings": "ledger_postings", "usage_checkpoints": "usage_checkpoints",
}
PLATFORM_ASSETS = ("sync_runs", "sync_deferrals")  # they read the clouds' platform APIs

def dialect_of(database: str) -> str:
    return "duckdb" if database.startswith("duckdb://") else "postgres"


def catalog_policy(dialect: str, providers: set[str]) -> Callable[[dg.AssetSpec], dg.AssetSpec]:
    """Applied to every asset: kinds name the configured database (and the clouds' providers), and each
    table-backed asset carries its table name and column schema."""
    from tally_pipeline.store.catalog import table_columns

    tables = table_columns(dialect)

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        name = spec.key.to_user_string()
        kinds = {k for k in spec.kinds if k not in ("duckdb", "postgres", "python")} | {dialect}
        if name in PLATFORM_ASSETS:
            kinds |= providers
        spec = spec.replace_attributes(kinds=kinds)
        table = TABLES.get(name)
        if table is None:
            return spec
        schema = dg.TableSchema(columns=[dg.TableColumn(c.name, c.type, description=c.comment) for c in tables[table]])
        description = spec.description or ""
        if table != name:
            description += f" The asset {name} is the table `{table}`."
        return spec.merge_attributes(metadata={"dagster/table_name": table, "dagster/column_schema": schema}) \
            .replace_attributes(description=description)

    return apply


def build_definitions(
    clouds: list[str] | None = None,
    resources: dict[str, Any] | None = None,
    *,
    config_path: str | None = None,
    database: str | None = None,
) -> dg.Definitions:
    """The code location for ``clouds`` (default: the config file's), with production or given resources."""
    store = (resources or {}).get("store")
    if config_path is None and database is None and isinstance(store, TallyStore):
        config_path, database = store.config_path, store.database  # describe what the given store points at
    config = load_config(config_path, database=database)
    if clouds is None:
        clouds = sorted(config.clouds)
    providers = {c.provider for c in config.clouds.values()} or {"openstack"}
    # built from the cloud list, so a function rather than module-level objects; its assets get the
    # same catalog policy, and resources are bound once, here, so tests and the demo can pass theirs
    recon = reconciliation.reconciliation_defs(clouds, cloud_partitions(clouds))
    policy = catalog_policy(dialect_of(config.database), providers)
    core = dg.Definitions(
        assets=dg.map_asset_specs(policy, [
            ingest.raw_event_batches, ingest.event_log, ingest.dead_letter,
            projection.resource_projection,
            usage.usage_daily,
            ledger.ledger_audit, ledger.delta_posting_cycle,
        ]),
        asset_checks=alerts.alert_checks,
        jobs=[ingest.landing_job, usage.usage_daily_job, ledger.posting_job],
        schedules=[usage.usage_daily_schedule, ledger.posting_schedule, retention.dead_letter_retention_schedule],
        sensors=[ingest.landing_files_sensor, ingest.api_writes, *alerts.alert_sensors, automation.automation_sensor],
        resources=resources or default_resources(config_path, database),
    )
    # (Definitions.map_asset_specs would do this too, but is a preview API in dagster 1.13)
    recon = dg.Definitions(assets=dg.map_asset_specs(policy, list(recon.assets or [])), jobs=recon.jobs,
                           schedules=recon.schedules, sensors=recon.sensors)
    return dg.Definitions.merge(core, recon)


@dg.definitions
def defs() -> dg.Definitions:
    """The code location, built when Dagster loads it (not when this module is imported): the config
    file is read then, and a test importing ``build_definitions`` reads none."""
    return build_definitions(
        config_path=os.environ.get("TALLY_CONFIG") or None,
        database=os.environ.get("TALLY_DATABASE") or None,
    )
