"""The tables' columns as the migrations create them: what the Dagster catalog shows for each asset.

The numbered migrations are the schema's one source, ``columns.yaml`` the descriptions' (the data
dictionary's "Every column" section is generated from it); reading both here keeps the catalog's
column schema from drifting away from the database or the docs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tally_pipeline.store.migrations import migrations_for

_CREATE = re.compile(r"CREATE TABLE(?: IF NOT EXISTS)?\s+(\w+)\s*\((.*?)\n\)[^;]*;", re.S | re.I)
_ADD = re.compile(r"ALTER TABLE\s+(\w+)\s+ADD COLUMN(?: IF NOT EXISTS)?\s+(\w+)\s+([^,;\n]+?)\s*(?:--\s*(.*))?;", re.I)
_DROP = re.compile(r"ALTER TABLE\s+(\w+)\s+DROP COLUMN(?: IF EXISTS)?\s+(\w+)", re.I)
_DROP_TABLE = re.compile(r"DROP TABLE(?: IF EXISTS)?\s+(\w+)", re.I)
_RENAME = re.compile(r"ALTER TABLE\s+(\w+)\s+RENAME TO\s+(\w+)", re.I)
_CONSTRAINT = ("PRIMARY", "UNIQUE", "CHECK", "FOREIGN", "CONSTRAINT")
_TYPE_END = re.compile(r"\s+(NOT NULL|NULL|PRIMARY KEY|DEFAULT|CHECK|REFERENCES|UNIQUE|GENERATED)\b.*", re.I | re.S)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    comment: str | None = None


def _columns(body: str) -> list[Column]:
    columns = []
    for raw in body.splitlines():
        line, _, comment = raw.partition("--")
        line = line.strip().rstrip(",")
        if not line or line.split()[0].upper() in _CONSTRAINT:
            continue
        name, _, rest = line.partition(" ")
        kind = _TYPE_END.sub("", rest.strip()).strip()
        columns.append(Column(name.strip('"'), kind or "unknown", comment.strip() or None))
    return columns


@cache
def column_descriptions() -> dict[str, dict[str, str]]:
    """Every asset table's column descriptions, from their one source, ``columns.yaml`` beside this module
    (docs/data-dictionary.md's "Every column" section is generated from it)."""
    import yaml

    loaded: dict[str, dict[str, str]] = yaml.safe_load(Path(__file__).with_name("columns.yaml").read_text(encoding="utf-8"))
    return loaded


@cache
def table_columns(dialect: str) -> dict[str, tuple[Column, ...]]:
    """Each table the migrations of ``dialect`` leave, with its columns in order."""
    tables: dict[str, list[Column]] = {}
    for migration in migrations_for(dialect):
        # In statement order: a migration may build a table under a new name, drop the old one and
        # rename the new one into its place (DuckDB cannot change a primary key in place).
        steps = [(m.start(), "create", m.groups()) for m in _CREATE.finditer(migration.sql)]
        steps += [(m.start(), "add", m.groups()) for m in _ADD.finditer(migration.sql)]
        steps += [(m.start(), "drop_column", m.groups()) for m in _DROP.finditer(migration.sql)]
        steps += [(m.start(), "drop_table", m.groups()) for m in _DROP_TABLE.finditer(migration.sql)]
        steps += [(m.start(), "rename", m.groups()) for m in _RENAME.finditer(migration.sql)]
        for _, kind, groups in sorted(steps, key=lambda step: step[0]):
            if kind == "create":
                tables[groups[0]] = _columns(groups[1])
            elif kind == "add":
                table, column, type_, comment = groups
                tables.setdefault(table, []).append(Column(column, type_.strip(), (comment or "").strip() or None))
            elif kind == "drop_column":
                tables[groups[0]] = [c for c in tables.get(groups[0], []) if c.name != groups[1]]
            elif kind == "drop_table":
                tables.pop(groups[0], None)
            else:
                tables[groups[1]] = tables.pop(groups[0], [])
    return {t: tuple(cols) for t, cols in tables.items()}
