"""``tally bench projection``: full rebuild and incremental refresh against the database's own floor.

Setup (not timed) bulk-loads N synthetic events over M instances straight into ``events`` — a
create, resizes and notes, and for some a delete, per resource. Then, on the same data:

- ``rebuild_s``: ``projection.rebuild`` (both tables from scratch), best of two like the floor;
  ``rebuild_from_empty_s`` once more into emptied tables (on Postgres the first writes only what
  differs from the stored rows, which over an up-to-date projection is nothing);
- ``floor_s``: the plain window-function query that picks each resource's latest event, written to
  a table — a floor no fold can beat, since a fold must at least sort every history;
- ``incremental_s``: a refresh after 1,000 late events scattered over the history, ingested
  through the ingest core; with ``rounds`` above 1 the fastest of that many, each after its own
  late events (``incremental_rounds_s``: every round), and ``incremental_cpu_s`` that round's CPU
  time (this process's threads, DuckDB's included: on a shared machine it moves less than wall time);
- ``incremental_lookup_floor_s``: only finding those resources' histories among all events (a
  key-only semi join counted, nothing read): what any full-history re-fold pays first;
- ``rebuild_peak_rss_mb``: this process's peak resident memory during the rebuilds alone (Linux:
  the high-water mark is reset first); ``peak_rss_mb`` is the whole run's.

``growth`` measures the same at several log sizes in one database, loading each step's extra
events on top of the last, and fits the exponent k of ``time ∝ events^k`` (1: linear in the log).
"""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from tally_pipeline.bench.common import peak_rss_mb, timer
from tally_pipeline.runtime import Runtime
from tally_pipeline.services import projection
from tally_pipeline.store.base import StoreUnavailable
from tally_pipeline.store.postgres.resource_key import same_resource

T = TypeVar("T")

_FLAVORS = [
    '{"disk_gb":20,"flavor_name":"m1.small","ram_mb":2048,"vcpus":1}',
    '{"disk_gb":40,"flavor_name":"m1.medium","ram_mb":4096,"vcpus":2}',
    '{"disk_gb":80,"flavor_name":"m1.large","ram_mb":8192,"vcpus":4}',
]
_KEY = "cloud, resource_type, resource_id"
_COLUMNS = ["event_id", "event_type", "verb", "cloud", "resource_type", "resource_id", "project_id",
            "occurred_at", "source", "payload", "content_hash", "received_at"]


def synthetic_table(events: int, resources: int, *, run: str, seed: int, chunk: int) -> pa.Table:
    """One chunk of ``chunk`` events (index ``seed``) of the synthetic history, as Arrow columns."""
    per = max(2, events // resources)
    index = np.arange(chunk * seed, min(events, chunk * (seed + 1)))
    r = index // per
    k = index % per
    start = datetime(2026, 1, 1, tzinfo=UTC)
    born = (r * 7919) % (30 * 86400)
    offset = born + k * (3600 + (r % 13) * 60)
    last = k == per - 1
    deleted = last & (r % 10 < 3)
    verb = np.where(k == 0, "create", np.where(deleted, "delete", np.where(k % 3 == 2, "note", "update")))
    event_type = np.select(
        [verb == "create", verb == "delete", verb == "note"],
        ["compute.instance.create.end", "compute.instance.delete.end", "compute.instance.create.start"],
        "compute.instance.resize.confirm.end",
    )
    flavor = (r + k // 3) % 3
    payload = np.where(np.isin(verb, ["create", "update"]),
                       np.array([f'{{"size":{f}}}' for f in _FLAVORS])[flavor], "{}")
    occurred = pa.array([start + timedelta(seconds=int(s)) for s in offset], pa.timestamp("us", tz="UTC"))
    rid = np.char.add(f"{run}-srv-", r.astype(str))
    return pa.table({
        "event_id": np.char.add(f"{run}-", index.astype(str)),
        "event_type": event_type,
        "verb": verb,
        "cloud": np.char.add("bench-", (r % 3).astype(str)),
        "resource_type": np.full(len(index), "instance"),
        "resource_id": rid,
        "project_id": np.char.add("proj-", (r % 97).astype(str)),
        "occurred_at": occurred,
        "source": np.full(len(index), "collector"),
        "payload": payload,
        "content_hash": np.full(len(index), "0" * 32),
        "received_at": pa.array([datetime.now(UTC)] * len(index), pa.timestamp("us", tz="UTC")),
    })


_CHUNK = 200_000  # events per load transaction


def _load(rt: Runtime, events: int, resources: int, run: str, *, first_chunk: int = 0) -> None:
    chunk = _CHUNK
    for seed in range(first_chunk, (events + chunk - 1) // chunk):
        table = synthetic_table(events, resources, run=run, seed=seed, chunk=chunk)
        if rt.store.dialect == "duckdb":
            def load(uow: Any, table: pa.Table = table) -> None:
                uow.con.register("_bench_events", table)
                uow.con.execute(
                    f"INSERT INTO events ({', '.join(_COLUMNS)}) SELECT {', '.join(_COLUMNS[:-3])}, "
                    "payload::JSON, content_hash, received_at FROM _bench_events"
                )
                uow.con.unregister("_bench_events")
        else:
            def load(uow: Any, table: pa.Table = table) -> None:
                with uow.cur.copy(f"COPY events ({', '.join(_COLUMNS)}) FROM STDIN") as copy:
                    for row in zip(*(table.column(c).to_pylist() for c in _COLUMNS)):
                        copy.write_row(row)
        rt.store.run(load)


def _late_events(n: int, runs: Sequence[tuple[str, int]], seed: int) -> list[dict[str, Any]]:
    """``n`` events at random times over the history, for resources drawn from every loaded run."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    weights = [resources for _, resources in runs]
    out = []
    for i in range(n):
        run, resources = rng.choices(runs, weights)[0]
        r = rng.randrange(resources)
        when = start + timedelta(seconds=rng.randrange(40 * 86400))
        out.append({
            "event_id": f"{run}-late-{seed}-{i}",
            "event_type": "compute.instance.resize.confirm.end",
            "cloud": f"bench-{r % 3}",
            "resource_type": "instance",
            "resource_id": f"{run}-srv-{r}",
            "occurred_at": when.isoformat(),
            "payload": {"size": {"flavor_name": "m1.xlarge", "vcpus": 8, "ram_mb": 16384, "disk_gb": 160}},
        })
    return out


def _floor(rt: Runtime) -> float:
    sql = (
        "CREATE TEMP TABLE bench_latest AS SELECT * FROM ("
        " SELECT cloud, resource_type, resource_id, verb, project_id, occurred_at, payload, seq,"
        " row_number() OVER (PARTITION BY cloud, resource_type, resource_id ORDER BY occurred_at DESC, seq DESC) AS rn"
        " FROM events) latest WHERE rn = 1"
    )

    def work(uow: Any) -> None:
        uow.execute(sql)
        uow.execute("DROP TABLE bench_latest")

    with timer() as elapsed:
        rt.store.run(work)
    return elapsed[0]


def _lookup_floor(rt: Runtime) -> float:
    """Only finding the pending resources' histories: a count over a key-only semi join, no event read.

    Any refresh that re-folds full histories pays at least this; in a column store it is a scan.
    """
    watermark = rt.store.query("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0]
    pending = f"SELECT DISTINCT {_KEY} FROM events WHERE seq > %s"
    if rt.store.dialect == "duckdb":
        sql = f"SELECT count(*) FROM events SEMI JOIN ({pending}) USING ({_KEY})"
    else:
        sql = f"SELECT count(*) FROM events e JOIN ({pending}) p ON {same_resource('e', 'p')}"
    with timer() as elapsed:
        rt.store.query(sql, (watermark,))
    return elapsed[0]


def _timed_rebuild(rt: Runtime) -> tuple[float, projection.RefreshResult]:
    with timer() as elapsed:
        result = projection.rebuild(rt.store)
    return elapsed[0], result


def _rebuild_from_empty(rt: Runtime) -> tuple[float, projection.RefreshResult]:
    """A rebuild that must write every row: the projection tables emptied first (not timed).

    A Postgres rebuild writes only the rows that differ from the stored ones, so one over an up to
    date projection (``rebuild_s``) writes nothing; this is the other end, a first build.
    """
    rt.store.run(lambda uow: (uow.execute("TRUNCATE resource_intervals"), uow.execute("TRUNCATE current_resources")))
    return _timed_rebuild(rt)


def _reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark (Linux ``clear_refs``); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_since_reset_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return peak_rss_mb()


def run(rt: Runtime, *, events: int, resources: int, late: int = 1000, seed: int = 1,
        rounds: int = 1) -> dict[str, Any]:
    rt.store.require_current_schema()
    with rt.store.session():
        run_id = uuid.uuid4().hex[:6]
        with timer() as load_s:
            _load(rt, events, resources, run_id)
        report = _measure(rt, [(run_id, resources)], late=late, seed=seed, rounds=rounds)
    return {"benchmark": "projection", "database": rt.store.dialect, "events": events, "resources": resources,
            "load_s": round(load_s[0], 3), **report}


def _measure(rt: Runtime, runs: Sequence[tuple[str, int]], *, late: int, seed: int, rounds: int) -> dict[str, Any]:
    """Rebuild, floor and incremental refresh on the log as it stands (``runs``: what was loaded).

    The incremental refresh is timed ``rounds`` times, each after its own late events, and the
    fastest reported: a shared machine's load only ever adds time.
    """
    projection.refresh(rt.store)  # start from a projection that is up to date
    log_events = rt.store.event_count()  # what the rebuild folds (the late events come after)
    # Both sides are timed the same way, best of two: a rebuild gives identical tables each time.
    floor_s = min(_floor(rt) for _ in range(2))
    reset = _reset_peak_rss()
    rebuild_s, result = min((_timed_rebuild(rt) for _ in range(2)), key=lambda timed: timed[0])
    rebuild_rss = _peak_rss_since_reset_mb() if reset else peak_rss_mb()
    from_empty_s, from_empty = _rebuild_from_empty(rt)
    if from_empty.resources != result.resources:
        raise AssertionError(f"a rebuild from empty tables folded {from_empty.resources} resources, "
                             f"one over the stored tables {result.resources}")
    refreshes = []
    lookup_s = 0.0
    for round_no in range(rounds):
        for _ in rt.ingestor.ingest_stream(_late_events(late, runs, seed + 1000 * round_no), origin="bench"):
            pass
        if round_no == 0:
            lookup_s = _lookup_floor(rt)
        cpu = time.process_time()
        with timer() as wall:
            refreshed = projection.refresh(rt.store)
        refreshes.append((wall[0], time.process_time() - cpu, refreshed))
    incremental_s, incremental_cpu_s, incremental = min(refreshes, key=lambda r: r[0])
    return {
        "log_events": log_events,
        "rebuild_s": round(rebuild_s, 3),
        "rebuild_events_per_s": round(log_events / rebuild_s),
        "rebuild_resources": result.resources,
        "floor_s": round(floor_s, 3),
        "rebuild_vs_floor": round(rebuild_s / floor_s, 2),
        "rebuild_from_empty_s": round(from_empty_s, 3),
        "rebuild_from_empty_vs_floor": round(from_empty_s / floor_s, 2),
        "late_events": late,
        "incremental_resources": incremental.resources,
        "incremental_resumed": incremental.resumed,
        "incremental_refolded": incremental.refolded,
        "incremental_s": round(incremental_s, 4),
        "incremental_rounds_s": [round(r[0], 4) for r in refreshes],
        "incremental_cpu_s": round(incremental_cpu_s, 4),
        "incremental_vs_rebuild": round(incremental_s / rebuild_s, 4),
        "incremental_lookup_floor_s": round(lookup_s, 4),
        "rebuild_peak_rss_mb": round(rebuild_rss, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def growth_exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """The least-squares slope of log(value) on log(size): k in value ∝ size^k."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(v, 1e-9)) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def _retried(work: Callable[[], T], retries: list[str], attempts: int = 3) -> T:
    """``work()``, again after a lost connection (a shared server's other clients may cut it); each retry noted."""
    for attempt in range(attempts):
        try:
            return work()
        except StoreUnavailable as exc:
            if attempt == attempts - 1:
                raise
            retries.append(str(exc).splitlines()[0])
    raise AssertionError("unreachable")


def growth(rt: Runtime, *, sizes: Sequence[int], events_per_resource: int = 10, late: int = 1000,
           seed: int = 1, rounds: int = 1) -> dict[str, Any]:
    """``_measure`` at each log size in ``sizes`` (ascending), each step loaded on top of the last.

    A step whose connection is cut is measured again (its events already loaded stay); the report
    lists every such retry.
    """
    rt.store.require_current_schema()
    runs: list[tuple[str, int]] = []
    steps = []
    retries: list[str] = []
    with rt.store.session():
        loaded = rt.store.event_count()
        for step, size in enumerate(sorted(sizes)):
            extra = size - loaded
            if extra >= events_per_resource:
                run_id = uuid.uuid4().hex[:6]
                _retried(lambda: _load(rt, extra, extra // events_per_resource, run_id,  # noqa: B023
                                       first_chunk=_chunks_loaded(rt, run_id)), retries)  # noqa: B023
                runs.append((run_id, extra // events_per_resource))
            step_seed = seed + 100 * step + len(retries)  # a retried step's late events get fresh ids
            steps.append({"events": size, **_retried(
                lambda: _measure(rt, runs, late=late, seed=step_seed, rounds=rounds), retries)})  # noqa: B023
            loaded = rt.store.event_count()
    logs = [s["log_events"] for s in steps]
    first, last = steps[0], steps[-1]
    return {
        "benchmark": "projection-growth",
        "database": rt.store.dialect,
        "steps": steps,
        "log_growth": round(logs[-1] / logs[0], 2),
        "incremental_growth": round(last["incremental_s"] / first["incremental_s"], 2),
        "incremental_cpu_growth": round(last["incremental_cpu_s"] / first["incremental_cpu_s"], 2),
        "incremental_exponent": round(growth_exponent(logs, [s["incremental_s"] for s in steps]), 3),
        "rebuild_exponent": round(growth_exponent(logs, [s["rebuild_s"] for s in steps]), 3),
        "rebuild_vs_floor_max": max(s["rebuild_vs_floor"] for s in steps),
        "rebuild_from_empty_vs_floor_max": max(s["rebuild_from_empty_vs_floor"] for s in steps),
        "rebuild_peak_rss_mb_max": max(s["rebuild_peak_rss_mb"] for s in steps),
        "rebuild_peak_rss_exponent": round(growth_exponent(logs, [s["rebuild_peak_rss_mb"] for s in steps]), 3),
        "retries": retries,
    }


def _chunks_loaded(rt: Runtime, run: str) -> int:
    """How many whole load chunks of ``run`` are stored (each chunk commits on its own)."""
    count = rt.store.query("SELECT count(*) FROM events WHERE event_id LIKE %s", (f"{run}-%",))[0][0]
    return int(count) // _CHUNK
