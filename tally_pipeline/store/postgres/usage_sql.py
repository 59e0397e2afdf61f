"""The usage SQL in Postgres's dialect: numeric arithmetic, jsonb, row sets as one JSON parameter."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any, Literal

import orjson

from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.projection_tables import Key
from tally_pipeline.store.usage_sql import Fragment, RowKind, UsageSQL

# each kind from the JSON element ``{e}`` (text)
_FROM_JSON: dict[RowKind, str] = {
    "text": "{e}",
    "bigint": "({e})::bigint",
    "timestamptz": "({e})::timestamptz",
    "micro": "{e}",
    "date": "({e})::date",
}


_TO_CHAR = {"day": "YYYY-MM-DD", "month": "YYYY-MM"}


class PostgresUsageSQL(UsageSQL):
    dialect = "postgres"
    computes_deltas = True

    def us(self, column: str) -> str:
        # extract gives a numeric: exact to the microsecond
        return f"(extract(epoch FROM {column}) * 1000000)::bigint"

    def meter_value(self) -> str:
        # A jsonb number is a numeric: an integer in [0, 10^18) is one of scale 0 in that range, the
        # same values as a text match of 1 to 18 digits, without a regular expression per row
        # (measured: 2-3 ms of the 45 a 5,000-entity batch's totals take). The inner CASE casts numbers only.
        value = "(i.size ->> m.per)::numeric"
        return (
            "CASE WHEN m.per IS NULL THEN 1::numeric"
            " WHEN jsonb_typeof(i.size) <> 'object' THEN NULL"
            " WHEN coalesce(jsonb_typeof(i.size -> m.per), 'null') = 'null' THEN 0::numeric"
            f" WHEN jsonb_typeof(i.size -> m.per) = 'number' THEN CASE WHEN scale({value}) = 0 AND {value} >= 0"
            f" AND {value} < 1000000000000000000 THEN {value} END END"
        )

    def field_problem(self, x: str) -> str:
        return (
            f"CASE WHEN jsonb_typeof({x}.size) = 'object'"
            f" THEN {x}.per || ' = ' || coalesce(({x}.size -> {x}.per)::text, 'null')"
            " || ' is not an integer in [0, 10^18)' ELSE 'size is not an object' END"
        )

    def usage(self, through: str, x: str = "x") -> str:
        return f"div({x}.v * {self.span(through, x)}, {x}.d)"

    def period(self, column: str, group: Literal["day", "month"]) -> str:
        return f"to_char({column} AT TIME ZONE 'UTC', '{_TO_CHAR[group]}')"

    def read_snapshot(self, uow: UnitOfWork) -> None:
        # READ COMMITTED gives each statement its own snapshot: a cycle committing between the read
        # of the postings and that of the checkpoints would count its delta twice, or not at all.
        # Not READ ONLY: the late usage's history read stages its keys in a temporary table.
        uow.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def binary(self, column: str) -> str:
        # the database's collation may order "B" after "a"; the API pages in Python's order
        return f'{column} COLLATE "C"'

    def micro_to_amount(self, expr: str) -> str:
        return f"(({expr})::numeric(38,0) * 0.000001)::numeric(38,6)"

    def amount_to_micro(self, expr: str) -> str:
        return f"(({expr}) * 1000000)::numeric(38,0)"

    def rows(
        self,
        uow: UnitOfWork,
        stack: ExitStack,
        alias: str,
        columns: Sequence[tuple[str, RowKind]],
        data: Sequence[Sequence[Any]],
    ) -> Fragment:
        # One JSON text of rows: orjson writes it and Postgres parses it in C, several times
        # faster than psycopg's array dumpers, which are Python, element by element.
        select = ", ".join(
            _FROM_JSON[kind].format(e=f"e->>{i}") + f" AS {name}" for i, (name, kind) in enumerate(columns)
        )
        payload = orjson.dumps(list(zip(*data, strict=True))).decode()
        return Fragment(f"(SELECT {select} FROM json_array_elements(%s::json) AS e) AS {alias}", (payload,))

    def refresh_statistics(self, uow: UnitOfWork) -> None:
        uow.execute("ANALYZE usage_checkpoints")

    def plan_per_batch(self, uow: UnitOfWork) -> None:
        """psycopg prepares a statement run five times; Postgres then may reuse a generic plan, and
        for a key range with unknown bounds that is a scan of every checkpoint, in every batch."""
        uow.execute("SET LOCAL plan_cache_mode = force_custom_plan")

    def scan_in_parallel(self, uow: UnitOfWork) -> None:
        # Postgres weighs starting its parallel workers as dearer than a scan of a few tens of MB; a
        # cycle searching every interval for unopened entities runs before its batches, with the other
        # cores idle (measured: medians of 60-68 ms against 87-131 over 100,000 checkpoints). Tables
        # smaller than min_parallel_table_scan_size are still scanned by one process.
        uow.execute("SET LOCAL parallel_setup_cost = 0")

    def pin_projection(self, uow: UnitOfWork) -> None:
        from tally_pipeline.store.postgres.locks import PROJECTION_LOCK

        uow.execute("SELECT pg_advisory_xact_lock_shared(%s)", (PROJECTION_LOCK,))

    def histories(self, uow: UnitOfWork, keys: Sequence[Key]) -> Iterator[tuple[Any, ...]]:
        from tally_pipeline.store.postgres.projection import PostgresProjectionTables

        yield from PostgresProjectionTables(uow, 0).histories(keys)

    def lock_rows(self) -> str:
        # DuckDB needs none: the whole file is its lock
        return "FOR UPDATE OF c"
