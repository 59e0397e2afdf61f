"""The meter arithmetic of ``core.usage`` in SQL, for both dialects, and row sets passed to a statement.

Every statement that computes usage (the poster, verification, usage_daily) reads intervals in
a subquery ``x`` with ``interval_columns`` and sums ``usage(through)`` over it: one definition of
the rule per dialect, held equal to the Python one by tests. Times are compared as integer microseconds since the epoch.

Row sets (entity keys, postings to insert) go to Postgres as one JSON parameter unpacked in the
statement, and to DuckDB as registered Arrow tables: one statement either way, no per-row trips.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from tally_pipeline.core.registry import Meter
from tally_pipeline.store.base import Dialect, UnitOfWork

# column kinds a row set may hold: (Postgres: the JSON element as that type, Arrow type)
_KINDS: dict[str, tuple[str, pa.DataType]] = {
    "text": ("{e}", pa.string()),
    "bigint": ("({e})::bigint", pa.int64()),
    "timestamptz": ("({e})::timestamptz", pa.timestamp("us", tz="UTC")),
    # exact micro-units as decimal digits: Python ints of any size, cheap to send (Decimal is not)
    "micro": ("{e}", pa.string()),
    "date": ("({e})::date", pa.date32()),
}

_names = itertools.count()


@dataclass(frozen=True)
class Fragment:
    """A piece of SQL and the parameters its ``%s`` placeholders take, in order."""

    sql: str
    params: tuple[Any, ...] = ()


class UsageSQL:
    """SQL fragments for one dialect."""

    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        self.pg = dialect == "postgres"

    # -- instants ---------------------------------------------------------------------------

    def us(self, column: str) -> str:
        """Microseconds since the epoch of a timestamptz column (exact: Postgres extracts a numeric)."""
        if self.pg:
            return f"(extract(epoch FROM {column}) * 1000000)::bigint"
        return f"epoch_us({column})"

    # -- the meter rule ---------------------------------------------------------------------

    def meter_value(self) -> str:
        """The size field of interval ``i`` meter ``m`` multiplies by; NULL when it is not usable."""
        if self.pg:
            return (
                "CASE WHEN m.per IS NULL THEN 1::numeric"
                " WHEN jsonb_typeof(i.size) <> 'object' THEN NULL"
                " WHEN coalesce(jsonb_typeof(i.size -> m.per), 'null') = 'null' THEN 0::numeric"
                " WHEN jsonb_typeof(i.size -> m.per) = 'number' AND (i.size ->> m.per) ~ '^[0-9]{1,18}$'"
                " THEN (i.size ->> m.per)::numeric END"
            )
        return (
            "CASE WHEN m.per IS NULL THEN 1::HUGEINT"
            " WHEN json_type(i.size) <> 'OBJECT' THEN NULL"
            " WHEN coalesce(json_type(i.size, m.path), 'NULL') = 'NULL' THEN 0::HUGEINT"
            " WHEN json_type(i.size, m.path) IN ('UBIGINT', 'BIGINT')"
            " AND regexp_full_match(json_extract_string(i.size, m.path), '[0-9]{1,18}')"
            " THEN TRY_CAST(json_extract_string(i.size, m.path) AS HUGEINT) END"
        )

    def bad_value(self, x: str = "x") -> str:
        """Why interval row ``x`` has no usable value (evaluate only where ``x.v`` IS NULL)."""
        if self.pg:
            field = (
                f"CASE WHEN jsonb_typeof({x}.size) = 'object'"
                f" THEN {x}.per || ' = ' || coalesce(({x}.size -> {x}.per)::text, 'null')"
                " || ' is not an integer in [0, 10^18)' ELSE 'size is not an object' END"
            )
        else:
            field = (
                f"CASE WHEN json_type({x}.size) = 'OBJECT'"
                f" THEN {x}.per || ' = ' || coalesce(CAST(json_extract({x}.size, {x}.path) AS TEXT), 'null')"
                " || ' is not an integer in [0, 10^18)' ELSE 'size is not an object' END"
            )
        return f"{x}.resource_type || '/' || {x}.resource_id || ': ' || {field}"

    def usage(self, through: str, x: str = "x") -> str:
        """Micro-units interval row ``x`` used through ``through`` (µs), truncated per interval."""
        span = f"greatest(0, least(coalesce({x}.e, {through}), {through}) - {x}.s)"
        if self.pg:
            return f"div({x}.v * {span}, {x}.d)"
        return f"(({x}.v * {span}) // {x}.d)"

    def interval_columns(self) -> str:
        """The columns an interval row carries for ``usage`` and ``bad_value``, from interval ``i``
        and meter ``m``: value ``v``, start ``s`` and end ``e`` in µs, ``d`` = 3600 × divisor."""
        return (
            f"{self.meter_value()} AS v, {self.us('i.start_at')} AS s, {self.us('i.end_at')} AS e,"
            " 3600 * m.divisor AS d, i.size, m.per, m.path, i.resource_type, i.resource_id"
        )

    def bigint(self, value: int) -> Fragment:
        """An integer parameter typed as BIGINT (µs instants)."""
        return Fragment("CAST(%s AS BIGINT)", (value,))

    def micro_to_amount(self, expr: str) -> str:
        """Exact micro-units (an integer, or its digits as text) → the meter's unit with six decimals.

        A product, not a division: Postgres rounds a quotient to a scale of its choosing."""
        if self.pg:
            return f"(({expr})::numeric(38,0) * 0.000001)::numeric(38,6)"
        return f"CAST(CAST({expr} AS DECIMAL(38,0)) * 0.000001 AS DECIMAL(38,6))"

    def amount_to_micro(self, expr: str) -> str:
        if self.pg:
            return f"(({expr}) * 1000000)::numeric(38,0)"
        return f"CAST(({expr}) * 1000000 AS HUGEINT)"

    # -- relations ----------------------------------------------------------------------------

    def meters(self, meters: Sequence[Meter]) -> Fragment:
        """The registered meters as relation ``m(resource_type, meter, per, path, divisor, unit)``."""
        if not meters:
            raise ValueError("no meters are registered")
        row = "(CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS BIGINT), CAST(%s AS TEXT))"
        params: list[Any] = []
        for meter in meters:
            path = None if meter.per is None else '$."' + meter.per.replace('"', '\\"') + '"'
            params += [meter.resource_type, meter.name, meter.per, path, meter.divisor, meter.unit]
        values = ", ".join([row] * len(meters))
        return Fragment(f"(VALUES {values}) AS m(resource_type, meter, per, path, divisor, unit)", tuple(params))

    def rows(
        self,
        uow: UnitOfWork,
        stack: ExitStack,
        alias: str,
        columns: Sequence[tuple[str, str]],
        data: Sequence[Sequence[Any]],
    ) -> Fragment:
        """A row set as relation ``alias(columns…)``: ``columns`` are (name, kind), ``data`` one list per column.

        On DuckDB the Arrow table stays registered until ``stack`` closes.
        """
        if self.pg:
            # One JSON text of rows: orjson writes it and Postgres parses it in C, several times
            # faster than psycopg's array dumpers, which are Python, element by element.
            select = ", ".join(
                _KINDS[kind][0].format(e=f"e->>{i}") + f" AS {name}" for i, (name, kind) in enumerate(columns)
            )
            payload = orjson.dumps(list(zip(*data, strict=True))).decode()
            return Fragment(f"(SELECT {select} FROM json_array_elements(%s::json) AS e) AS {alias}", (payload,))
        table = pa.table(
            {name: pa.array(list(col), type=_KINDS[kind][1]) for (name, kind), col in zip(columns, data, strict=True)}
        )
        registered = f"_ledger_{alias}_{next(_names)}"
        con = uow.con  # type: ignore[attr-defined]
        con.register(registered, table)
        stack.callback(con.unregister, registered)
        return Fragment(f"{registered} AS {alias}", ())

    def key_range(
        self,
        first: Sequence[str],
        last: Sequence[str],
        alias: str = "c",
        *,
        exact: bool = True,
        columns: Sequence[str] = ("cloud", "project_id", "meter"),
    ) -> Fragment:
        """`` AND`` the key ``columns`` (an entity's, by default) of ``alias`` lie in [first, last].

        Spelled out column by column rather than as a row comparison: a btree narrows its scan by
        a row comparison on the first column only (every checkpoint of a cloud). The bounds on the
        leading columns make the index range tight; the two lexicographic clauses make it exact.
        ``exact=False`` leaves those out, for a statement that joins on the keys anyway: Postgres
        estimates the clauses to match one row and then picks a nested loop over the batch.
        """
        names = [f"{alias}.{name}" for name in columns]
        sql: list[str] = []
        params: list[Any] = []
        for name, low, high in zip(names, first, last, strict=True):
            if low == high:
                sql.append(f" AND {name} = %s")
                params.append(low)
                continue
            sql.append(f" AND {name} >= %s AND {name} <= %s")
            params += [low, high]
            break
        for bound, op in ((first, ">"), (last, "<")) if exact else ():
            clause, clause_params = _lexicographic(names, bound, op)
            sql.append(f" AND {clause}")
            params += clause_params
        return Fragment("".join(sql), tuple(params))

    def refresh_statistics(self, uow: UnitOfWork) -> None:
        """Let the planner see the checkpoints table as it is now (Postgres; DuckDB keeps its own)."""
        if self.pg:
            uow.execute("ANALYZE usage_checkpoints")

    def plan_per_batch(self, uow: UnitOfWork) -> None:
        """Plan this transaction's statements for their actual parameters.

        psycopg prepares a statement run five times; Postgres then may reuse a generic plan, and
        for a key range with unknown bounds that is a scan of every checkpoint, in every batch.
        """
        if self.pg:
            uow.execute("SET LOCAL plan_cache_mode = force_custom_plan")

    def lock_rows(self) -> str:
        """Row locks on the checkpoints a statement reads (DuckDB: the whole file is the lock)."""
        return "FOR UPDATE OF c" if self.pg else ""


def _lexicographic(names: Sequence[str], bound: Sequence[str], op: str) -> tuple[str, list[Any]]:
    """``names`` ≥ ``bound`` (op ">") or ≤ ``bound`` (op "<") in lexicographic order, as plain predicates."""
    name, rest = names[0], names[1:]
    if not rest:
        return f"{name} {op}= %s", [bound[0]]
    inner, inner_params = _lexicographic(rest, bound[1:], op)
    return f"({name} {op} %s OR ({name} = %s AND {inner}))", [bound[0], bound[0], *inner_params]


#: Ends the subquery that reads intervals: without it Postgres inlines the subquery and evaluates
#: the size parsing once per aggregate that uses it (five times a row) instead of once.
EVALUATE_ONCE = " OFFSET 0"


def compose(*parts: str | Fragment) -> Fragment:
    """Join SQL text and fragments in order, collecting their parameters in the same order."""
    sql: list[str] = []
    params: list[Any] = []
    for part in parts:
        if isinstance(part, Fragment):
            sql.append(part.sql)
            params.extend(part.params)
        else:
            sql.append(part)
    return Fragment("".join(sql), tuple(params))


def p(value: Any) -> Fragment:
    """One parameter."""
    return Fragment("%s", (value,))
