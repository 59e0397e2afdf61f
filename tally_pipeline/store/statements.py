"""The monthly statements' tables (their one owner): ``usage_statements`` (every version of every line,
appended, never updated) and ``statement_months`` (which months of a cloud are stated), plus what a
month's closing reads in one snapshot: the usage dated in the month, the cloud's ledger and its
reconciliation.

Plain SQL meaning the same in both dialects; the meter rule comes from the backend's ``UsageSQL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from tally_pipeline.core.registry import Meter
from tally_pipeline.core.statements import StatementKey, StatementLine, month_bounds, month_text, parse_month
from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.core.usage import epoch_us, to_micro
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.usage_sql import EVALUATE_ONCE, UsageSQL, compose, p

_LINE = ("SELECT cloud, project_id, meter, month, version, quantity, unit, previous_quantity, stated_at FROM "
         "usage_statements WHERE cloud = %s AND month = %s")


@dataclass(frozen=True, slots=True)
class StatedLine:
    """A stored version: the line and when it was written."""

    line: StatementLine
    stated_at: datetime


@dataclass(frozen=True, slots=True)
class StatedMonth:
    cloud: str
    month: date
    stated_at: datetime
    restated_at: datetime | None
    checked_at: datetime
    versions: int


@dataclass(frozen=True, slots=True)
class MonthUsage:
    """Per entity of the cloud, micro-units dated in the month; entities with unusable intervals apart."""

    micro: dict[StatementKey, int]
    unusable: dict[StatementKey, tuple[int, str]]


def _stated(row: Sequence[Any]) -> StatedLine:
    cloud, project_id, meter, month, version, quantity, unit, previous, stated_at = row
    line = StatementLine(cloud, project_id, meter, parse_month(month), int(version), to_micro(quantity), unit,
                         None if previous is None else to_micro(previous))
    return StatedLine(line, to_utc(stated_at))


def lines(uow: UnitOfWork, cloud: str, month: date, *, project_id: str | None = None,
          latest_only: bool = True) -> list[StatedLine]:
    """The month's lines of a cloud (one project's when given), by project, meter and version; only each
    entity's latest version unless ``latest_only`` is False."""
    sql, params = _LINE, [cloud, month_text(month)]
    if project_id is not None:
        sql += " AND project_id = %s"
        params.append(project_id)
    if latest_only:
        sql += (" AND version = (SELECT max(s.version) FROM usage_statements s WHERE s.cloud = usage_statements.cloud"
                " AND s.month = usage_statements.month AND s.project_id = usage_statements.project_id"
                " AND s.meter = usage_statements.meter)")
    sql += " ORDER BY project_id, meter, version"
    return [_stated(row) for row in uow.fetchall(sql, params)]


def month_record(uow: UnitOfWork, cloud: str, month: date) -> StatedMonth | None:
    rows = uow.fetchall("SELECT stated_at, restated_at, checked_at, versions FROM statement_months "
                        "WHERE cloud = %s AND month = %s", [cloud, month_text(month)])
    if not rows:
        return None
    stated_at, restated_at, checked_at, versions = rows[0]
    return StatedMonth(cloud, month, to_utc(stated_at), None if restated_at is None else to_utc(restated_at),
                       to_utc(checked_at), int(versions))


def write(uow: UnitOfWork, sql: UsageSQL, cloud: str, month: date, new: Sequence[StatementLine], *, at: datetime,
          posted_through: datetime, watermark: int) -> None:
    """Append ``new`` (versions never written before: a version is never rewritten) in one statement,
    and record the month as stated and checked at ``at``."""
    if new:
        with ExitStack() as stack:
            rows = sql.rows(
                uow, stack, "r",
                [("project_id", "text"), ("meter", "text"), ("version", "bigint"), ("quantity", "micro"),
                 ("unit", "text"), ("previous", "micro"), ("difference", "micro")],
                [[n.project_id for n in new], [n.meter for n in new], [n.version for n in new],
                 [str(n.micro) for n in new], [n.unit for n in new],
                 [None if n.previous is None else str(n.previous) for n in new], [str(n.difference) for n in new]],
            )
            statement = compose(
                "INSERT INTO usage_statements (cloud, project_id, meter, month, version, quantity, unit,"
                " previous_quantity, difference, stated_at, posted_through, watermark) SELECT ", p(cloud),
                ", r.project_id, r.meter, ", p(month_text(month)), ", r.version, ", sql.micro_to_amount("r.quantity"),
                ", r.unit, ", sql.micro_to_amount("r.previous"), ", ", sql.micro_to_amount("r.difference"), ", ",
                p(at), ", ", p(posted_through), ", ", p(watermark), " FROM ", rows,
                # a version another closing run wrote meanwhile stays as it was (Postgres: a snapshot that
                # cannot see it fails to serialize, and the unit of work is retried, reading it)
                " ON CONFLICT DO NOTHING",
            )
            uow.execute(statement.sql, statement.params)
    known = month_record(uow, cloud, month)
    if known is None:
        uow.execute("INSERT INTO statement_months (cloud, month, stated_at, restated_at, checked_at, versions)"
                    " VALUES (%s, %s, %s, NULL, %s, %s) ON CONFLICT DO NOTHING", [cloud, month_text(month), at, at, len(new)])
        return
    restated = at if new else known.restated_at
    uow.execute("UPDATE statement_months SET restated_at = %s, checked_at = %s, versions = versions + %s"
                " WHERE cloud = %s AND month = %s", [restated, at, len(new), cloud, month_text(month)])


def usage_in_month(uow: UnitOfWork, sql: UsageSQL, meters: Sequence[Meter], cloud: str, month: date,
                   project_id: str | None = None) -> MonthUsage:
    """Per entity of ``cloud``: usage through the month's end minus usage through its start, each
    interval by the meter rule (the same truncation per interval as the ledger and ``usage_daily``)."""
    start, end = month_bounds(month)
    project = compose() if project_id is None else compose(" AND i.project_id = ", p(project_id))
    statement = compose(
        "SELECT x.cloud, x.project_id, x.meter, sum(",
        sql.usage("x.te"),
        ") - sum(",
        sql.usage("x.ts"),
        "), count(*) - count(x.v), min(CASE WHEN x.v IS NULL THEN ",
        sql.bad_value(),
        " END) FROM (SELECT i.cloud, i.project_id, m.meter, ",
        sql.bigint(epoch_us(end)),
        " AS te, ",
        sql.bigint(epoch_us(start)),
        " AS ts, ",
        sql.interval_columns(),
        " FROM resource_intervals i JOIN ",
        sql.meters(meters),
        " ON m.resource_type = i.resource_type WHERE i.cloud = ",
        p(cloud),
        project,
        " AND i.start_at < ",
        p(end),
        " AND (i.end_at IS NULL OR i.end_at > ",
        p(start),
        ")",
        EVALUATE_ONCE,
        ") x GROUP BY x.cloud, x.project_id, x.meter",
    )
    micro: dict[StatementKey, int] = {}
    unusable: dict[StatementKey, tuple[int, str]] = {}
    for cloud_, project_, meter, used, n_bad, example in uow.fetchall(statement.sql, statement.params):
        key = (cloud_, project_, meter)
        if n_bad:
            unusable[key] = (int(n_bad), str(example))
        if used:
            micro[key] = int(used)
    return MonthUsage(micro, unusable)


def stated_months(uow: UnitOfWork, cloud: str | None = None) -> list[StatedMonth]:
    """Every stated month (of one cloud when given), by cloud and month."""
    sql = "SELECT cloud, month, stated_at, restated_at, checked_at, versions FROM statement_months"
    params: list[str] = []
    if cloud is not None:
        sql += " WHERE cloud = %s"
        params.append(cloud)
    return [StatedMonth(c, parse_month(m), to_utc(s), None if r is None else to_utc(r), to_utc(k), int(v))
            for c, m, s, r, k, v in uow.fetchall(sql + " ORDER BY cloud, month", params)]


def projection_watermark(uow: UnitOfWork) -> int:
    """The projection's watermark in this transaction's snapshot: the history the month's usage is read at."""
    return int(uow.fetchall("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0])


def clouds_with_usage(uow: UnitOfWork) -> list[str]:
    """The clouds a month may be stated for: those with a lifecycle or a ledger checkpoint."""
    return [c for (c,) in uow.fetchall(
        "SELECT cloud FROM resource_intervals UNION SELECT cloud FROM usage_checkpoints ORDER BY 1")]


def statement_metrics(store: Store) -> list[tuple[str, str, int]]:
    """Per cloud: its latest stated month (``YYYY-MM``), and how many statement lines are re-statements."""
    return [(c, m, int(n or 0)) for c, m, n in store.query(
        "SELECT m.cloud, max(m.month), (SELECT count(*) FROM usage_statements s WHERE s.cloud = m.cloud "
        "AND s.version > 1) FROM statement_months m GROUP BY m.cloud ORDER BY m.cloud")]
