"""The meter arithmetic of ``core.usage`` in SQL, and row sets passed to a statement: one subclass per dialect.

Every statement that computes usage (the poster, verification, usage_daily) reads intervals in
a subquery ``x`` with ``interval_columns`` and sums ``usage(through)`` over it: one definition of
the rule per dialect (``duckdb.usage_sql``, ``postgres.usage_sql``), held equal to the Python one
by tests. Times are compared as integer microseconds since the epoch. ``Store.usage_sql()`` hands
out the store's own.

Row sets (entity keys, postings to insert) go to Postgres as one JSON parameter unpacked in the
statement, and to DuckDB as registered Arrow tables: one statement either way, no per-row trips.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from tally_pipeline.core.registry import Meter, RegistryError
from tally_pipeline.store.base import Dialect, UnitOfWork

if TYPE_CHECKING:
    from tally_pipeline.store.projection_tables import Key

#: Column kinds a row set may hold. ``micro`` is exact micro-units as decimal digits: Python ints
#: of any size, cheap to send (Decimal is not).
RowKind = Literal["text", "bigint", "timestamptz", "micro", "date"]


@dataclass(frozen=True)
class Fragment:
    """A piece of SQL and the parameters its ``%s`` placeholders take, in order."""

    sql: str
    params: tuple[Any, ...] = ()


class UsageSQL(abc.ABC):
    """SQL fragments for one dialect: what both share here, what differs in the subclasses."""

    dialect: ClassVar[Dialect]
    #: Whether a posting batch's delta can be computed in the database (``store.ledger_delta``).
    computes_deltas: ClassVar[bool] = False

    # -- instants ---------------------------------------------------------------------------

    @abc.abstractmethod
    def us(self, column: str) -> str:
        """Microseconds since the epoch of a timestamptz column, exactly."""

    # -- the meter rule ---------------------------------------------------------------------

    @abc.abstractmethod
    def meter_value(self) -> str:
        """The size field of interval ``i`` meter ``m`` multiplies by; NULL when it is not usable."""

    @abc.abstractmethod
    def field_problem(self, x: str) -> str:
        """What is wrong with interval row ``x``'s size (its metered field, or the size itself)."""

    def bad_value(self, x: str = "x") -> str:
        """Why interval row ``x`` has no usable value (evaluate only where ``x.v`` IS NULL)."""
        return f"{x}.resource_type || '/' || {x}.resource_id || ': ' || {self.field_problem(x)}"

    @abc.abstractmethod
    def usage(self, through: str, x: str = "x") -> str:
        """Micro-units interval row ``x`` used through ``through`` (µs), truncated per interval."""

    @staticmethod
    def span(through: str, x: str) -> str:
        """The µs of interval row ``x`` that lie before ``through``."""
        return f"greatest(0, least(coalesce({x}.e, {through}), {through}) - {x}.s)"

    @staticmethod
    def unbilled() -> str:
        """Whether meter ``m`` does not bill interval ``i``'s platform status (``Meter.bills``):
        ``m.unbilled`` is the statuses as one comma-joined list, commas around (NULL: none)."""
        return ("(m.unbilled IS NOT NULL AND i.platform_status IS NOT NULL AND strpos(i.platform_status, ',') = 0"
                " AND strpos(m.unbilled, ',' || i.platform_status || ',') > 0)")

    def interval_columns(self) -> str:
        """The columns an interval row carries for ``usage`` and ``bad_value``, from interval ``i``
        and meter ``m``: value ``v`` (0 in a status the meter does not bill: its size is not read),
        start ``s`` and end ``e`` in µs, ``d`` = 3600 × divisor."""
        return (
            f"CASE WHEN {self.unbilled()} THEN 0 ELSE {self.meter_value()} END AS v, "
            f"{self.us('i.start_at')} AS s, {self.us('i.end_at')} AS e,"
            " 3600 * m.divisor AS d, i.size, m.per, m.path, i.resource_type, i.resource_id"
        )

    # -- reading the ledger ---------------------------------------------------------------------

    @abc.abstractmethod
    def period(self, column: str, group: Literal["day", "month"]) -> str:
        """The UTC day (``YYYY-MM-DD``) or month (``YYYY-MM``) of a timestamptz column, as text."""

    def read_snapshot(self, uow: UnitOfWork) -> None:  # noqa: B027 - a DuckDB transaction is one snapshot
        """Make this transaction's statements read one snapshot (call it first; the transaction only reads)."""

    def binary(self, column: str) -> str:
        """A text column compared and ordered byte by byte, as Python orders ``str`` (DuckDB's default)."""
        return column

    def bigint(self, value: int) -> Fragment:
        """An integer parameter typed as BIGINT (µs instants)."""
        return Fragment("CAST(%s AS BIGINT)", (value,))

    @abc.abstractmethod
    def micro_to_amount(self, expr: str) -> str:
        """Exact micro-units (an integer, or its digits as text) → the meter's unit with six decimals.

        A product, not a division: Postgres rounds a quotient to a scale of its choosing."""

    @abc.abstractmethod
    def amount_to_micro(self, expr: str) -> str:
        """An amount in the meter's unit → exact micro-units."""

    # -- relations ----------------------------------------------------------------------------

    def meters(self, meters: Sequence[Meter]) -> Fragment:
        """The registered meters as relation ``m(resource_type, meter, per, path, divisor, unit, unbilled)``."""
        if not meters:
            raise RegistryError("no meters are registered, so there is no usage to compute: give at least one "
                                "type a `meters` entry in its schema (a file in schemas_dir replaces the packaged "
                                "type of its resource_type)")
        row = ("(CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS TEXT), CAST(%s AS BIGINT), "
               "CAST(%s AS TEXT), CAST(%s AS TEXT))")
        params: list[Any] = []
        for meter in meters:
            path = None if meter.per is None else '$."' + meter.per.replace('"', '\\"') + '"'
            unbilled = "," + ",".join(sorted(meter.unbilled_statuses)) + "," if meter.unbilled_statuses else None
            params += [meter.resource_type, meter.name, meter.per, path, meter.divisor, meter.unit, unbilled]
        values = ", ".join([row] * len(meters))
        return Fragment(f"(VALUES {values}) AS m(resource_type, meter, per, path, divisor, unit, unbilled)",
                        tuple(params))

    @abc.abstractmethod
    def rows(
        self,
        uow: UnitOfWork,
        stack: ExitStack,
        alias: str,
        columns: Sequence[tuple[str, RowKind]],
        data: Sequence[Sequence[Any]],
    ) -> Fragment:
        """A row set as relation ``alias(columns…)``: ``columns`` are (name, kind), ``data`` one list per column.

        Anything the relation needs beyond the statement is released when ``stack`` closes.
        """

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

    def refresh_statistics(self, uow: UnitOfWork) -> None:  # noqa: B027 - DuckDB keeps its own
        """Let the planner see the checkpoints table as it is now."""

    def plan_per_batch(self, uow: UnitOfWork) -> None:  # noqa: B027 - DuckDB plans every statement
        """Plan this transaction's statements for their actual parameters."""

    def scan_in_parallel(self, uow: UnitOfWork) -> None:  # noqa: B027 - DuckDB spreads a scan on its own
        """Let this transaction's next statement, a scan of whole tables, use more than one core."""

    def lock_rows(self) -> str:
        """Row locks on the checkpoints a statement reads (none by default)."""
        return ""

    def pin_projection(self, uow: UnitOfWork) -> None:  # noqa: B027 - one process owns a DuckDB file
        """Hold the projection still until this transaction ends (a refresh waits for it)."""

    @abc.abstractmethod
    def histories(self, uow: UnitOfWork, keys: Sequence[Key]) -> Iterator[tuple[Any, ...]]:
        """The resources' whole histories as fold rows, grouped by resource (the projection's own read)."""


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
