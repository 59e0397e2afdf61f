"""Usage as a tenant or a billing system asks for it (``GET /v1/usage``): the ledger's postings summed
per entity, period and account, and, on request, what the next posting cycle would add, marked
provisional.

Posted amounts are final; a posting is dated at its clamp (the cycle counted usage through that
instant). Pending amounts are what a cycle at this instant would post (``ledger.pending``: the
poster's rule), dated at this instant's clamp, ``as_of``. Both are read in one snapshot, so a
cycle committing meanwhile is counted once: either posted or pending. ``aged_out`` is its own
account in either, never folded into ``usage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tally_pipeline.core.ledger import CycleWindow, EntityKey
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.usage import to_micro, to_units
from tally_pipeline.services import projection
from tally_pipeline.services.ledger.pending import pending_usage
from tally_pipeline.store import ledger_reads
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.ledger_reads import Group, Scope

GROUPS: tuple[Group, ...] = ("none", "day", "month")

#: A row's place in the answer's order: cloud, project, meter, period, account, provisional (0/1).
RowKey = tuple[str, str, str, str, str, int]


@dataclass(frozen=True, slots=True)
class UsageRow:
    cloud: str
    project_id: str
    meter: str
    period: str  # "YYYY-MM-DD", "YYYY-MM", or "" when not grouped
    account: str
    unit: str
    micro: int
    provisional: bool
    posted_to: datetime | None = None  # a provisional row's entity: its checkpoint's clamp

    @property
    def key(self) -> RowKey:
        return (self.cloud, self.project_id, self.meter, self.period, self.account, int(self.provisional))


@dataclass(frozen=True, slots=True)
class UsagePage:
    rows: list[UsageRow]
    next_key: RowKey | None
    as_of: datetime  # the clamp: usage is counted through here (pending), posted through posted_to
    posted_to: datetime | None  # the latest clamp an entity in scope is posted through


def period_of(instant: datetime, group: Group) -> str:
    """The period an instant falls in, as ``UsageSQL.period`` writes it (UTC)."""
    if group == "none":
        return ""
    return instant.strftime("%Y-%m-%d" if group == "day" else "%Y-%m")


def usage_page(
    store: Store,
    registry: SizeSchemaRegistry,
    *,
    now: datetime,
    ingest_lag: timedelta | float,
    window_days: int,
    scope: Scope,
    group: Group = "none",
    start: datetime | None = None,
    end: datetime | None = None,
    include_pending: bool = False,
    after: RowKey | None = None,
    limit: int = 100,
    refresh: bool = True,
) -> UsagePage:
    """One page of usage in scope, ``start <= date < end``, after the row ``after``.

    With pending usage, the events stored so far are folded first unless ``refresh`` is False
    (the live balance's hot path, which reads the projection as last folded)."""
    window = CycleWindow.at(now, ingest_lag=ingest_lag, window_days=window_days)
    pending_wanted = include_pending and (start is None or start <= window.clamp) and (end is None or window.clamp < end)
    if pending_wanted and refresh:
        projection.refresh(store)  # like every reader and the poster: the events stored so far, folded
    meters = registry.meters()
    units = {m.name: m.unit for m in meters}

    def read(uow: UnitOfWork) -> UsagePage:
        sql = store.usage_sql()
        sql.read_snapshot(uow)
        latest = ledger_reads.posted_to(uow, scope)
        groups = ledger_reads.posted_groups(uow, sql, scope, group, start=start, end=end,
                                            after=None if after is None else after[:5], limit=limit + 1)
        rows = [UsageRow(g.cloud, g.project_id, g.meter, g.period, g.account, g.unit, to_micro(g.amount), False)
                for g in groups]
        if pending_wanted:
            # rows are ordered entity first: past the entity of the first posted row beyond this page,
            # no pending row can make it into the page
            beyond = groups[limit] if len(groups) > limit else None
            last = None if beyond is None else EntityKey(beyond.cloud, beyond.project_id, beyond.meter)
            first = None if after is None else EntityKey(*after[:3])
            period = period_of(window.clamp, group)
            for entity in pending_usage(uow, sql, meters, window, scope, first=first, last=last):
                key = entity.key
                for account, micro in entity.delta.amounts():
                    row = UsageRow(key.cloud, key.project_id, key.meter, period, account, units[key.meter], micro,
                                   True, entity.checkpoint.clamp)
                    if after is None or row.key > after:
                        rows.append(row)
        rows.sort(key=lambda r: r.key)
        page = rows[:limit]
        return UsagePage(page, page[-1].key if len(rows) > limit else None, window.clamp, latest)

    return store.run(read)


@dataclass(frozen=True, slots=True)
class Balance:
    """One meter's account of a project this month: posted (final) and pending (provisional), micro-units."""

    meter: str
    account: str
    unit: str
    posted: int
    pending: int

    @property
    def total(self) -> int:
        return self.posted + self.pending


@dataclass(frozen=True, slots=True)
class CurrentUsage:
    cloud: str
    project_id: str
    month_start: datetime  # the UTC month of as_of
    as_of: datetime
    posted_to: datetime | None
    balances: list[Balance]


def month_start(instant: datetime) -> datetime:
    return instant.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def current_usage(
    store: Store,
    registry: SizeSchemaRegistry,
    *,
    now: datetime,
    ingest_lag: timedelta | float,
    window_days: int,
    cloud: str,
    project_id: str,
) -> CurrentUsage:
    """A project's usage this month to now: what is posted since the month began plus what is pending,
    per meter and account, as ``usage_page`` reads them (one snapshot), without folding first: the
    pending part is as of the projection's last fold (every query, the poster and Dagster fold)."""
    as_of = CycleWindow.at(now, ingest_lag=ingest_lag, window_days=window_days).clamp
    start = month_start(as_of)
    # group "none" over [month start, …): one row per meter, account and posted/pending, at most
    # 2 × 2 × the registered meters, so one page holds them all
    limit = 4 * len(registry.meters())
    page = usage_page(store, registry, now=now, ingest_lag=ingest_lag, window_days=window_days,
                      scope=Scope(frozenset({cloud}), project_id), start=start, include_pending=True,
                      limit=limit, refresh=False)
    assert page.next_key is None  # within the bound above
    sums: dict[tuple[str, str], list[int]] = {}
    units: dict[str, str] = {}
    for row in page.rows:
        units[row.meter] = row.unit
        sums.setdefault((row.meter, row.account), [0, 0])[int(row.provisional)] += row.micro
    balances = [Balance(meter, account, units[meter], posted, pending)
                for (meter, account), (posted, pending) in sorted(sums.items())]
    return CurrentUsage(cloud, project_id, start, page.as_of, page.posted_to, balances)


def quantity(row: UsageRow) -> str:
    """The row's amount in its meter's unit, exact to six decimals."""
    return str(to_units(row.micro))
