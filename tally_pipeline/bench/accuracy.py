"""``tally bench accuracy``: how close events alone, and events plus reconciliation, come to the truth.

One simulation, two stores fed the same lossy, duplicated, reordered collector stream in simulated
time: one only ingests; the other also runs a sync of every cloud every ``interval`` (10 minutes).
At the end each store's ``resource_intervals`` are measured against the simulator's ground truth in
resource-hours per type over the simulated window, and as a tenant sees it: per (cloud, project,
meter), in the meter's own units, absolute differences summed (``tenant``), so one tenant's
over-billing never hides another's under-billing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.core.usage import Interval, tenant_accuracy, usage_by_entity
from tally_pipeline.providers.simulated import DeliverySpec, Simulation, SimulationSpec, simulate
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline.providers.simulated.truth import power_class
from tally_pipeline.schemas import default_registry
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.usage import cumulative_usage
from tally_pipeline.services.reconciliation import SyncRun, run_sync
from tally_pipeline.store import Store, open_store


@dataclass
class Drive:
    """The state of a simulated-time run over both stores."""

    sim: Simulation
    events_only: Store
    reconciled: Store
    interval: timedelta
    settle_window: float
    mass_delete_guard: float
    runs: list[SyncRun] = field(default_factory=list)
    ingested: Counter[str] = field(default_factory=Counter)


def drive(sim: Simulation, *, interval: timedelta = timedelta(minutes=10), settle_window: float = 300.0,
          mass_delete_guard: float = 0.5, events_only: Store | None = None, reconciled: Store | None = None,
          progress: Callable[[datetime], None] | None = None) -> Drive:
    """Feed both stores in simulated time, syncing the reconciled one every ``interval``."""
    registry = default_registry()
    d = Drive(sim, events_only or open_store("duckdb://:memory:"), reconciled or open_store("duckdb://:memory:"),
              interval, settle_window, mass_delete_guard)
    ingest_plain, ingest_sync = Ingestor(d.events_only, registry), Ingestor(d.reconciled, registry)
    adapters = {cloud: SimulatedAdapter(sim.platform, cloud) for cloud in sim.clouds}

    def feed(after: datetime | None, until: datetime) -> None:
        items = sim.stream.delivered(after=after, until=until)
        for ingestor in (ingest_plain, ingest_sync):
            for outcome in ingestor.ingest_stream(items, origin="collector"):
                if ingestor is ingest_plain:
                    d.ingested.update(stored=outcome.stored, duplicates=outcome.duplicates, rejected=outcome.rejected)

    with d.events_only.session(), d.reconciled.session():
        feed(None, sim.start)
        tick = sim.start
        while tick < sim.end:
            previous, tick = tick, min(tick + interval, sim.end)
            feed(previous, tick)
            for cloud in sim.clouds:
                d.runs.append(run_sync(d.reconciled, ingest_sync, cloud, adapters[cloud], settle_window=settle_window,
                                       mass_delete_guard=mass_delete_guard, now=tick, run_key=f"tick:{tick.isoformat()}"))
            if progress is not None:
                progress(tick)
        projection.refresh(d.events_only)
        projection.refresh(d.reconciled)
    return d


def projected_hours(store: Store, cloud: str, resource_type: str, start: datetime, end: datetime) -> Decimal:
    """Resource-hours of one type over ``[start, end)`` from ``resource_intervals``, exactly."""
    rows = store.query(
        "SELECT start_at, end_at FROM resource_intervals WHERE cloud = %s AND resource_type = %s",
        [cloud, resource_type],
    )
    micros = 0
    for s, e in rows:
        lo, hi = max(to_utc(s), start), min(to_utc(e) if e is not None else end, end)
        if hi > lo:
            micros += (hi - lo) // timedelta(microseconds=1)
    return Decimal(micros) / Decimal(3_600_000_000)


def _has_events(store: Store, key: tuple[str, str, str]) -> bool:
    where, params = store.resource_events_filter(key)
    return bool(store.query(f"SELECT 1 FROM events WHERE {where} LIMIT 1", params))


def _error(value: Decimal, truth: Decimal) -> float:
    if truth == 0:
        return 0.0 if value == 0 else float("inf")
    return float(abs(value - truth) / truth)


def lifecycle_end_errors(d: Drive) -> list[dict[str, Any]]:
    """Per resource: how far the reconciled lifecycle's end (or start) is from the truth's, in seconds."""
    out = []
    for lc in d.sim.truth:
        rows = d.reconciled.query(
            "SELECT min(start_at), max(coalesce(end_at, TIMESTAMPTZ '9999-12-31 00:00:00+00')) FROM resource_intervals "
            "WHERE cloud = %s AND resource_type = %s AND resource_id = %s",
            [lc.cloud, lc.resource_type, lc.resource_id],
        )
        start, end = rows[0]
        if start is None:
            out.append({"key": lc.key, "seen": False})
            continue
        end = None if end.year == 9999 else to_utc(end)
        truth_end = lc.deleted_at
        out.append({
            "key": lc.key, "seen": True,
            "start_error_s": (to_utc(start) - lc.created_at).total_seconds(),
            "end_error_s": None if (end is None) != (truth_end is None) else
            ((end - truth_end).total_seconds() if end is not None and truth_end is not None else 0.0),
            "end_mismatch": (end is None) != (truth_end is None),
        })
    return out


def truth_by_entity(sim: Simulation, start: datetime, end: datetime) -> dict[tuple[str, str, str], int]:
    """Ground-truth usage per (cloud, project, meter) dated in ``[start, end)``, in micro-units."""
    rows = ((key.cloud, iv.project_id, key.resource_type, Interval(iv.start, iv.end, dict(iv.size)))
            for key, iv in sim.truth.intervals())
    return usage_by_entity(default_registry().meters(), rows, start, end)


def store_by_entity(store: Store, start: datetime, end: datetime) -> dict[tuple[str, str, str], int]:
    """A store's usage per (cloud, project, meter) dated in ``[start, end)``, from its lifecycles."""
    registry = default_registry()
    late, early = cumulative_usage(store, registry, end), cumulative_usage(store, registry, start)
    keys = set(late.micro) | set(early.micro)
    return {(k[0], k[1], k[2]): late.micro.get(k, 0) - early.micro.get(k, 0) for k in keys}


def status_hours(store: Store, start: datetime, end: datetime) -> dict[str, Decimal]:
    """Instance-hours per power class (``sim.truth.power_class`` of each interval's platform status)
    over ``[start, end)``, from ``resource_intervals``."""
    rows = store.query("SELECT start_at, end_at, platform_status FROM resource_intervals WHERE resource_type = 'instance'")
    micros: Counter[str] = Counter()
    for s, e, status in rows:
        lo, hi = max(to_utc(s), start), min(to_utc(e) if e is not None else end, end)
        if hi > lo:
            micros[str(power_class(status))] += (hi - lo) // timedelta(microseconds=1)
    return {k: Decimal(v) / Decimal(3_600_000_000) for k, v in micros.items()}


def truth_status_hours(sim: Simulation) -> dict[str, Decimal]:
    micros: Counter[str] = Counter()
    for _, iv in sim.truth.intervals(resource_type="instance"):
        lo, hi = max(iv.start, sim.start), min(iv.end if iv.end is not None else sim.end, sim.end)
        if hi > lo:
            micros[str(iv.status)] += (hi - lo) // timedelta(microseconds=1)
    return {k: Decimal(v) / Decimal(3_600_000_000) for k, v in micros.items()}


def status_view(d: Drive) -> dict[str, Any]:
    """Instance-hours per power status: the truth's, and each store's error against it (the share of
    hours booked under another status, or not at all)."""
    truth = truth_status_hours(d.sim)
    plain = status_hours(d.events_only, d.sim.start, d.sim.end)
    fixed = status_hours(d.reconciled, d.sim.start, d.sim.end)
    return {
        status: {"truth_hours": round(float(hours), 4),
                 "events_only_error": round(_error(plain.get(status, Decimal(0)), hours), 6),
                 "reconciled_error": round(_error(fixed.get(status, Decimal(0)), hours), 6)}
        for status, hours in sorted(truth.items())
    }


def tenant_view(d: Drive) -> dict[str, Any]:
    """``tenant.abs_error`` and ``tenant.worst`` for events alone and for events + reconciliation."""
    sim = d.sim
    truth = truth_by_entity(sim, sim.start, sim.end)
    plain = tenant_accuracy(truth, store_by_entity(d.events_only, sim.start, sim.end))
    fixed = tenant_accuracy(truth, store_by_entity(d.reconciled, sim.start, sim.end))
    return {
        "abs_error": {"events_only": round(plain.abs_error, 6), "reconciled": round(fixed.abs_error, 6)},
        "worst": {"events_only": plain.worst.to_dict() if plain.worst else None,
                  "reconciled": fixed.worst.to_dict() if fixed.worst else None},
        "entities": sum(1 for v in truth.values() if v),  # bills with usage in the truth
    }


def report(d: Drive) -> dict[str, Any]:
    sim = d.sim
    per_type: dict[str, Any] = {}
    totals = {"truth": Decimal(0), "events_only": Decimal(0), "reconciled": Decimal(0)}
    for rtype in sim.spec.resource_types:
        truth = sum((sim.truth.resource_hours(c, rtype, sim.start, sim.end) for c in sim.clouds), Decimal(0))
        plain = sum((projected_hours(d.events_only, c, rtype, sim.start, sim.end) for c in sim.clouds), Decimal(0))
        fixed = sum((projected_hours(d.reconciled, c, rtype, sim.start, sim.end) for c in sim.clouds), Decimal(0))
        totals["truth"] += truth
        totals["events_only"] += plain
        totals["reconciled"] += fixed
        per_type[rtype] = {
            "truth_hours": round(float(truth), 4),
            "events_only_hours": round(float(plain), 4),
            "reconciled_hours": round(float(fixed), 4),
            "events_only_error": round(_error(plain, truth), 6),
            "reconciled_error": round(_error(fixed, truth), 6),
        }
    stats = sim.stream.stats()
    never_seen = [lc.key for lc in sim.truth
                  if not _has_events(d.reconciled, (lc.cloud, lc.resource_type, lc.resource_id))]
    corrections: Counter[str] = Counter()
    deferrals: Counter[str] = Counter()
    for run in d.runs:
        corrections.update(created=run.created, updated=run.updated, deleted=run.deleted, recovered=run.recovered)
        deferrals.update(run.deferrals_by_reason())
    interval_h = d.interval.total_seconds() / 3600
    return {
        "benchmark": "accuracy",
        "seed": sim.spec.seed,
        "hours": sim.spec.hours,
        "clouds": list(sim.clouds),
        "loss": sim.spec.delivery.loss,
        "duplicates": sim.spec.delivery.duplicates,
        "sync_interval_s": d.interval.total_seconds(),
        "settle_window_s": d.settle_window,
        "faults": {c: dict(m) for c, m in sim.spec.failing_types.items()},
        "per_type": per_type,
        "total": {
            "truth_hours": round(float(totals["truth"]), 4),
            "events_only_error": round(_error(totals["events_only"], totals["truth"]), 6),
            "reconciled_error": round(_error(totals["reconciled"], totals["truth"]), 6),
        },
        "tenant": tenant_view(d),
        "instance_status": status_view(d),
        "events": {"stored": d.ingested["stored"], "duplicates": d.ingested["duplicates"],
                   "rejected": d.ingested["rejected"], "generated": stats.events_generated,
                   "lost": stats.events_lost, "duplicated": stats.events_duplicated},
        "lost": {"creates": stats.creates_lost, "deletes": stats.deletes_lost, "both": stats.both_lost,
                 "updates": stats.updates_lost},
        "resources_never_seen": len(never_seen),
        "syncs": len(d.runs),
        "corrections": dict(corrections),
        "deferrals": dict(sorted(deferrals.items())),
        "seed_bound_hours": round(interval_h * stats.deletes_lost, 4),
    }


def run(*, loss: float, duplicates: float, hours: float, seed: int, clouds: int = 2, resources: int = 60,
        interval_s: float = 600, settle_window: float = 300.0, down_cell: bool = False,
        progress: Callable[[datetime], None] | None = None) -> dict[str, Any]:
    """``down_cell``: the first cloud's nova has a cell down the whole time (its servers missing from listings)."""
    names = tuple(f"sim-{i + 1}" for i in range(clouds))
    spec = SimulationSpec(
        clouds=names, resources=resources, hours=hours, seed=seed,
        delivery=DeliverySpec(loss=loss, duplicates=duplicates),
        failing_types={names[0]: {"instance": "down_cell"}} if down_cell else {},
    )
    d = drive(simulate(spec), interval=timedelta(seconds=interval_s), settle_window=settle_window, progress=progress)
    return report(d)
