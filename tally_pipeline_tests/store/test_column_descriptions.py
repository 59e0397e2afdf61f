"""Every column the catalog shows has a description, from one source that the data dictionary is
generated from: the two cannot drift (issue #29)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import dagster as dg
import pytest

from tally_pipeline.definitions import build_definitions
from tally_pipeline.orchestration.catalog import TABLES, column_reference
from tally_pipeline.store.catalog import column_descriptions, table_columns

DICTIONARY = Path(__file__).parents[2] / "docs" / "data-dictionary.md"
START, END = "<!-- columns:start (generated from tally_pipeline/store/columns.yaml) -->", "<!-- columns:end -->"


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_every_asset_table_column_is_described_and_nothing_else(dialect) -> None:
    described = column_descriptions()
    for table in set(TABLES.values()):
        columns = {c.name for c in table_columns(dialect)[table]}
        missing = columns - set(described.get(table, {}))
        assert not missing, (table, missing)
    every = {t: {c.name for d in ("duckdb", "postgres") for c in table_columns(d)[t]} for t in set(TABLES.values())}
    for table, columns in described.items():
        assert set(columns) <= every[table], (table, set(columns) - every[table])  # no stale description


def test_the_catalog_shows_a_description_on_every_column(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'x.duckdb'}\n")
    defs = build_definitions(["c1"], config_path=str(config))
    graph = defs.resolve_asset_graph()
    shown = 0
    for asset in TABLES:
        schema = graph.get(dg.AssetKey(asset)).metadata["dagster/column_schema"]
        for column in schema.columns:
            assert column.description, (asset, column.name)
            shown += 1
    assert shown >= 120


def test_the_data_dictionary_lists_every_column_as_the_catalog_does() -> None:
    text = DICTIONARY.read_text(encoding="utf-8")
    generated = f"{START}\n{column_reference()}{END}"
    if os.environ.get("TALLY_UPDATE_DOCS") == "1":
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: generated, text, flags=re.S)
        DICTIONARY.write_text(text, encoding="utf-8")
    assert generated in text, "regenerate: TALLY_UPDATE_DOCS=1 pytest " + __file__
