"""The alert conditions, as pure functions of what the store says.

Each alert's definition (``core/alert_defs.py``) names its condition here; the Dagster sensors and asset
checks evaluate it, and the Prometheus rule made from the same definition expresses it over ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

#: Where every cloud that is not known (configured, or named in ``alerts.clouds``) is counted: what a
#: writer puts in ``cloud`` is unbounded, and one series or alert candidate per value would be too.
OTHER_CLOUD = "other"


@dataclass(frozen=True)
class AlertSettings:
    events_silent_after: timedelta = timedelta(hours=1)
    events_active_window: timedelta = timedelta(hours=24)
    sync_stale_after: timedelta = timedelta(minutes=30)
    drift_high: float = 0.05
    drift_warmup_syncs: int = 2  # a cloud's first syncs correct what its events missed before tally listened


@dataclass(frozen=True)
class CloudActivity:
    cloud: str
    last_collector_event: datetime | None


@dataclass(frozen=True)
class LastRun:
    cloud: str
    status: str
    poll_time: datetime
    drift: float | None
    error: str | None
    guard_tripped: bool = False
    unconfirmed: int = 0  # deletes by absence the platform did not confirm (still billed)
    skipped: int = 0  # listed items that could not be read (neither billed nor deleted by reconciliation)
    insufficient_scope: int = 0  # types not listed because the credentials cannot see every project
    stuck_transition: int = 0  # resources booked as listed after too long in transition (a guess)
    nth: int | None = None  # how many of the cloud's runs have reconciled something, this one included


@dataclass(frozen=True)
class TypeActivity:
    """When the collector last stored an event of one resource type for one cloud."""

    cloud: str
    resource_type: str
    last_collector_event: datetime


@dataclass(frozen=True)
class LatestCorrections:
    """A cloud's latest reconciled (succeeded or partial) sync: what its listings corrected, per type."""

    cloud: str
    nth: int  # how many of the cloud's syncs have reconciled something, this one included
    poll_time: datetime
    previous_poll_time: datetime | None  # the reconciled sync before it; its corrections date from after it
    corrections: Mapping[str, int]  # resource_type -> resources created, deleted or recovered by the listing


@dataclass(frozen=True)
class UnrecordedFailure:
    """A sync run that failed without recording its sync (the store could not be written when it ran):
    known only to the orchestrator's own run records."""

    cloud: str
    poll_time: datetime  # the instant the run meant to poll at (its tick), else when it started
    reason: str


@dataclass(frozen=True)
class Condition:
    """One alert's state: firing or not, with one line per affected cloud."""

    alert: str
    firing: bool
    clouds: tuple[str, ...]
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)


def fold_unknown(activity: Iterable[CloudActivity], known: Collection[str]) -> list[CloudActivity]:
    """Each known cloud's activity as is, and every other cloud's folded into one ``other`` (its latest event)."""
    kept: list[CloudActivity] = []
    other: datetime | None = None
    any_other = False
    for a in activity:
        if a.cloud in known:
            kept.append(a)
            continue
        any_other = True
        if a.last_collector_event is not None and (other is None or a.last_collector_event > other):
            other = a.last_collector_event
    if any_other:
        kept.append(CloudActivity(OTHER_CLOUD, other))
    return kept


def events_silent(activity: Iterable[CloudActivity], now: datetime, s: AlertSettings,
                  known: Collection[str] | None = None) -> Condition:
    """TallyCloudEventsSilent: a cloud that sent collector events has had none for 1 h, when it is a known
    cloud (configured, or named in ``alerts.clouds``) or had some in the last 24 h.

    With ``known`` given, only known clouds and ``other`` are candidates: ``activity`` is folded with
    ``fold_unknown`` first, so 3,000 cloud names written by one careless collector are one candidate,
    not 3,000. Without it, every cloud is its own (and none is known).
    """
    silent = {}
    for a in (activity if known is None else fold_unknown(activity, known)):
        last = a.last_collector_event
        if last is None or last > now - s.events_silent_after:
            continue
        if (known is not None and a.cloud in known) or now - s.events_active_window < last:
            silent[a.cloud] = last.isoformat()
    message = (
        "collector events stopped: " + ", ".join(f"{c} (last {t})" for c, t in sorted(silent.items()))
        if silent else "every cloud with recent collector events is still receiving them"
    )
    return Condition("TallyCloudEventsSilent", bool(silent), tuple(sorted(silent)), message, silent)


def sync_stale(clouds: Iterable[str], last_success: Mapping[str, datetime], now: datetime, s: AlertSettings) -> Condition:
    """TallySyncStale: a configured cloud without a successful (or partial) sync for too long."""
    stale = {}
    for cloud in clouds:
        last = last_success.get(cloud)
        if last is None or last < now - s.sync_stale_after:
            stale[cloud] = last.isoformat() if last else None
    message = (
        "no recent successful sync: " + ", ".join(f"{c} (last {t or 'never'})" for c, t in sorted(stale.items()))
        if stale else "every configured cloud synced recently"
    )
    return Condition("TallySyncStale", bool(stale), tuple(sorted(stale)), message, stale)


def sync_errors(last_runs: Iterable[LastRun], misconfigured: Mapping[str, str] | None = None,
                unrecorded: Iterable[UnrecordedFailure] = ()) -> Condition:
    """TallySyncErrors: a cloud's latest sync failed, or listed some types only (partial: a listing
    failed, the credentials could not see every project, the mass-delete guard held deletes), or left
    something it could not reconcile or had to guess: deletes the platform did not confirm, items it
    could not read, resources booked after too long in transition. Each changes what is billed.
    A cloud whose config entry is invalid (``misconfigured``: cloud -> reason) cannot sync at all. A sync
    that failed after the cloud's latest recorded one without recording itself (``unrecorded``: the store
    was unreadable then) is the cloud's latest sync: it fires until a later sync is recorded."""
    broken = {c: f"misconfigured: {reason}" for c, reason in (misconfigured or {}).items()}
    last_runs = list(last_runs)
    recorded = {r.cloud: r.poll_time for r in last_runs}
    for failure in sorted(unrecorded, key=lambda f: f.poll_time, reverse=True):  # the latest is the cloud's latest sync
        if failure.cloud not in broken and (failure.cloud not in recorded or failure.poll_time > recorded[failure.cloud]):
            broken[failure.cloud] = f"failed: {failure.reason}"
    for r in last_runs:
        if r.cloud in broken:
            continue
        if r.status in ("failed", "partial"):
            broken[r.cloud] = f"{r.status}: {r.error or 'no detail'}"
        elif r.unconfirmed or r.skipped or r.stuck_transition:
            left = [f"{n} {what}" for n, what in ((r.unconfirmed, "deletes unconfirmed by the platform"),
                                                  (r.skipped, "listed items skipped as unreadable"),
                                                  (r.stuck_transition, "resources booked as stuck in transition"))
                    if n]
            broken[r.cloud] = f"{r.status}, but " + ", ".join(left)
    message = ("latest sync not clean: " + "; ".join(f"{c} {m}" for c, m in sorted(broken.items()))
               if broken else "every cloud's latest sync succeeded")
    return Condition("TallySyncErrors", bool(broken), tuple(sorted(broken)), message, broken)


def drift_high(last_runs: Iterable[LastRun], s: AlertSettings) -> Condition:
    """TallyReconciliationDriftHigh: the latest sync corrected more than a share of live resources,
    or held deletes behind the mass-delete guard.

    A cloud's first ``drift_warmup_syncs`` syncs are not judged on drift (a tripped guard still fires):
    they correct everything its events missed before tally listened, which is no sign of loss now."""
    last_runs = list(last_runs)
    warming = {r.cloud: r.drift for r in last_runs
               if r.nth is not None and r.nth <= s.drift_warmup_syncs and not r.guard_tripped}
    high = {
        r.cloud: {"drift": r.drift, "guard_tripped": r.guard_tripped}
        for r in last_runs
        if r.cloud not in warming and (r.guard_tripped or (r.drift is not None and r.drift > s.drift_high))
    }
    message = (
        "reconciliation drift high: " + ", ".join(
            f"{c} {v['drift']:.1%}" + (" (mass-delete guard held deletes)" if v["guard_tripped"] else "")
            for c, v in sorted(high.items()))
        if high else f"drift within {s.drift_high:.0%} everywhere"
    )
    if warming:
        message += "; warming up (first syncs not judged on drift): " + ", ".join(
            f"{c} {(d or 0.0):.1%}" for c, d in sorted(warming.items()))
    details = {**high, **({"warming_up": {c: d for c, d in sorted(warming.items())}} if warming else {})}
    return Condition("TallyReconciliationDriftHigh", bool(high), tuple(sorted(high)), message, details)


@dataclass(frozen=True)
class LedgerSkip:
    """An entity the latest posting cycle skipped, or posted without some intervals (``excluded`` > 0)."""

    cloud: str
    project_id: str
    meter: str
    reason: str
    excluded: int = 0


def ledger_entities_skipped(skips: Iterable[LedgerSkip]) -> Condition:
    """TallyLedgerEntitiesSkipped: the latest posting cycle left usage unbilled (an entity skipped, or
    intervals the meters cannot read excluded). Unbilled usage is never silent."""
    skips = list(skips)
    by_reason: dict[str, int] = {}
    for s in skips:
        by_reason[s.reason] = by_reason.get(s.reason, 0) + 1
    clouds = tuple(sorted({s.cloud for s in skips}))
    if not skips:
        return Condition("TallyLedgerEntitiesSkipped", False, (), "the latest posting cycle billed every entity in full")
    examples = ", ".join(f"{s.cloud}/{s.project_id}/{s.meter} ({s.reason})" for s in skips[:5])
    message = ("latest posting cycle left usage unbilled: "
               + ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items()))
               + f"; e.g. {examples}")
    return Condition("TallyLedgerEntitiesSkipped", True, clouds, message, {"by_reason": by_reason,
                                                                           "entities": len(skips)})


def service_events_silent(latest: Iterable[LatestCorrections], activity: Iterable[TypeActivity],
                          clouds: Collection[str], s: AlertSettings, services: Mapping[str, str] | None = None,
                          hint: str = "") -> Condition:
    """TallyServiceEventsSilent: a configured cloud's latest sync (past its ``drift_warmup_syncs``) corrected
    resources of a type, created, deleted or recovered, while the collector stored no event of that type
    for the cloud since the sync before it (or ever), though it stores the cloud's events of other types.

    The listing saw that service's resources change and no notification of it arrived: the service
    publishes where the collector does not listen (another exchange or topic). A cloud without any
    collector event is not judged here (TallyCloudEventsSilent watches a collector that stopped).
    ``services`` names the service that notifies about each type, ``hint`` what the provider knows of
    where its services publish (both from the provider; the message names them).
    """
    last: dict[tuple[str, str], datetime] = {}
    types: dict[str, set[str]] = {}
    for a in activity:
        last[(a.cloud, a.resource_type)] = a.last_collector_event
        types.setdefault(a.cloud, set()).add(a.resource_type)
    silent: dict[str, dict[str, Any]] = {}
    warming: list[str] = []
    for sync in latest:
        if sync.cloud not in clouds:
            continue
        if sync.nth <= s.drift_warmup_syncs:
            warming.append(sync.cloud)
            continue
        since = sync.previous_poll_time
        for rtype, n in sorted(sync.corrections.items()):
            seen = last.get((sync.cloud, rtype))
            if n <= 0 or not types.get(sync.cloud, set()) - {rtype}:
                continue
            if seen is not None and (since is None or seen >= since):
                continue
            silent.setdefault(sync.cloud, {})[rtype] = {
                "corrections": n, "service": (services or {}).get(rtype),
                "last_collector_event": seen.isoformat() if seen else None,
                "since": since.isoformat() if since else None, "sync_poll_time": sync.poll_time.isoformat()}
    warm_up = f"; warming up (first syncs not judged): {', '.join(sorted(warming))}" if warming else ""
    if not silent:
        return Condition("TallyServiceEventsSilent", False, (), "the collector carries every type the latest syncs "
                         "corrected" + warm_up)
    lines = []
    for cloud, by_type in sorted(silent.items()):
        for rtype, d in by_type.items():
            service = d["service"] or f"the service of {rtype}"
            silence = (f"reached the collector since {d['since']} (last {d['last_collector_event']})"
                       if d["last_collector_event"] else "ever reached the collector")
            lines.append(f"{cloud} {rtype}: the latest sync corrected {d['corrections']}, but no {rtype} event "
                         f"from {service} {silence}")
    message = ("a service's notifications are not reaching the collector: " + "; ".join(lines)
               + ". Is the collector bound to the exchange each publishes on? (collector.service_exchanges / "
               "--service-exchange SERVICE=EXCHANGE" + (f"; {hint}" if hint else "") + ")" + warm_up)
    return Condition("TallyServiceEventsSilent", True, tuple(sorted(silent)), message, silent)
