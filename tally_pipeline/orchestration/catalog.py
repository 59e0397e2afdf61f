"""The catalog policy, applied to every asset of the code location: kinds name the configured database
on the assets that are tables of it (and the clouds' providers on the syncs), each table-backed asset
carries its table name and column schema, every asset its owner, and the assets a schedule keeps fresh
a freshness policy that says how fresh.

Kinds are declared here only: an asset's own definition names just what else it is (``json`` for the
landing files), never the database, which depends on the config. An asset that is no table
(``raw_event_batches``: files; ``ledger_audit``: a verification) carries no database kind."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import dagster as dg

# asset -> the table it is (the catalog's table name and column schema come from the migrations)
TABLES = {
    "event_log": "events", "cloud_activity": "cloud_activity", "dead_letter": "rejected_events",
    "current_resources": "current_resources", "resource_intervals": "resource_intervals",
    "projection_state": "projection_state", "sync_runs": "sync_runs", "sync_deferrals": "sync_deferrals",
    "usage_daily": "usage_daily", "ledger_postings": "ledger_postings", "usage_checkpoints": "usage_checkpoints",
    "ledger_cycles": "ledger_cycles", "ledger_skips": "ledger_skips", "usage_statements": "usage_statements",
}
PLATFORM_ASSETS = ("sync_runs", "sync_deferrals")  # they read the clouds' platform APIs
#: Who answers for every asset (the catalog's Owner column): change it to your team's name.
OWNERS = ("team:tally-pipeline",)
#: What the schedules promise, as freshness policies: fail past the window, warn past half of it.
#: sync_runs: a sync per cloud every 10 minutes, stale after 30 (the sync_stale alert's default);
#: the posting cycle hourly at :15; usage_daily nightly at 00:30 for the day that ended.
FRESHNESS = {
    "sync_runs": timedelta(minutes=30), "sync_deferrals": timedelta(minutes=30),
    "ledger_postings": timedelta(hours=2), "usage_checkpoints": timedelta(hours=2), "ledger_cycles": timedelta(hours=2),
    "usage_daily": timedelta(hours=26),
}


def dialect_of(database: str) -> str:
    return "duckdb" if database.startswith("duckdb://") else "postgres"


def catalog_policy(dialect: str, providers: set[str]) -> Callable[[dg.AssetSpec], dg.AssetSpec]:
    from tally_pipeline.store.catalog import column_descriptions, table_columns

    tables = table_columns(dialect)
    described = column_descriptions()

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        name = spec.key.to_user_string()
        table = TABLES.get(name)
        # a table's kind is its database; an asset that is no table keeps what it declares (json), else it
        # is a computation (ledger_audit: a verification): python
        kinds = {k for k in spec.kinds if k not in ("duckdb", "postgres", "python")}
        kinds = kinds | {dialect} if table else (kinds or {"python"})
        if name in PLATFORM_ASSETS:
            kinds |= providers
        spec = spec.replace_attributes(kinds=kinds, owners=list(OWNERS))
        if name in FRESHNESS:
            window = FRESHNESS[name]
            spec = spec.replace_attributes(freshness_policy=dg.FreshnessPolicy.time_window(
                fail_window=window, warn_window=window / 2))
        if table is None:
            return spec
        about = described.get(table, {})
        schema = dg.TableSchema(columns=[dg.TableColumn(c.name, c.type, description=about.get(c.name) or c.comment)
                                         for c in tables[table]])
        description = spec.description or ""
        if table != name:
            description += f" The asset {name} is the table `{table}`."
        return spec.merge_attributes(metadata={"dagster/table_name": table, "dagster/column_schema": schema}) \
            .replace_attributes(description=description)

    return apply


def column_reference() -> str:
    """The data dictionary's "Every column" section: each asset table's columns and descriptions, as the
    catalog shows them (generated, so the two cannot drift)."""
    from tally_pipeline.store.catalog import column_descriptions

    lines = []
    for table, columns in column_descriptions().items():
        assets = [a for a, t in TABLES.items() if t == table]
        lines += ["", f"### `{table}`" + (f" (asset `{assets[0]}`)" if assets and assets[0] != table else ""), "",
                  "| column | meaning |", "|---|---|"]
        lines += [f"| `{name}` | {text} |" for name, text in columns.items()]
    return "\n".join(lines[1:]) + "\n"
