"""The usage API's reads of the ledger (``GET /v1/usage``): posted amounts grouped by period, how far
the ledger is posted, and the inputs of the pending deltas (checkpoints and usage totals, for
``services.ledger.pending``, which applies the poster's own rule to them).

Rows come back in one order, byte-wise on every text column (``UsageSQL.binary``), so pages of
posted rows and the pending rows computed in Python merge into one sequence a cursor can walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from tally_pipeline.core.ledger import Checkpoint, CycleWindow, EntityKey, EntityTotals
from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.core.usage import epoch_us
from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.usage_sql import EVALUATE_ONCE, Fragment, UsageSQL, compose, p

Group = Literal["day", "month", "none"]


@dataclass(frozen=True, slots=True)
class Scope:
    """Which entities a reading covers: ``clouds`` None is every cloud; None filters nothing."""

    clouds: frozenset[str] | None = None
    project_id: str | None = None
    meter: str | None = None


@dataclass(frozen=True, slots=True)
class PostedGroup:
    """The sum of one entity's postings to one account over one period ('' when not grouped)."""

    cloud: str
    project_id: str
    meter: str
    period: str
    account: str
    unit: str
    amount: Decimal


def _scope(scope: Scope, cloud: str, project_id: str, meter: str) -> Fragment:
    parts: list[str | Fragment] = []
    if scope.clouds is not None:
        names = sorted(scope.clouds)
        parts.append(Fragment(f" AND {cloud} IN ({', '.join(['%s'] * len(names))})", tuple(names)))
    if scope.project_id is not None:
        parts += [f" AND {project_id} = ", p(scope.project_id)]
    if scope.meter is not None:
        parts += [f" AND {meter} = ", p(scope.meter)]
    return compose(*parts)


def _beyond(names: Sequence[str], bound: Sequence[Any], *, inclusive: bool = False, op: str = ">") -> Fragment:
    """``AND`` the columns ``names`` come after ``bound`` in lexicographic order (``op`` "<": before)."""
    def clause(names: Sequence[str], bound: Sequence[Any]) -> tuple[str, list[Any]]:
        name, rest = names[0], names[1:]
        if not rest:
            return f"{name} {op}{'=' if inclusive else ''} %s", [bound[0]]
        inner, params = clause(rest, bound[1:])
        return f"({name} {op} %s OR ({name} = %s AND {inner}))", [bound[0], bound[0], *params]

    sql, params = clause(names, bound)
    return Fragment(f" AND {sql}", tuple(params))


def posted_to(uow: UnitOfWork, scope: Scope) -> datetime | None:
    """The latest clamp any entity in scope is posted through (None: nothing posted)."""
    statement = compose(
        "SELECT max(c.clamp) FROM usage_checkpoints c WHERE c.clamp IS NOT NULL",
        _scope(scope, "c.cloud", "c.project_id", "c.meter"),
    )
    latest = uow.fetchall(statement.sql, statement.params)[0][0]
    return None if latest is None else to_utc(latest)


def posted_groups(
    uow: UnitOfWork,
    sql: UsageSQL,
    scope: Scope,
    group: Group,
    *,
    start: datetime | None,
    end: datetime | None,
    after: tuple[str, str, str, str, str] | None,
    limit: int,
) -> list[PostedGroup]:
    """Postings with ``start <= clamp < end``, summed per entity, period and account, in key order
    (cloud, project, meter, period, account), the first ``limit`` after ``after``.

    A posting is dated at its clamp: the cycle that posted it counted usage through that instant.
    """
    period = "''" if group == "none" else sql.period("l.clamp", group)
    window: list[str | Fragment] = []
    if start is not None:
        window += [" AND l.clamp >= ", p(start)]
    if end is not None:
        window += [" AND l.clamp < ", p(end)]
    keys = [sql.binary(f"g.{name}") for name in ("cloud", "project_id", "meter", "period", "account")]
    statement = compose(
        f"SELECT g.cloud, g.project_id, g.meter, g.period, g.account, g.unit, g.amount FROM (SELECT l.cloud,"
        f" l.project_id, l.meter, {period} AS period, l.account, max(l.unit) AS unit, sum(l.amount) AS amount"
        " FROM ledger_postings l WHERE TRUE",
        _scope(scope, "l.cloud", "l.project_id", "l.meter"),
        *window,
        f" GROUP BY l.cloud, l.project_id, l.meter, {'' if group == 'none' else period + ', '}l.account) g WHERE TRUE",
        _beyond(keys, after) if after is not None else Fragment(""),
        f" ORDER BY {', '.join(keys)} LIMIT ",
        p(limit),
    )
    return [PostedGroup(*row) for row in uow.fetchall(statement.sql, statement.params)]


def pending_inputs(
    uow: UnitOfWork,
    sql: UsageSQL,
    meters: Fragment,
    window: CycleWindow,
    scope: Scope,
    *,
    first: EntityKey | None,
    last: EntityKey | None,
) -> tuple[dict[EntityKey, Checkpoint], dict[EntityKey, EntityTotals], dict[EntityKey, tuple[int, str]]]:
    """What the poster's rule needs to say what a cycle at ``window`` would post, for the entities in
    scope from ``first`` to ``last`` (both included; None: unbounded): their checkpoints, and their
    totals as ``store.usage_reads.batch_totals`` computes them (usage through the clamp, through the
    checkpoint's split boundary, through the window's boundary), with the entities whose history
    holds an unusable interval apart (how many, one named).

    Unlike a posting batch it writes nothing, so an entity with usage and no checkpoint yet has
    totals and no checkpoint (the caller reads that as never posted).
    """
    def bounds(names: Sequence[str]) -> list[Fragment]:
        out = []
        if first is not None:
            out.append(_beyond(names, first, inclusive=True))
        if last is not None:
            out.append(_beyond(names, last, inclusive=True, op="<"))
        return out

    checkpoint_keys = [sql.binary(f"c.{name}") for name in ("cloud", "project_id", "meter")]
    statement = compose(
        "SELECT c.cloud, c.project_id, c.meter, ",
        sql.amount_to_micro("c.total"),
        ", c.clamp, c.aged_boundary, ",
        sql.amount_to_micro("c.aged_before"),
        ", c.watermark FROM usage_checkpoints c WHERE TRUE",
        _scope(scope, "c.cloud", "c.project_id", "c.meter"),
        *bounds(checkpoint_keys),
    )
    checkpoints = {
        EntityKey(cloud, project_id, meter): Checkpoint(int(total), clamp, boundary, int(before), watermark)
        for cloud, project_id, meter, total, clamp, boundary, before, watermark
        in uow.fetchall(statement.sql, statement.params)
    }

    boundary_us = epoch_us(window.boundary)
    interval_keys = [sql.binary("i.cloud"), sql.binary("i.project_id"), sql.binary("m.meter")]
    statement = compose(
        "SELECT x.cloud, x.project_id, x.meter, sum(",
        sql.usage("x.xc"),
        "), sum(",
        sql.usage("x.b"),
        "), sum(",
        sql.usage("x.xb"),
        "), count(*) - count(x.v), min(CASE WHEN x.v IS NULL THEN ",
        sql.bad_value(),
        " END) FROM (SELECT i.cloud, i.project_id, m.meter, coalesce(",
        sql.us("c.aged_boundary"),
        ", ",
        sql.bigint(boundary_us),
        ") AS b, ",
        sql.bigint(epoch_us(window.clamp)),
        " AS xc, ",
        sql.bigint(boundary_us),
        " AS xb, ",
        sql.interval_columns(),
        " FROM resource_intervals i JOIN ",
        meters,
        " ON m.resource_type = i.resource_type LEFT JOIN usage_checkpoints c ON c.cloud = i.cloud"
        " AND c.project_id = i.project_id AND c.meter = m.meter WHERE i.start_at < ",
        p(window.clamp),
        _scope(scope, "i.cloud", "i.project_id", "m.meter"),
        *bounds(interval_keys),
        EVALUATE_ONCE,
        ") x GROUP BY x.cloud, x.project_id, x.meter",
    )
    totals: dict[EntityKey, EntityTotals] = {}
    bad: dict[EntityKey, tuple[int, str]] = {}
    for cloud, project_id, meter, at_clamp, at_split, at_boundary, n_bad, example in uow.fetchall(
        statement.sql, statement.params
    ):
        key = EntityKey(cloud, project_id, meter)
        if n_bad:
            bad[key] = (int(n_bad), str(example))
        totals[key] = EntityTotals(int(at_clamp or 0), int(at_split or 0), int(at_boundary or 0))
    return checkpoints, totals, bad


def cloud_posted_through(uow: UnitOfWork, cloud: str) -> tuple[datetime | None, int]:
    """How far a cloud's ledger is posted: the earliest clamp of its posted checkpoints (None: none
    posted), and how many of its checkpoints were never posted (clamp NULL)."""
    earliest, never = uow.fetchall(
        "SELECT min(clamp), count(*) - count(clamp) FROM usage_checkpoints WHERE cloud = %s", [cloud])[0]
    return (None if earliest is None else to_utc(earliest)), int(never or 0)
