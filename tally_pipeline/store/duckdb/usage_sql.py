"""The usage SQL in DuckDB's dialect: HUGEINT arithmetic, JSON paths, row sets as registered Arrow tables."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any, Literal

import pyarrow as pa

from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.projection_tables import Key
from tally_pipeline.store.usage_sql import Fragment, RowKind, UsageSQL

_ARROW: dict[RowKind, pa.DataType] = {
    "text": pa.string(),
    "bigint": pa.int64(),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "micro": pa.string(),
    "date": pa.date32(),
}

_STRFTIME = {"day": "%Y-%m-%d", "month": "%Y-%m"}

_names = itertools.count()


class DuckDBUsageSQL(UsageSQL):
    dialect = "duckdb"

    def us(self, column: str) -> str:
        return f"epoch_us({column})"

    def meter_value(self) -> str:
        return (
            "CASE WHEN m.per IS NULL THEN 1::HUGEINT"
            " WHEN json_type(i.size) <> 'OBJECT' THEN NULL"
            " WHEN coalesce(json_type(i.size, m.path), 'NULL') = 'NULL' THEN 0::HUGEINT"
            " WHEN json_type(i.size, m.path) IN ('UBIGINT', 'BIGINT')"
            " AND regexp_full_match(json_extract_string(i.size, m.path), '[0-9]{1,18}')"
            " THEN TRY_CAST(json_extract_string(i.size, m.path) AS HUGEINT) END"
        )

    def field_problem(self, x: str) -> str:
        return (
            f"CASE WHEN json_type({x}.size) = 'OBJECT'"
            f" THEN {x}.per || ' = ' || coalesce(CAST(json_extract({x}.size, {x}.path) AS TEXT), 'null')"
            " || ' is not an integer in [0, 10^18)' ELSE 'size is not an object' END"
        )

    def usage(self, through: str, x: str = "x") -> str:
        return f"(({x}.v * {self.span(through, x)}) // {x}.d)"

    def period(self, column: str, group: Literal["day", "month"]) -> str:
        # the store's connections run in UTC (store.py), so the timestamptz formats as a UTC instant
        return f"strftime({column}, '{_STRFTIME[group]}')"

    def micro_to_amount(self, expr: str) -> str:
        return f"CAST(CAST({expr} AS DECIMAL(38,0)) * 0.000001 AS DECIMAL(38,6))"

    def amount_to_micro(self, expr: str) -> str:
        return f"CAST(({expr}) * 1000000 AS HUGEINT)"

    def rows(
        self,
        uow: UnitOfWork,
        stack: ExitStack,
        alias: str,
        columns: Sequence[tuple[str, RowKind]],
        data: Sequence[Sequence[Any]],
    ) -> Fragment:
        """The rows as an Arrow table, registered on the connection until ``stack`` closes."""
        table = pa.table(
            {name: pa.array(list(col), type=_ARROW[kind]) for (name, kind), col in zip(columns, data, strict=True)}
        )
        registered = f"_ledger_{alias}_{next(_names)}"
        con = uow.con  # type: ignore[attr-defined]
        con.register(registered, table)
        stack.callback(con.unregister, registered)
        return Fragment(f"{registered} AS {alias}", ())

    def histories(self, uow: UnitOfWork, keys: Sequence[Key]) -> Iterator[tuple[Any, ...]]:
        from tally_pipeline.store.duckdb.projection import DuckDBProjectionTables

        tables = DuckDBProjectionTables(uow)
        tables.learn_keys(keys)
        yield from tables.histories(keys)
