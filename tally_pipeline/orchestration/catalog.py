"""The catalog policy, applied to every asset of the code location: kinds name the configured database
(and the clouds' providers), and each table-backed asset carries its table name and column schema.

Kinds are declared here only: an asset's own definition names just what else it is (``json`` for the
landing files), never the database, which depends on the config."""

from __future__ import annotations

from collections.abc import Callable

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


def dialect_of(database: str) -> str:
    return "duckdb" if database.startswith("duckdb://") else "postgres"


def catalog_policy(dialect: str, providers: set[str]) -> Callable[[dg.AssetSpec], dg.AssetSpec]:
    from tally_pipeline.store.catalog import column_descriptions, table_columns

    tables = table_columns(dialect)
    described = column_descriptions()

    def apply(spec: dg.AssetSpec) -> dg.AssetSpec:
        name = spec.key.to_user_string()
        kinds = {k for k in spec.kinds if k not in ("duckdb", "postgres", "python")} | {dialect}
        if name in PLATFORM_ASSETS:
            kinds |= providers
        spec = spec.replace_attributes(kinds=kinds)
        table = TABLES.get(name)
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
