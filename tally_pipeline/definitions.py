"""The Dagster code location, built explicitly: the definitions under ``tally_pipeline/defs`` found by
discovery, then the parts the config shapes (the per-cloud reconciliation, the daily partitions that
start at ``first_day``), then the resources.

``dagster dev -w workspace.yaml`` (or ``dg dev``) loads ``defs``. The clouds to reconcile come from
the tally config file named by ``TALLY_CONFIG``; ``TALLY_DATABASE`` overrides its database.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg

from tally_pipeline.config import ConfigError
from tally_pipeline.defs.ingest.batches import raw_event_batches_asset
from tally_pipeline.defs.ledger.usage_audit import usage_audit_defs
from tally_pipeline.defs.reconciliation.per_cloud import reconciliation_defs
from tally_pipeline.defs.statements.assets import statements_defs
from tally_pipeline.defs.usage.assets import usage_daily_asset
from tally_pipeline.orchestration import location
from tally_pipeline.orchestration.catalog import catalog_policy, dialect_of
from tally_pipeline.orchestration.partitions import daily_partitions, monthly_partitions
from tally_pipeline.orchestration.resources import TallyStore, default_resources, environment_resources

# The package holds dg.toml (shipped with it), so discovery finds the project in an installed copy too.
PROJECT = Path(__file__).parent

T = TypeVar("T")


def _unique(found: Iterable[T] | None) -> list[T]:
    # Discovery collects every definition a module holds, imported ones too (a schedule's module
    # holds its job): each object once, in order.
    return list({id(obj): obj for obj in found or []}.values())


def configured_definitions(described: location.Location) -> dg.Definitions:
    """What the config shapes: the reconciliation of each cloud, the daily partitions from ``first_day``, and
    the monthly statements from its month."""
    days = daily_partitions(described.config)
    providers = {name: entry.provider for name, entry in described.config.clouds.items()}
    return dg.Definitions.merge(
        reconciliation_defs(described.cloud_names()),
        usage_audit_defs(described.cloud_names(), providers),
        dg.Definitions(assets=[raw_event_batches_asset(days), usage_daily_asset(days)]),
        statements_defs(monthly_partitions(described.config)),
    )


def location_resources(described: location.Location) -> dict[str, Any]:
    """The production resources: read from the environment where they run, unless the location names its config."""
    if described.from_environment:
        return environment_resources()
    return default_resources(described.config_path, described.database)


def build_definitions(
    clouds: list[str] | None = None,
    resources: Mapping[str, Any] | None = None,
    *,
    config_path: str | None = None,
    database: str | None = None,
) -> dg.Definitions:
    """The code location for ``clouds`` (default: the config file's), with production or given resources.

    ``config_path``/``database`` name the config the location describes (default: the given store's,
    else the environment's); the catalog policy is applied to every asset.
    """
    store = (resources or {}).get("store")
    if config_path is None and database is None and isinstance(store, TallyStore):
        config_path, database = store.config_path, store.database  # describe what the given store points at
    if config_path is None and database is None and clouds is None:
        described = location.Location.environment()
    else:
        described = location.Location(config_path, database, tuple(clouds) if clouds is not None else None)
    config = described.config  # read (and validated) first: a file that cannot load fails here, with its reason
    found = dg.Definitions.merge(dg.load_from_defs_folder(path_within_project=PROJECT),
                                 configured_definitions(described))
    providers = {c.provider for c in config.clouds.values()} or {"openstack"}
    policy = catalog_policy(dialect_of(config.database), set(providers))
    assets: list[Any] = _unique(found.assets)
    return dg.Definitions(
        # (Definitions.map_asset_specs would do this too, but is a preview API in dagster 1.13)
        # code references: each asset's source file and line, shown in the catalog
        assets=dg.with_source_code_references(dg.map_asset_specs(policy, assets)),
        asset_checks=_unique(found.asset_checks),
        jobs=_unique(found.jobs),
        schedules=_unique(found.schedules),
        sensors=_unique(found.sensors),
        resources=resources or location_resources(described),
        # One process per run, not one more per step: a run's steps that write the database go one at a
        # time anyway (the tally_db pool), and a step process re-imports Dagster and the code location,
        # which was most of a run's time (docs/operations.md, "Why a run waits").
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The code location, built when Dagster loads it (not when this module is imported): the config
    file is read then, and a test importing ``build_definitions`` reads none.

    A config that cannot load at all (bad YAML, a bad database URL) fails the location: its reason is
    printed first, on one line, before Dagster's trace (a bad *cloud* entry does not fail it: the cloud is
    set aside with its reason, see orchestration/location.py)."""
    try:
        return build_definitions()
    except ConfigError as exc:
        print(f"tally: the code location cannot load: {exc}", file=sys.stderr, flush=True)
        raise
