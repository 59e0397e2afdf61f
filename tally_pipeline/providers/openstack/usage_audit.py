"""The usage audit's rules: tally's instance-hours and vCPU-hours over a window against nova's own usage.

Nova's ``os-simple-tenant-usage`` counts each server from its ``launched_at`` to its ``terminated_at``
(or the window's end), whatever its status, at its current flavor. Tally's side of the comparison is
read from the lifecycles (``resource_intervals``) the ledger posts from, and corrected by what the
ledger really holds:

- per server: the hours of its intervals inside the window, every status counted (``raw``), and the
  same under the meter's own rule (``billed``: a meter's ``unbilled_statuses`` use nothing) and under
  that rule only up to the entity's checkpoint clamp (``posted``: what the ledger has posted of it);
- per project and meter: the ledger's figure is ``posted`` summed over its servers, plus what the
  ledger holds beyond the lifecycles through its checkpoint (``posted − recomputed``: a tampered or
  lost posting, or history corrected after the cycle).

Every difference is split into known explanations (``EXPLAINED_KINDS``) and the rest, which fails
the audit when it exceeds the tolerance. Pure: no I/O; amounts are exact micro-units of the meter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.registry import Meter
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.core.usage import Interval, interval_usage_micro, meter_value, to_micro, to_units

#: The meters the audit compares, each with nova's figure of it.
AUDITED_METERS = ("instance_hours", "vcpu_hours")

#: Differences the audit can explain (they never fail it), and what each means.
EXPLAINED_KINDS: dict[str, str] = {
    "rounding": "nova keeps launched_at/terminated_at to the second: up to rounding_seconds per server",
    "resize_launched_at": "nova's finish_resize resets launched_at: nova leaves out the time before the resize",
    "not_posted": "usage after the latest posting cycle's clamp (ingest_lag): the next posting cycles post it",
    "pending_cycle": "history changed after the latest posting cycle: the next cycle posts the difference",
    "unbilled_status": "the meter does not bill the server's status then (meters.<meter>.unbilled_statuses)",
    "deferral": "reconciliation deferred a correction of the server (sync_deferrals)",
}
#: Differences the audit cannot explain: counted against the tolerance.
UNEXPLAINED_KINDS: dict[str, str] = {
    "only_in_tally": "tally bills a server nova reports no usage for in the window",
    "only_in_nova": "nova reports usage for a server tally does not bill in the window",
    "server_hours": "tally's and nova's hours for the server differ beyond rounding, unexplained",
    "ledger_mismatch": "the entity's postings do not sum to its checkpoint (a posting changed or lost)",
    "unposted": "usage before the latest posting cycle's clamp the entity's checkpoint does not cover (skipped, "
                "or never posted)",
}
KINDS = (*EXPLAINED_KINDS, *UNEXPLAINED_KINDS)


class AuditError(InputError, ValueError):
    """The audit cannot be made (a window that is empty, a usage answer that is not nova's)."""


@dataclass(frozen=True, slots=True)
class NovaServerUsage:
    """One server as nova's usage API reports it over the window."""

    server_id: str
    project_id: str
    hours: Decimal
    vcpus: int
    started_at: datetime | None
    ended_at: datetime | None
    flavor: str = ""


@dataclass(frozen=True, slots=True)
class TallyInterval:
    """One interval of a server's lifecycle, with the project it was billed to."""

    server_id: str
    project_id: str
    interval: Interval
    lifecycle_no: int = 0


@dataclass(frozen=True, slots=True)
class LedgerEntity:
    """What the ledger holds for one (project, meter) of the cloud: the checkpoint's clamp (None: never
    posted), and how far the postings stand from the lifecycles through that clamp: ``mismatch`` (postings
    minus the checkpoint's total) and ``pending`` (the checkpoint's total minus usage recomputed now)."""

    clamp: datetime | None
    mismatch_micro: int = 0
    pending_micro: int = 0


@dataclass(frozen=True)
class AuditSettings:
    tolerance_hours: Decimal = Decimal("1")
    tolerance_ratio: Decimal = Decimal("0.01")
    rounding_seconds: int = 2


@dataclass(frozen=True)
class Difference:
    """One explained or unexplained part of a project's difference (ledger − nova), in the meter's unit."""

    project_id: str
    meter: str
    kind: str
    amount_micro: int
    server_id: str | None = None
    detail: str = ""

    @property
    def explained(self) -> bool:
        return self.kind in EXPLAINED_KINDS

    def to_dict(self) -> dict[str, Any]:
        return {"project_id": self.project_id, "meter": self.meter, "server_id": self.server_id, "kind": self.kind,
                "explained": self.explained, "amount": str(to_units(self.amount_micro)), "detail": self.detail}


@dataclass(frozen=True)
class ProjectMeter:
    """One project's figure of one meter: the ledger's, nova's, and the difference's parts."""

    project_id: str
    meter: str
    ledger_micro: int
    nova_micro: int
    explained_micro: int
    unexplained_micro: int
    tolerance_micro: int

    @property
    def difference_micro(self) -> int:
        return self.ledger_micro - self.nova_micro

    @property
    def passed(self) -> bool:
        return abs(self.unexplained_micro) <= self.tolerance_micro

    def to_dict(self) -> dict[str, Any]:
        return {"project_id": self.project_id, "meter": self.meter, "ledger": str(to_units(self.ledger_micro)),
                "nova": str(to_units(self.nova_micro)), "difference": str(to_units(self.difference_micro)),
                "explained": str(to_units(self.explained_micro)),
                "unexplained": str(to_units(self.unexplained_micro)),
                "tolerance": str(to_units(self.tolerance_micro)), "passed": self.passed}


@dataclass
class AuditResult:
    cloud: str
    window_start: datetime
    window_end: datetime
    projects: list[ProjectMeter] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    servers_nova: int = 0
    servers_tally: int = 0

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.projects)

    @property
    def failing(self) -> list[ProjectMeter]:
        return [p for p in self.projects if not p.passed]

    def unexplained_micro(self, meter: str) -> int:
        return sum(abs(p.unexplained_micro) for p in self.projects if p.meter == meter)

    def total_micro(self, meter: str, side: str) -> int:
        return sum(p.ledger_micro if side == "ledger" else p.nova_micro for p in self.projects if p.meter == meter)

    def by_kind(self) -> dict[str, int]:
        """How many differences of each kind (every kind listed, zeros included)."""
        counts = dict.fromkeys(KINDS, 0)
        for d in self.differences:
            counts[d.kind] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud, "window_start": format_rfc3339(self.window_start),
            "window_end": format_rfc3339(self.window_end), "passed": self.passed,
            "servers": {"nova": self.servers_nova, "tally": self.servers_tally},
            "totals": {m: {"ledger": str(to_units(self.total_micro(m, "ledger"))),
                           "nova": str(to_units(self.total_micro(m, "nova"))),
                           "unexplained": str(to_units(self.unexplained_micro(m)))} for m in AUDITED_METERS},
            "differences_by_kind": self.by_kind(),
            "projects": [p.to_dict() for p in self.projects],
            "differences": [d.to_dict() for d in self.differences],
        }


def nova_hours(seconds: Decimal | float | str) -> Decimal:
    """Nova's hours (a JSON float) as an exact decimal of what it printed."""
    return Decimal(str(seconds))


def _window_micro(meter: Meter, interval: Interval, start: datetime, end: datetime) -> int:
    """The interval's usage of ``meter`` over ``[start, end)``: the difference of the cumulative rule at
    both ends, so windows telescope exactly as ``usage_daily``'s days do."""
    if end <= start:
        return 0
    return interval_usage_micro(meter, interval, end) - interval_usage_micro(meter, interval, start)


def _seconds_micro(meter: Meter, size: Any, seconds: float) -> int:
    """``seconds`` of a server at ``size`` in micro-units of the meter (for allowances)."""
    return int(Decimal(meter_value(meter, size)) * Decimal(seconds) * 1_000_000 / (3600 * meter.divisor))


def audit(
    cloud: str,
    window_start: datetime,
    window_end: datetime,
    *,
    meters: Mapping[str, Meter],
    nova: Sequence[NovaServerUsage],
    tally: Iterable[TallyInterval],
    ledger: Mapping[tuple[str, str], LedgerEntity],
    deferred: Mapping[str, str],
    settings: AuditSettings,
    cycle_clamp: datetime | None = None,
) -> AuditResult:
    """Compare tally with nova per project and server over ``[window_start, window_end)``.

    ``meters``: the registry's ``instance_hours`` and ``vcpu_hours`` (with the configured policy);
    ``ledger``: per (project, meter); ``deferred``: server id → the deferral's reason and detail;
    ``cycle_clamp``: the latest posting cycle's clamp (None: no cycle yet). Usage an entity's checkpoint
    does not cover is ``not_posted`` (explained) after ``cycle_clamp``, where no cycle has reached yet,
    and ``unposted`` (not explained) before it, where the latest cycle should have posted it.
    """
    if window_end <= window_start:
        raise AuditError(f"the window is empty: {format_rfc3339(window_start)} is not before {format_rfc3339(window_end)}")
    missing = [m for m in AUDITED_METERS if m not in meters]
    if missing:
        raise AuditError(f"the registry has no meter {', '.join(missing)}: nothing to compare with nova")
    by_server: dict[str, list[TallyInterval]] = {}
    for ti in tally:
        if ti.interval.start < window_end and (ti.interval.end is None or ti.interval.end > window_start):
            by_server.setdefault(ti.server_id, []).append(ti)
    nova_by_server: dict[str, NovaServerUsage] = {}
    for listed in nova:
        if listed.server_id in nova_by_server:  # nova pages by server: one server once
            raise AuditError(f"nova's usage lists server {listed.server_id} twice")
        nova_by_server[listed.server_id] = listed
    result = AuditResult(cloud, window_start, window_end, servers_nova=len(nova_by_server),
                         servers_tally=len(by_server))
    ledger_sum: dict[tuple[str, str], int] = {}
    nova_sum: dict[tuple[str, str], int] = {}
    explained_sum: dict[tuple[str, str], int] = {}

    def add(target: dict[tuple[str, str], int], key: tuple[str, str], micro: int) -> None:
        target[key] = target.get(key, 0) + micro

    def differ(project: str, meter_name: str, kind: str, micro: int, server: str | None, detail: str) -> None:
        if micro == 0:
            return
        result.differences.append(Difference(project, meter_name, kind, micro, server, detail))
        if kind in EXPLAINED_KINDS:
            add(explained_sum, (project, meter_name), micro)

    for name in AUDITED_METERS:
        meter = meters[name]
        every_status = replace(meter, unbilled_statuses=frozenset())
        for server in sorted(set(by_server) | set(nova_by_server)):
            intervals = by_server.get(server, [])
            n = nova_by_server.get(server)
            project = n.project_id if n is not None else intervals[0].project_id
            nova_micro = 0
            if n is not None:
                nova_micro = to_micro(_six(n.hours * (n.vcpus if meter.per is not None else 1)))
                add(nova_sum, (n.project_id, name), nova_micro)
            raw = 0
            for ti in intervals:
                entity = ledger.get((ti.project_id, name), LedgerEntity(None))
                billed = _window_micro(meter, ti.interval, window_start, window_end)
                raw_part = _window_micro(every_status, ti.interval, window_start, window_end)
                clamp = entity.clamp
                posted = _window_micro(meter, ti.interval, window_start, min(window_end, clamp)) if clamp else 0
                # the latest cycle reached here: before it, what the entity's checkpoint lacks was due
                reached = max(c for c in (clamp, cycle_clamp, window_start) if c is not None)
                due = _window_micro(meter, ti.interval, window_start, min(window_end, reached)) - posted
                add(ledger_sum, (ti.project_id, name), posted)
                raw += raw_part
                differ(ti.project_id, name, "unposted", -due, server,
                       f"the latest cycle's clamp is {_at(cycle_clamp)}, the entity's checkpoint {_at(clamp)}")
                # what no cycle has reached yet, and what the meter does not bill: known, explained
                differ(ti.project_id, name, "not_posted", posted + due - billed, server,
                       f"after the latest posting cycle's clamp {_at(reached)}")
                differ(ti.project_id, name, "unbilled_status", billed - raw_part, server,
                       f"status {ti.interval.platform_status}")
            gap = raw - nova_micro  # tally's lifecycle against nova, every status counted
            if abs(gap) <= len(intervals) + 1:
                # the arithmetic's own precision: tally truncates each interval to the micro-unit, nova's
                # float is rounded to it; the project's figures still show the micro-units
                add(explained_sum, (project, name), gap)
                continue
            if server in deferred:
                differ(project, name, "deferral", gap, server, deferred[server])
                continue
            if n is None:
                differ(project, name, "only_in_tally", gap, server, "nova reports no usage for it in the window")
                continue
            if not intervals:
                differ(project, name, "only_in_nova", gap, server,
                       f"nova: {n.hours} h from {_at(n.started_at)} to {_at(n.ended_at)}")
                continue
            size = intervals[-1].interval.size
            allowance = _seconds_micro(meter, size, settings.rounding_seconds)
            resize = _resize_part(every_status, intervals, n, window_start, window_end, settings.rounding_seconds)
            if resize is not None:
                part, detail = resize
                part = max(0, min(part, gap)) if gap > 0 else 0
                differ(project, name, "resize_launched_at", part, server, detail)
                gap -= part
            if gap == 0:
                continue
            if abs(gap) <= allowance:
                differ(project, name, "rounding", gap, server, f"within {settings.rounding_seconds} s")
            else:
                differ(project, name, "server_hours", gap, server,
                       f"tally {to_units(raw)} vs nova {to_units(nova_micro)} (nova from {_at(n.started_at)} to "
                       f"{_at(n.ended_at)})")
    for (project, name), entity in sorted(ledger.items()):
        if name not in AUDITED_METERS:
            continue
        differ(project, name, "ledger_mismatch", entity.mismatch_micro, None,
               "the postings do not sum to the checkpoint's total")
        differ(project, name, "pending_cycle", entity.pending_micro, None,
               "usage through the clamp changed after the cycle")
        if entity.mismatch_micro or entity.pending_micro:
            add(ledger_sum, (project, name), entity.mismatch_micro + entity.pending_micro)
    keys = sorted(set(ledger_sum) | set(nova_sum) | {(d.project_id, d.meter) for d in result.differences})
    for project, name in keys:
        ledger_micro = ledger_sum.get((project, name), 0)
        nova_micro = nova_sum.get((project, name), 0)
        explained = explained_sum.get((project, name), 0)
        unexplained = ledger_micro - nova_micro - explained
        tolerance = max(to_micro(settings.tolerance_hours), int(settings.tolerance_ratio * abs(nova_micro)))
        result.projects.append(ProjectMeter(project, name, ledger_micro, nova_micro, explained, unexplained, tolerance))
    result.differences.sort(key=lambda d: (d.project_id, d.meter, d.server_id or "", d.kind))
    return result


def _resize_part(meter: Meter, intervals: Sequence[TallyInterval], n: NovaServerUsage, start: datetime,
                 end: datetime, rounding_seconds: int) -> tuple[int, str] | None:
    """Tally's usage of a resized server before nova's (reset) ``launched_at``, when tally's own history
    shows the resize: its lifecycle changed flavor, and nova's start is later than tally's."""
    if n.started_at is None:
        return None
    lifecycle = max(ti.lifecycle_no for ti in intervals)
    mine = [ti for ti in intervals if ti.lifecycle_no == lifecycle]
    flavors: list[str] = []  # in time order, each change once
    for ti in sorted(mine, key=lambda ti: ti.interval.start):
        flavor = _flavor(ti.interval.size)
        if not flavors or flavors[-1] != flavor:
            flavors.append(flavor)
    first = min(ti.interval.start for ti in mine)
    if len(flavors) < 2 or n.started_at <= first + timedelta(seconds=rounding_seconds):
        return None
    cut = min(max(n.started_at, start), end)
    part = sum(_window_micro(meter, ti.interval, start, cut) for ti in mine)
    return part, (f"resized ({' → '.join(flavors)}); nova counts from {_at(n.started_at)}, tally from {_at(first)}")


def _flavor(size: Any) -> str:
    if isinstance(size, Mapping):
        return f"{size.get('flavor_name') or ''}/{size.get('vcpus')}/{size.get('ram_mb')}"
    return repr(size)


def _six(value: Decimal) -> Decimal:
    """Nova's float product to six decimal places (micro-units), half-even."""
    return value.quantize(Decimal("0.000001"))


def _at(value: datetime | None) -> str:
    return format_rfc3339(value) if value is not None else "-"
