"""The checkpoint-delta poster: one cycle moves every entity's new usage into ``ledger_postings``.

A cycle (``post_usage``):

1. skips, and reports as ``non_monotonic``, every entity whose checkpoint is past the clamp (the
   others post);
2. opens a checkpoint row for every entity that has usage but none yet (its own short
   transaction, ``ON CONFLICT DO NOTHING`` in key order, so racing posters never deadlock);
3. walks the entities in key order as they are listed, in batches (``workers`` at a time on Postgres); each batch
   is one transaction of a few statements whatever its size: pin the projection's watermark
   (``store.ledger_late``), lock the batch's checkpoints (``FOR UPDATE`` in key order on
   Postgres), sum the batch's usage, insert the postings, advance the checkpoints. The split of
   each delta is ``core.ledger.plan_delta``; usage that events folded since a checkpoint added
   between its boundary and this cycle's is read by ``ledger.late`` (docs/ledger.md, "The
   aged-out split"). On Postgres the same rule runs in the database (``store.ledger_delta``:
   one statement sums, splits, posts and advances), so no checkpoint or total passes through
   Python; DuckDB, which has no data-modifying ``WITH``, applies ``plan_delta`` here;
4. records the cycle and everything it skipped or excluded (``store.ledger_records``), which the
   audit, ``/metrics`` and the ``TallyLedgerEntitiesSkipped`` alert read.

An interval the meters cannot read (a size field that is not a number) is excluded: the rest of
its entity is posted and the exclusion reported (``bad_size``). Entity problems that are data (a
checkpoint past the clamp, a meter no longer registered) skip that entity and are reported. Any
other error in a batch is isolated by bisecting the batch until the failing entity is alone; it is
reported and skipped. Deadlocks, serialization failures and lost connections are never swallowed:
the store retries the whole batch or raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from tally_pipeline.core.ledger import (
    ACCOUNTS,
    Checkpoint,
    CycleWindow,
    EntityKey,
    EntityTotals,
    NonMonotonicCheckpoint,
    needs_posting,
    plan_delta,
)
from tally_pipeline.core.registry import Meter, SizeSchemaRegistry
from tally_pipeline.core.timeutil import format_rfc3339
from tally_pipeline.core.usage import to_units, unknown_status_policy
from tally_pipeline.services.ledger.late import LateMemo, late_for, late_rows
from tally_pipeline.store import (
    ledger_checkpoints,
    ledger_delta,
    ledger_late,
    ledger_postings,
    ledger_records,
    resource_reads,
)
from tally_pipeline.store.base import Store, StoreError, UnitOfWork
from tally_pipeline.store.usage_reads import batch_totals, unopened_entities
from tally_pipeline.store.usage_sql import Fragment, UsageSQL

DEFAULT_BATCH_SIZE = 5000
DEFAULT_WORKERS = 2

#: Errors that abort a cycle instead of skipping an entity: concurrency and connection trouble.
#: The store translates its driver's (deadlocks, serialization failures, lost connections, a
#: refused transaction) into these and retries the transient ones itself before raising.
CONCURRENCY_ERRORS: tuple[type[BaseException], ...] = (StoreError,)

#: ``on_stage(stage, info)`` is called at: ``cycle_start``, ``listed`` (checkpoints opened, the first
#: chunk of the listing read, nothing locked; ``entities``: that chunk's), ``batch_locked`` (checkpoints locked),
#: ``batch_posted`` (postings inserted, transaction open; on the Python path the checkpoints are not
#: yet advanced, on Postgres's SQL path one statement did both),
#: ``batch_committed``. Tests use it to line processes up and to kill one mid-batch.
StageHook = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class SkippedEntity:
    """An entity the cycle did not post, or posted without some intervals (``excluded`` > 0).

    ``reason`` is ``"<code>: <detail>"``; the code (one of ``ledger_records.REASONS``) is what
    ``/metrics`` counts by.
    """

    cloud: str
    project_id: str
    meter: str
    reason: str
    excluded: int = 0  # intervals left out of a posted entity; 0 for an entity not posted

    @classmethod
    def of(cls, key: EntityKey, reason: str, excluded: int = 0) -> SkippedEntity:
        return cls(key.cloud, key.project_id, key.meter, reason, excluded)

    @property
    def code(self) -> str:
        return self.reason.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cloud": self.cloud, "project_id": self.project_id, "meter": self.meter,
                               "reason": self.reason}
        if self.excluded:
            out["excluded_intervals"] = self.excluded
        return out


@dataclass
class CycleResult:
    """What one cycle did. Amounts are micro-units; ``to_dict`` gives decimals in the meter's unit."""

    cycle_id: str
    now: datetime
    clamp: datetime
    window_start: datetime
    entities: int = 0  # entities considered
    posted: list[EntityKey] = field(default_factory=list)  # with at least one posting
    unchanged: int = 0  # advanced with a zero delta
    already_posted: int = 0  # checkpoint already at this clamp (a re-run)
    skipped: list[SkippedEntity] = field(default_factory=list)
    excluded: list[SkippedEntity] = field(default_factory=list)  # posted, some intervals left out
    postings: int = 0
    totals: dict[str, dict[str, int]] = field(default_factory=lambda: {a: {} for a in ACCOUNTS})
    #: Per meter whose type has intervals in status ``unknown``: how many, and whether it bills them.
    unknown_status: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing skipped and nothing excluded: every entity was posted in full."""
        return not self.skipped and not self.excluded

    def total(self, account: str, meter: str | None = None) -> Decimal:
        by_meter = self.totals.get(account, {})
        micro = by_meter.get(meter, 0) if meter is not None else sum(by_meter.values())
        return to_units(micro)

    def merge(self, other: BatchOutcome) -> None:
        self.posted += other.posted
        self.unchanged += other.unchanged
        self.already_posted += other.already_posted
        self.skipped += other.skipped
        self.excluded += other.excluded
        self.postings += other.postings
        for account, by_meter in other.totals.items():
            mine = self.totals.setdefault(account, {})
            for meter, micro in by_meter.items():
                mine[meter] = mine.get(meter, 0) + micro

    def to_dict(self, *, entities: bool = False) -> dict[str, Any]:
        """JSON-able summary; ``entities=True`` also lists every posted entity."""
        out: dict[str, Any] = {
            "cycle_id": self.cycle_id,
            "now": format_rfc3339(self.now),
            "clamp": format_rfc3339(self.clamp),
            "window_start": format_rfc3339(self.window_start),
            "entities": self.entities,
            "posted": len(self.posted),
            "unchanged": self.unchanged,
            "already_posted": self.already_posted,
            "skipped": [s.to_dict() for s in self.skipped],
            "excluded": [s.to_dict() for s in self.excluded],
            "postings": self.postings,
            "totals": {
                account: {meter: str(to_units(micro)) for meter, micro in sorted(by_meter.items())}
                for account, by_meter in self.totals.items()
            },
            "unknown_status": self.unknown_status,
        }
        if entities:
            out["posted_entities"] = [
                {"cloud": k.cloud, "project_id": k.project_id, "meter": k.meter} for k in self.posted
            ]
        return out


@dataclass
class BatchOutcome:
    posted: list[EntityKey] = field(default_factory=list)
    unchanged: int = 0
    already_posted: int = 0
    skipped: list[SkippedEntity] = field(default_factory=list)
    excluded: list[SkippedEntity] = field(default_factory=list)
    postings: int = 0
    totals: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Cycle:
    """What every batch of one cycle shares."""

    sql: UsageSQL
    meters: Fragment
    by_name: dict[str, Meter]
    window: CycleWindow
    cycle_id: str
    on_stage: StageHook
    in_sql: bool  # the delta computed in the database (store.ledger_delta), not by plan_delta here
    late: LateMemo = field(default_factory=dict)  # shared by the batches (late.LateMemo)


def _no_hook(stage: str, info: dict[str, Any]) -> None:
    return None


def post_usage(
    store: Store,
    registry: SizeSchemaRegistry,
    *,
    now: datetime,
    ingest_lag: timedelta | float,
    window_days: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
    entities: Collection[EntityKey] | None = None,
    cycle_id: str | None = None,
    workers: int | None = None,
    on_stage: StageHook | None = None,
    deltas_in_sql: bool | None = None,
) -> CycleResult:
    """Run one posting cycle at ``now``; ``entities`` limits it to those keys.

    An entity whose checkpoint is past this cycle's clamp is skipped (``non_monotonic``); the
    others post. The cycle and what it skipped or excluded are recorded. Entities are visited in key order, ``batch_size`` per transaction, ``workers`` transactions at
    a time (default: 2 on Postgres, whose server runs each connection on its own core; 1 on
    DuckDB, which admits one writer).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    window = CycleWindow.at(now, ingest_lag=ingest_lag, window_days=window_days)
    cycle = _prepare(store, registry, window, cycle_id, on_stage, deltas_in_sql)
    result = CycleResult(cycle.cycle_id, window.now, window.clamp, window.window_start)
    cycle.on_stage("cycle_start", {"cycle_id": cycle.cycle_id})

    if workers is None:
        workers = DEFAULT_WORKERS if store.parallel_writes else 1
    _open_unopened(store, cycle)
    # The batches start while the rest of the entities are still being listed: a batch is a run of
    # the listing, so the first can go as soon as its keys are in.
    with closing(ledger_checkpoints.listing(store, window.clamp, batch_size)) as chunks:
        batches = _batches(chunks, cycle, result, None if entities is None else set(entities), batch_size)
        for outcome in _post_batches(store, cycle, batches, workers):
            result.merge(outcome)
    unknown: dict[str, int] = {}
    for _, rtype, n in resource_reads.unknown_status_intervals(store):
        unknown[rtype] = unknown.get(rtype, 0) + n
    result.unknown_status = unknown_status_policy(cycle.by_name.values(), unknown)
    _record(store, result)
    return result


def _record(store: Store, result: CycleResult) -> None:
    """Keep the cycle and its skips and exclusions where other processes (the API, the audit) read them."""
    rows = [
        ledger_records.SkipRow(s.cloud, s.project_id, s.meter, s.code, s.reason, s.excluded)
        for s in (*result.skipped, *result.excluded)
    ]
    cycle = ledger_records.CycleRow(
        result.cycle_id, result.now, result.clamp, result.entities, len(result.posted), len(result.skipped),
        len(result.excluded),
    )
    store.run(lambda uow: ledger_records.record_cycle(uow, cycle, rows))


def _post_batches(store: Store, cycle: _Cycle, batches: Iterable[list[EntityKey]], workers: int) -> list[BatchOutcome]:
    """Post the batches, ``workers`` at a time, each as soon as it is handed over; outcomes in batch order.

    Batches are disjoint runs of keys, so parallel ones never wait for each other's locks. On an
    error no further batch starts; those running finish (each is its own transaction).
    """
    if workers <= 1:
        return [o for number, keys in enumerate(batches) for o in _run_isolating(store, cycle, keys, number)]
    outcomes: list[BatchOutcome] = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tally-post") as pool:
        futures: list[Future[list[BatchOutcome]]] = []
        try:
            for number, keys in enumerate(batches):
                futures.append(pool.submit(_run_isolating, store, cycle, keys, number))
            for future in futures:
                outcomes += future.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return outcomes


def _prepare(
    store: Store,
    registry: SizeSchemaRegistry,
    window: CycleWindow,
    cycle_id: str | None,
    on_stage: StageHook | None,
    deltas_in_sql: bool | None,
) -> _Cycle:
    meters = registry.meters()
    sql = store.usage_sql()
    if deltas_in_sql is None:
        deltas_in_sql = sql.computes_deltas
    elif deltas_in_sql and not sql.computes_deltas:
        raise ValueError(f"the {sql.dialect} store cannot compute deltas in SQL")
    return _Cycle(
        sql=sql,
        meters=sql.meters(meters),
        by_name={m.name: m for m in meters},
        window=window,
        cycle_id=cycle_id or uuid.uuid4().hex,
        on_stage=on_stage or _no_hook,
        in_sql=deltas_in_sql,
    )


def _open_unopened(store: Store, cycle: _Cycle) -> None:
    """Give a checkpoint to every entity with usage and none yet, before the listing.

    Opened before the listing, never after: an entity another poster opened between a listing and
    the search for unopened ones would be in neither (that poster's checkpoints are not unopened).
    """
    # found in the database: in a steady cycle there are none, and nothing per entity comes back
    missing = sorted(unopened_entities(store, cycle.sql, cycle.meters, cycle.window.clamp))
    if not missing:
        return
    keys = [EntityKey(*key) for key in missing]
    store.run(lambda uow: ledger_checkpoints.open_checkpoints(uow, cycle.sql, keys))
    if len(missing) >= max(1000, (ledger_checkpoints.count(store) - len(missing)) // 10):
        # the batches plan their joins on the table's statistics; a table that just grew a lot
        # (the first cycle of all) has none worth the name, and Postgres would pick nested loops
        store.run(cycle.sql.refresh_statistics)


def _batches(
    chunks: Iterator[list[tuple[str, str, str, datetime | None]]],
    cycle: _Cycle,
    result: CycleResult,
    wanted: set[EntityKey] | None,
    batch_size: int,
) -> Iterator[list[EntityKey]]:
    """The entities to post, ``batch_size`` at a time in key order, from the listing's chunks (each a
    run of it in key order); counts the entities in ``result`` and records those it skips."""
    known = cycle.by_name
    window = cycle.window
    todo: list[EntityKey] = []
    listed = False
    for chunk in chunks:
        if not listed:
            cycle.on_stage("listed", {"entities": len(chunk)})
            listed = True
        if wanted is not None:  # EntityKeys: a listed row's key tuple finds its equal
            chunk = [row for row in chunk if row[:3] in wanted]
        result.entities += len(chunk)
        for cloud, project_id, meter, clamp in chunk:  # in key order, as listed
            # needs_posting's common case written out (a registered meter, a checkpoint before the
            # clamp, which the listing gives as None): the steady cycle's every entity takes this branch
            if meter in known and clamp is None:
                todo.append(EntityKey(cloud, project_id, meter))
                continue
            key = EntityKey(cloud, project_id, meter)
            if meter not in known:
                result.skipped.append(SkippedEntity.of(key, f"unknown_meter: {meter} is not registered"))
                continue
            try:
                if needs_posting(clamp, window, key):
                    todo.append(key)
                else:
                    result.already_posted += 1
            except NonMonotonicCheckpoint as exc:
                result.skipped.append(SkippedEntity.of(key, f"non_monotonic: {exc}"))
        while len(todo) >= batch_size:
            yield todo[:batch_size]
            del todo[:batch_size]
    if not listed:
        cycle.on_stage("listed", {"entities": 0})
    if todo:
        yield todo


def _run_isolating(store: Store, cycle: _Cycle, keys: list[EntityKey], number: int) -> list[BatchOutcome]:
    """Post a batch; on an error that is not about concurrency, bisect to skip only the failing entity."""
    try:
        outcome = store.run(lambda uow: post_batch(uow, cycle, keys, number))
    except CONCURRENCY_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - isolated below, reported per entity
        if len(keys) == 1:
            first_line = (str(exc).strip().splitlines() or [""])[0]
            reason = f"error: {type(exc).__name__}: {first_line}"
            return [BatchOutcome(skipped=[SkippedEntity.of(keys[0], reason)])]
        middle = len(keys) // 2
        return _run_isolating(store, cycle, keys[:middle], number) + _run_isolating(
            store, cycle, keys[middle:], number
        )
    cycle.on_stage("batch_committed", {"batch": number, "entities": len(keys)})
    return [outcome]


def post_batch(uow: UnitOfWork, cycle: _Cycle, keys: Sequence[EntityKey], number: int = 0) -> BatchOutcome:
    """Post one batch of entities (a run of the listing, in key order) inside the caller's transaction."""
    if cycle.in_sql:
        return _post_batch_in_sql(uow, cycle, keys, number)
    window, sql = cycle.window, cycle.sql
    outcome = BatchOutcome()
    with ExitStack() as stack:
        sql.plan_per_batch(uow)
        # before the row locks (see store.ledger_late): the totals and the late usage below are
        # both read at this watermark, which the advanced checkpoints record
        watermark = ledger_late.pin_watermark(uow, sql)
        checkpoints = ledger_checkpoints.lock_batch(uow, sql, keys)
        cycle.on_stage("batch_locked", {"batch": number, "entities": len(keys)})

        pending: list[tuple[EntityKey, Checkpoint]] = []
        for key in keys:
            checkpoint = checkpoints.get(key)
            if checkpoint is None:
                outcome.skipped.append(SkippedEntity.of(key, "no_checkpoint: the checkpoint row vanished"))
                continue
            try:
                if needs_posting(checkpoint.clamp, window, key):
                    pending.append((key, checkpoint))
                else:
                    outcome.already_posted += 1
            except NonMonotonicCheckpoint as exc:
                outcome.skipped.append(SkippedEntity.of(key, f"non_monotonic: {exc}"))

        totals, bad = batch_totals(uow, sql, cycle.meters, window, keys) if pending else ({}, {})
        late = _late(uow, cycle, pending, watermark)

        postings: list[tuple[EntityKey, str, int]] = []
        advanced: list[tuple[EntityKey, Checkpoint]] = []
        zero = EntityTotals(0, 0, 0)
        for key, checkpoint in pending:
            if key in bad:  # posted without the unreadable intervals, and reported
                n_bad, example = bad[key]
                outcome.excluded.append(SkippedEntity.of(key, f"bad_size: {example}", n_bad))
            delta = plan_delta(checkpoint, totals.get(key, zero), window, key, late=late.get(key, 0),
                               watermark=watermark)
            if delta is None:  # not reached: needs_posting held under the lock
                outcome.already_posted += 1
                continue
            advanced.append((key, delta.checkpoint))
            amounts = delta.amounts()
            if not amounts:
                outcome.unchanged += 1
                continue
            outcome.posted.append(key)
            for account, amount in amounts:
                postings.append((key, account, amount))
                by_meter = outcome.totals.setdefault(account, {})
                by_meter[key.meter] = by_meter.get(key.meter, 0) + amount
        outcome.postings = len(postings)

        if postings:
            ledger_postings.insert_postings(uow, stack, sql, cycle.meters, window, cycle.cycle_id, postings)
        cycle.on_stage("batch_posted", {"batch": number, "entities": len(keys), "postings": len(postings)})
        if advanced:
            ledger_checkpoints.advance(uow, stack, sql, window, cycle.cycle_id, advanced, watermark)
    return outcome


def _post_batch_in_sql(uow: UnitOfWork, cycle: _Cycle, keys: Sequence[EntityKey], number: int) -> BatchOutcome:
    """``post_batch`` with the delta computed in the database (``store.ledger_delta``): the same rule,
    the same statements' order of locks, and only the unusual entities read back into Python."""
    window, sql = cycle.window, cycle.sql
    outcome = BatchOutcome()
    with ExitStack() as stack:
        sql.plan_per_batch(uow)
        watermark = ledger_late.pin_watermark(uow, sql)  # before the row locks, as in post_batch
        survey = ledger_delta.lock_and_survey(uow, sql, keys, window, watermark)
        cycle.on_stage("batch_locked", {"batch": number, "entities": len(keys)})

        in_batch = set(keys)
        settled: set[tuple[str, str, str]] = set()
        for key, clamp in survey.settled:  # at or past the clamp: needs_posting is False or raises
            if key not in in_batch:  # locked in the range, not the batch's
                continue
            settled.add(key)
            try:
                if not needs_posting(clamp, window, EntityKey(*key)):
                    outcome.already_posted += 1
            except NonMonotonicCheckpoint as exc:
                outcome.skipped.append(SkippedEntity.of(EntityKey(*key), f"non_monotonic: {exc}"))

        late = late_rows(uow, sql, cycle.by_name.values(), window, survey.late_spans, watermark, cycle.late, in_batch)
        posted = ledger_delta.post_deltas(uow, stack, sql, cycle.meters, window, cycle.cycle_id, keys, watermark, late,
                                          exact=survey.exact)
        cycle.on_stage("batch_posted", {"batch": number, "entities": len(keys), "postings": posted.postings})

    pending = [key for key in keys if key not in settled]
    if posted.advanced != len(pending):  # checkpoint rows gone since the listing: name them
        gone = set(ledger_delta.missing(uow, pending))
        outcome.skipped += [SkippedEntity.of(key, "no_checkpoint: the checkpoint row vanished") for key in pending
                            if key in gone]
        pending = [key for key in pending if key not in gone]
    for key, n_bad, example in posted.bad:  # posted without the unreadable intervals, and reported
        outcome.excluded.append(SkippedEntity.of(EntityKey(*key), f"bad_size: {example}", n_bad))
    outcome.unchanged = len(posted.unchanged)
    outcome.posted = [key for key in pending if key not in posted.unchanged]
    outcome.postings = posted.postings
    outcome.totals = posted.sums
    return outcome


def _late(
    uow: UnitOfWork, cycle: _Cycle, pending: Sequence[tuple[EntityKey, Checkpoint]], watermark: int
) -> dict[EntityKey, int]:
    """``late`` for each pending entity whose split needs it (``core.ledger.late_span``)."""
    return late_for(uow, cycle.sql, cycle.by_name.values(), cycle.window, pending, watermark, cycle.late)
