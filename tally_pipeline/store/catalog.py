"""The tables' columns as the migrations create them: what the Dagster catalog shows for each asset.

The numbered migrations are the schema's one source (docs/data-dictionary.md describes the same
tables); reading them here keeps the catalog's column schema from drifting away from the database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from tally_pipeline.store.migrations import migrations_for

_CREATE = re.compile(r"CREATE TABLE(?: IF NOT EXISTS)?\s+(\w+)\s*\((.*?)\n\)[^;]*;", re.S | re.I)
_ADD = re.compile(r"ALTER TABLE\s+(\w+)\s+ADD COLUMN(?: IF NOT EXISTS)?\s+(\w+)\s+([^,;\n]+?)\s*(?:--\s*(.*))?;", re.I)
_DROP = re.compile(r"ALTER TABLE\s+(\w+)\s+DROP COLUMN(?: IF EXISTS)?\s+(\w+)", re.I)
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
def table_columns(dialect: str) -> dict[str, tuple[Column, ...]]:
    """Each table the migrations of ``dialect`` leave, with its columns in order."""
    tables: dict[str, list[Column]] = {}
    for migration in migrations_for(dialect):
        for name, body in _CREATE.findall(migration.sql):
            tables[name] = _columns(body)
        for table, column, kind, comment in _ADD.findall(migration.sql):
            tables.setdefault(table, []).append(Column(column, kind.strip(), comment.strip() or None))
        for table, column in _DROP.findall(migration.sql):
            tables[table] = [c for c in tables.get(table, []) if c.name != column]
    return {t: tuple(cols) for t, cols in tables.items()}
