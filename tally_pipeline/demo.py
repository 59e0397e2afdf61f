"""``tally demo``: the whole pipeline on simulated lossy clouds, through the Dagster definitions.

A simulated clock advances in 10-minute ticks over the simulated window. Each tick, the collector
events delivered since the last tick go through the ingest core; the ``reconciliation`` job syncs
every cloud (tick time as poll time and run key); halfway to the next tick the settle-window
sensor's rule launches follow-ups for deferrals that are due; every simulated hour one run
materializes the projection, audits the ledger and posts a checkpoint-delta cycle. At the end
``usage_daily`` is backfilled over the window in one run and a last cycle posts through the end.

Beside it, a second store is fed the same events with no reconciliation ("events alone"), in a
process of its own on the machine's other core (it shares only the timeline of steps with the main
pipeline), and the ledger of each is compared with the simulator's ground truth through the same
clamp: per meter, and as a tenant sees it, per (cloud, project, meter) with absolute differences summed.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import dagster as dg

from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.core.usage import (
    Entity,
    Interval,
    cumulative_usage_micro,
    tenant_accuracy,
    to_units,
    usage_by_entity,
)
from tally_pipeline.defs.reconciliation.requests import follow_up_requests, reconciliation_requests
from tally_pipeline.orchestration.resources import Ledger, TallyStore
from tally_pipeline.orchestration.tags import CLOUD, NOW, SYNC_STATUS
from tally_pipeline.providers.simulated import DeliverySpec, Simulation, SimulationSpec, simulate
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.ingest import BatchOutcome
from tally_pipeline.store import asset_reads
from tally_pipeline.store.snapshot import write_snapshot

TICK = timedelta(minutes=10)
START = datetime.fromisoformat("2026-01-05T00:00:00+00:00")


@dataclass
class DemoSettings:
    clouds: int = 2
    hours: float = 48.0
    loss: float = 0.05
    duplicates: float = 0.01
    seed: int = 1
    directory: Path | None = None
    resources: int = 60
    settle_window: float = 300.0
    ingest_lag: float = 900.0
    verbose: bool = False  # also echo Dagster's log (always written to dagster.log in the directory)


class SimulatedClock:
    """The demo's clock: the Dagster assets ask it for "now"."""

    def __init__(self, now: datetime):
        self.value = now

    def now(self) -> datetime:
        return self.value


class SimulatedPlatforms:
    """Each simulated cloud's adapter over the simulator's platform view."""

    def __init__(self, sim: Simulation):
        self.adapters = {cloud: SimulatedAdapter(sim.platform, cloud) for cloud in sim.clouds}

    def adapter(self, cloud: str) -> SimulatedAdapter:
        return self.adapters[cloud]


@dataclass
class Sample:
    """Ledger totals per meter at one posting cycle (µ-units), for the picture; the same per
    (cloud, project, meter) for the tenant view."""

    at: datetime
    clamp: datetime
    reconciled: dict[str, int]
    events_only: dict[str, int]
    truth: dict[str, int]
    tenants: TenantSample | None = None


@dataclass
class TenantSample:
    reconciled: dict[Entity, int]
    events_only: dict[Entity, int]
    truth: dict[Entity, int]

    def minus(self, base: TenantSample) -> TenantSample:
        return TenantSample(_minus(self.reconciled, base.reconciled), _minus(self.events_only, base.events_only),
                            _minus(self.truth, base.truth))


def _minus(a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:
    return {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}


@dataclass
class DemoRun:
    settings: DemoSettings
    directory: Path
    sim: Simulation
    started: float
    dagster_runs: Counter[str] = field(default_factory=Counter)  # runs by what they were
    events: Counter[str] = field(default_factory=Counter)  # stored, duplicates, rejected
    samples: list[Sample] = field(default_factory=list)
    final_clamp: datetime | None = None
    baseline: Sample | None = None


def _config(directory: Path, s: DemoSettings, clouds: list[str]) -> Path:
    lines = [f"database: duckdb://{directory / 'tally.duckdb'}", "clouds:"]
    for i, cloud in enumerate(clouds):
        lines.append(f"  {cloud}: {{provider: simulated, seed: {s.seed + i}, start: '{format_rfc3339(START)}', "
                     f"hours: {s.hours}}}")
    lines.append(f"reconciliation: {{settle_window: {s.settle_window}, mass_delete_guard: 0.5}}")
    lines.append(f"ledger: {{ingest_lag: {s.ingest_lag}, window_days: 35}}")
    # Production writes the analyst snapshot at the end of every run that changes the tables; the demo's
    # few hundred runs in a minute would rewrite it each time, so it writes one, at the end (run_demo).
    lines.append("analytics: {snapshots: false}")
    # The demo's work is thousands of small statements, and the events-only baseline has the other core: a
    # second DuckDB worker thread only hands each statement across cores (measured: 12 h 17 % faster on one).
    lines.append("duckdb: {threads: 1}")
    lines.append(f"first_day: {START.date().isoformat()}")  # the daily partitions start with the simulation
    # A cloud losing a share of its collector events drifts about that share per sync at steady state
    # (measured: 6.0 % at 5 % loss), so the default 5 % would fire for ever: twice the loss, at least 5 %.
    lines.append(f"alerts: {{drift_high: {max(0.05, round(2 * s.loss, 3))}}}  # loss {s.loss:.1%}: expect about that drift")
    path = directory / "tally.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def demo_logger(path: Path, echo: bool) -> dg.LoggerDefinition:
    """A Dagster logger writing every run's events to ``path`` (and to stderr when ``echo``)."""
    log = logging.getLogger("tally.demo.dagster")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    handlers: list[logging.Handler] = [logging.FileHandler(path, mode="w", encoding="utf-8")]
    if echo:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)

    @dg.logger(None, description="The demo's Dagster log: a file in the demo directory.")
    def demo_log(_: dg.InitLoggerContext) -> logging.Logger:
        return log

    return demo_log


def _truth_totals(sim: Simulation, registry: SizeSchemaRegistry, through: datetime) -> dict[str, int]:
    """Ground-truth usage per meter through ``through``, with the ledger's own meter arithmetic."""
    totals: dict[str, int] = {}
    for meter in registry.meters():
        intervals = [Interval(iv.start, iv.end, dict(iv.size)) for _, iv in sim.truth.intervals(resource_type=meter.resource_type)]
        totals[meter.name] = cumulative_usage_micro(meter, intervals, through)
    return totals


def _ledger_totals(store: Any) -> dict[str, int]:
    from tally_pipeline.core.usage import to_micro

    return {m: to_micro(a) for m, a in asset_reads.ledger_totals_by_meter(store).items()}


_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


def _truth_by_entity(sim: Simulation, registry: SizeSchemaRegistry, through: datetime) -> dict[Entity, int]:
    """The ground truth per (cloud, project, meter) through ``through``, in µ-units."""
    rows = ((key.cloud, iv.project_id, key.resource_type, Interval(iv.start, iv.end, dict(iv.size)))
            for key, iv in sim.truth.intervals())
    return usage_by_entity(registry.meters(), rows, _EPOCH, through)


@dataclass(frozen=True)
class Step:
    """One step of the demo's timeline. ``feed``: the collectors' events delivered in (``after``, ``at``];
    ``follow-ups``: the settle-window sensor's rule at ``at``; ``sync``: a scheduled sync of every cloud
    polling at ``at``; ``post``: the hourly run (projection, audit, posting) at ``at``; ``daily``: the
    usage_daily backfill through ``at``; ``tick``: the ``n``-th of ``ticks`` simulated ticks is done;
    ``stage``: ``what`` begins."""

    kind: Literal["feed", "follow-ups", "sync", "post", "daily", "tick", "stage"]
    at: datetime
    after: datetime | None = None
    n: int = 0
    ticks: int = 0
    what: str = ""


def timeline(sim: Simulation, s: DemoSettings) -> Iterator[Step]:
    """What the demo does, in order: the main pipeline follows every step, the events-only baseline
    the feeds and posts, so both stores see the same events in the same batches."""
    ticks = int((sim.end - sim.start) / TICK)
    lag = timedelta(seconds=s.ingest_lag)
    yield Step("stage", sim.start, what="the baseline: the history before the window, a first sync and a first posting")
    # The baseline: the warm clouds' history before the window (whatever its lost events did to it
    # before anyone was syncing) is posted once; the report measures the window after it.
    yield Step("feed", sim.start)
    yield Step("sync", sim.start)
    yield Step("post", sim.start + lag)
    yield Step("stage", sim.start, what=f"the window: {ticks} simulated 10-minute ticks, each the collectors' events, "
                                        "a sync of every cloud and its follow-ups; a posting every hour")
    tick = sim.start
    for n in range(1, ticks + 1):
        previous, tick = tick, sim.start + n * TICK
        half = previous + TICK / 2
        yield Step("feed", half, after=previous)
        yield Step("follow-ups", half)
        yield Step("feed", tick, after=half)
        yield Step("sync", tick)
        if (tick - sim.start) % timedelta(hours=1) == timedelta(0):
            yield Step("post", tick)
        yield Step("tick", tick, n=n, ticks=ticks)
    # The collectors catch up on what was still in flight at the end of the window.
    yield Step("stage", sim.end, what="the end: the events still in flight, a last sync, the usage_daily backfill "
                                      "and a last posting")
    yield Step("feed", sim.end + lag, after=sim.end)
    yield Step("sync", sim.end + lag)
    yield Step("daily", sim.end + lag)
    yield Step("post", sim.end + lag)


@dataclass(frozen=True)
class LedgerSample:
    """One ledger at one posting: per meter, and per (cloud, project, meter), in µ-units."""

    totals: dict[str, int]
    by_entity: dict[Entity, int]


def _ledger_sample(rt: Runtime) -> LedgerSample:
    from tally_pipeline.store import ledger_records

    return LedgerSample(_ledger_totals(rt.store), rt.store.run(ledger_records.posted_by_entity))


def _feed(rt: Runtime, sim: Simulation, step: Step) -> Iterator[BatchOutcome]:
    """A ``feed`` step into ``rt``'s store: both stores take it through here, so in the same batches."""
    return rt.ingestor.ingest_stream(sim.stream.delivered(after=step.after, until=step.at), origin="collector")


def _spec(s: DemoSettings, clouds: list[str]) -> SimulationSpec:
    return SimulationSpec(clouds=tuple(clouds), resources=s.resources, start=START, hours=s.hours, seed=s.seed,
                          delivery=DeliverySpec(loss=s.loss, duplicates=s.duplicates))


def events_only(s: DemoSettings, clouds: list[str], config: Path, database: Path) -> list[LedgerSample]:
    """The baseline without reconciliation: the same events, in the same batches, into ``database``, the
    projection folded and a cycle posted at each of the timeline's posts; its ledger at each.

    It shares nothing with the main pipeline but the timeline, so ``run_demo`` runs it in a process of
    its own, beside the main one (its simulation is rebuilt there from the same seed)."""
    from tally_pipeline.services import projection
    from tally_pipeline.services.ledger.poster import post_usage

    sim = simulate(_spec(s, clouds))
    plain = Runtime.load(str(config), database=f"duckdb://{database}")
    samples = []
    try:
        plain.store.migrate()
        with plain.store.session():
            for step in timeline(sim, s):
                if step.kind == "feed":
                    for _ in _feed(plain, sim, step):
                        pass
                elif step.kind == "post":
                    projection.refresh(plain.store)
                    post_usage(plain.store, plain.registry, now=step.at, ingest_lag=s.ingest_lag, window_days=35)
                    samples.append(_ledger_sample(plain))
    finally:
        plain.close()
    return samples


def run_demo(s: DemoSettings, *, progress: Callable[[int, int], None] | None = None,
             stage: Callable[[str], None] | None = None,
             baseline_of: Callable[[DemoSettings, list[str], Path, Path], list[LedgerSample]] = events_only) -> DemoRun:
    """Run the demo; ``progress(n, ticks)`` after each simulated tick, ``stage(what)`` as each stage begins.
    ``baseline_of``: what computes the events-only ledgers in the second process (a module-level function)."""
    directory = s.directory or Path(tempfile.mkdtemp(prefix="tally-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in ("tally.duckdb", "tally.duckdb.wal", "events-only.duckdb", "events-only.duckdb.wal"):
        (directory / stale).unlink(missing_ok=True)
    clouds = [f"sim-{i + 1}" for i in range(s.clouds)]
    say = stage or (lambda _: None)
    say(f"simulating {s.clouds} cloud(s) over {s.hours:g} h (seed {s.seed}), in {directory}")
    sim = simulate(_spec(s, clouds))
    run = DemoRun(s, directory, sim, time.perf_counter())
    config = _config(directory, s, clouds)
    # The events-only baseline shares nothing with the main pipeline but the timeline: it runs in a
    # process of its own (spawned, so it inherits no open file or thread), on the machine's other core.
    # An executor, not a Pool: a process that dies (killed, or failing before it runs) breaks the
    # executor, which raises, where a Pool would start another process and wait for a result forever.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        baseline = pool.submit(baseline_of, s, clouds, config, directory / "events-only.duckdb")

        def failed_beside() -> None:  # a baseline that failed stops the demo at the next tick, its error raised
            if baseline.done():
                baseline.result()

        try:
            mains = _run_main(run, clouds, config, progress, say, failed_beside)
            plains = baseline.result()
        except BrokenProcessPool as exc:
            raise RuntimeError(f"the events-only baseline's process died before it returned: {exc}") from exc
    samples = [replace(m, events_only=p.totals,
                       tenants=replace(m.tenants, events_only=p.by_entity) if m.tenants else None)
               for m, p in zip(mains, plains, strict=True)]
    run.baseline, run.samples = samples[0], samples[1:]
    return run


def _run_main(run: DemoRun, clouds: list[str], config: Path, progress: Callable[[int, int], None] | None,
              say: Callable[[str], None], check: Callable[[], None] = lambda: None) -> list[Sample]:
    """The main pipeline through the timeline, through the Dagster definitions; a sample at each post
    (without the events-only ledger, which ``events_only`` adds). ``check()`` after each tick."""
    from tally_pipeline.definitions import build_definitions

    s, sim, directory = run.settings, run.sim, run.directory
    main = Runtime.load(str(config))
    main.store.migrate()
    clock = SimulatedClock(sim.start)
    store = TallyStore(config_path=str(config))
    resources = {"store": store, "ledger": Ledger(config_path=str(config)), "adapters": SimulatedPlatforms(sim), "clock": clock}
    # Every run's Dagster log goes to dagster.log in the demo directory, not the terminal (thousands of
    # step lines would bury the report); --verbose echoes it too.
    defs = dg.Definitions.merge(build_definitions(clouds, resources),
                                dg.Definitions(loggers={"demo_log": demo_logger(directory / "dagster.log", s.verbose)}))
    instance = dg.DagsterInstance.ephemeral()
    reconcile = defs.resolve_job_def("reconciliation")
    hourly = dg.Definitions.merge(defs, dg.Definitions(jobs=[dg.define_asset_job(
        "demo_hourly", selection=dg.AssetSelection.assets(
            "current_resources", "resource_intervals", "projection_state", "ledger_audit", "ledger_postings",
            "usage_checkpoints", "ledger_cycles", "ledger_skips"))])
    ).resolve_job_def("demo_hourly")
    partition_range = {"dagster/asset_partition_range_start": clouds[0], "dagster/asset_partition_range_end": clouds[-1]}
    samples: list[Sample] = []

    def execute(job: dg.JobDefinition, name: str, **kwargs: Any) -> dg.ExecuteInProcessResult:
        # A logger is used only when the run config names it; naming ours replaces Dagster's console one.
        result = job.execute_in_process(instance=instance, raise_on_error=False,
                                        run_config={"loggers": {"demo_log": {}}}, **kwargs)
        run.dagster_runs[name] += 1
        if result.success:
            return result
        # A partial sync is a failed run by design (docs/operations.md): the demo reports it, not stops on it.
        dagster_run = instance.get_run_by_id(result.run_id)
        if dagster_run is None or dagster_run.tags.get(SYNC_STATUS) != "partial":
            failure = next((e for e in result.all_events if e.is_step_failure), None)
            error = failure.step_failure_data.error if failure else None
            raise RuntimeError(f"{name} failed: " + (error.message if error else "see dagster.log"))
        return result

    # One process runs every Dagster run: keeping the file open for the whole demo lets every other
    # connection (the Dagster steps' own stores) reuse the open database instead of reloading it.
    try:
        with main.store.session():
            for step in timeline(sim, s):
                clock.value = step.at
                if step.kind == "stage":
                    say(step.what)
                elif step.kind == "feed":
                    for outcome in _feed(main, sim, step):
                        run.events.update(stored=outcome.stored, duplicates=outcome.duplicates,
                                          rejected=outcome.rejected)
                elif step.kind == "follow-ups":  # the settle-window sensor's rule
                    for request in follow_up_requests(asset_reads.due_follow_ups(main.store, step.at), clouds, step.at):
                        execute(reconcile, "follow-up sync", partition_key=request.partition_key, tags=request.tags)
                elif step.kind == "sync":
                    tags = dict(reconciliation_requests([clouds[0]], step.at)[0].tags)
                    tags.pop(CLOUD, None)
                    execute(reconcile, "scheduled sync (all clouds)", tags={**tags, **partition_range})
                elif step.kind == "post":
                    execute(hourly, "projection+audit+posting", tags={NOW: format_rfc3339(step.at)})
                    clamp = step.at - timedelta(seconds=s.ingest_lag)
                    mine = _ledger_sample(main)
                    samples.append(Sample(step.at, clamp, mine.totals, {}, _truth_totals(sim, main.registry, clamp),
                                          TenantSample(mine.by_entity, {}, _truth_by_entity(sim, main.registry, clamp))))
                elif step.kind == "daily":
                    days = sorted({(sim.start + timedelta(days=d)).date()
                                   for d in range(int((step.at - sim.start).days) + 1)})
                    execute(defs.resolve_job_def("usage_daily_job"), "usage_daily backfill (one run)", tags={
                        "dagster/asset_partition_range_start": days[0].isoformat(),
                        "dagster/asset_partition_range_end": days[-1].isoformat()})
                    run.final_clamp = step.at - timedelta(seconds=s.ingest_lag)
                elif step.kind == "tick":
                    check()
                    if progress is not None:
                        progress(step.n, step.ticks)
            write_snapshot(main.store)
    finally:
        main.close()
    return samples


def report(run: DemoRun) -> dict[str, Any]:
    """The figures: events, syncs, corrections, deferrals, and per meter truth vs ledgers."""
    rt = Runtime.load(str(run.directory / "tally.yaml"))
    try:
        store = rt.store
        last, base = run.samples[-1], run.baseline
        assert base is not None
        meters = {}
        for meter in rt.registry.meters():
            name = meter.name
            truth = last.truth.get(name, 0) - base.truth.get(name, 0)
            ledger = last.reconciled.get(name, 0) - base.reconciled.get(name, 0)
            plain = last.events_only.get(name, 0) - base.events_only.get(name, 0)
            meters[meter.name] = {
                "unit": meter.unit,
                "seed_bound": float(to_units(_seed_bound(run, meter, base.clamp, last.clamp))),
                "truth": float(to_units(truth)),
                "ledger": float(to_units(ledger)),
                "events_only": float(to_units(plain)),
                "events_only_error": _relative(plain, truth),
                "reconciled_error": _relative(ledger, truth),
            }
        runs = asset_reads.sync_run_totals(store)
        deferrals = asset_reads.deferrals_by_reason(store)
        postings = asset_reads.postings_by_account(store)
        stats = run.sim.stream.stats()
        lost_deletes = run.sim.stream.lost_deletes
        lost_both = run.sim.stream.lost_both
        return {
            "database": str(run.directory / "tally.duckdb"),
            "events_only_database": str(run.directory / "events-only.duckdb"),
            "picture": str(run.directory / "report.png"),
            "dagster_log": str(run.directory / "dagster.log"),
            "snapshot": str(run.directory / "snapshot"),
            "simulated": {"clouds": list(run.sim.clouds), "hours": run.settings.hours, "seed": run.settings.seed,
                          "loss": run.settings.loss, "duplicates": run.settings.duplicates,
                          "start": format_rfc3339(run.sim.start), "end": format_rfc3339(run.sim.end),
                          "window": [format_rfc3339(run.baseline.clamp), format_rfc3339(run.final_clamp)]
                          if run.baseline and run.final_clamp else None},
            "events": {"generated": stats.events_generated, "lost": stats.events_lost,
                       "duplicated": stats.events_duplicated, "stored": run.events["stored"],
                       "duplicates": run.events["duplicates"], "rejected": run.events["rejected"]},
            "syncs": {"runs": runs["runs"], "dagster_runs": dict(run.dagster_runs)},
            "corrections": {k: runs[k] for k in ("created", "updated", "deleted", "recovered")},
            "deferrals": {k: int(v) for k, v in deferrals.items()},
            "postings": {k: int(v) for k, v in postings.items()},
            "meters": meters,
            "tenant": _tenant_report(last, base),
            "residual": {
                "lost_deletes_without_deletion_time": sum(1 for k in lost_deletes if k.resource_type != "instance"),
                "lost_deletes_of_instances_dated_exactly": sum(1 for k in lost_deletes if k.resource_type == "instance"),
                "both_events_lost_and_never_listed": sum(1 for k in lost_both if k.resource_type != "instance"),
                "explanation": (
                    "A lost delete of a volume, floating IP, image or load balancer is booked at the first sync that no "
                    "longer lists it: up to one 10-minute interval of over-billing each (the seed note's first known "
                    "limit). Instances carry nova's real deletion time, and instances created and deleted between two "
                    "syncs are recovered from the deleted-servers listing. A non-instance resource whose create and "
                    "delete were both lost between two syncs is never seen (the second limit). Lost resizes are booked "
                    "at the next poll."
                ),
            },
            "seconds": round(time.perf_counter() - run.started, 1),
        }
    finally:
        rt.close()


def _seed_bound(run: DemoRun, meter: Any, start: datetime, end: datetime) -> int:
    """The error the design note's known limits allow for a meter, in µ-units: one sync interval at the
    resource's rate per lost delete without a platform deletion time, and per lost resize."""
    from tally_pipeline.core.usage import interval_usage_micro

    lost = run.sim.stream
    total = 0
    for key in lost.lost_deletes | lost.lost("update"):
        if key.resource_type != meter.resource_type:
            continue
        lc = run.sim.truth.get(key)
        if lc is None or lc.created_at > end or (lc.deleted_at is not None and lc.deleted_at < start):
            continue
        worst = 0
        for iv in lc.intervals:
            piece = Interval(iv.start, iv.start + TICK, dict(iv.size))
            worst = max(worst, interval_usage_micro(meter, piece, iv.start + TICK))
        deletes = 1 if key in lost.lost_deletes and key.resource_type != "instance" else 0
        updates = 1 if key in lost.lost("update") else 0
        total += worst * (deletes + updates)
    return total


def _tenant_report(last: Sample, base: Sample) -> dict[str, Any]:
    """``tenant.abs_error`` and ``tenant.worst`` over the window: each ledger's postings per (cloud,
    project, meter) against the truth, differences summed in absolute value."""
    assert last.tenants is not None and base.tenants is not None
    window = last.tenants.minus(base.tenants)
    plain, fixed = tenant_accuracy(window.truth, window.events_only), tenant_accuracy(window.truth, window.reconciled)
    return {
        "abs_error": {"events_only": round(plain.abs_error, 6), "reconciled": round(fixed.abs_error, 6)},
        "worst": {"events_only": plain.worst.to_dict() if plain.worst else None,
                  "reconciled": fixed.worst.to_dict() if fixed.worst else None},
        "entities": sum(1 for v in window.truth.values() if v),  # bills with usage in the truth
    }


def _relative(value: int, truth: int) -> float:
    if truth == 0:
        return 0.0 if value == 0 else 1.0
    return round(abs(value - truth) / truth, 6)

