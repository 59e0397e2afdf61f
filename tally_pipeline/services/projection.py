"""Keeping ``current_resources`` and ``resource_intervals`` up to date with the event log.

Events are the source of truth; these tables are folds of each resource's history, and a rebuild
re-folds everything. A refresh folds only the events stored since the last one
(``projection_state.watermark`` is the highest ``seq`` folded), at a cost that follows them, not
the log:

- a resource seen for the first time is folded from its pending events (they are its history);
- a resource whose pending events all come after everything it has seen has them folded onto its
  stored state and open interval (``core.fold.FoldStart``), without reading its history;
- only a resource that receives an event older than (or as old as) its latest folded one — a late
  event — is re-folded from its full history, read through the resource index.

Bulk loads (more pending events than the backend folds in Python: ``python_fold_max``, at most
``PYTHON_FOLD_MAX``) and rebuilds fold in SQL, on each backend
(``store/duckdb/fold.py``, ``store/postgres/fold.py``). Property tests hold all of these paths equal
to the Python fold. The SQL lives in ``store/duckdb/projection.py`` and ``store/postgres/projection.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from tally_pipeline.core.fold import Folded, FoldEvent, FoldStart, ResourceState, fold, fold_rows_by_resource
from tally_pipeline.store.base import Store
from tally_pipeline.store.projection_tables import Key, ProjectionTables, StoredFold, read_watermark

# Above this many pending events a refresh is a bulk load: it re-folds the touched resources in SQL
# (one sorted pass) instead of folding them here one by one. A backend may fold in SQL sooner
# (``ProjectionTables.python_fold_max``): DuckDB's SQL fold is the cheaper above a few hundred.
PYTHON_FOLD_MAX = 50_000


@dataclass(frozen=True)
class RefreshResult:
    resources: int  # resources folded (every one touched, or all of them for a rebuild)
    watermark: int  # every event with seq <= watermark is now folded
    seconds: float
    full: bool
    resumed: int = 0  # of ``resources``: pending events folded onto the stored state, no history read
    refolded: int = 0  # of ``resources``: re-folded from their full history (late events), or in SQL
    events: int | None = 0  # events folded (pending ones); None for a rebuild, which re-folds them all

    def as_json(self) -> dict[str, Any]:
        return {"events": self.events, "resources": self.resources, "resumed": self.resumed, "refolded": self.refolded,
                "watermark": self.watermark, "seconds": round(self.seconds, 4), "full": self.full}


def refresh(store: Store) -> RefreshResult:
    """Fold what was stored since the last refresh. Cheap when nothing is pending."""
    return _run(store, full=False)


def rebuild(store: Store) -> RefreshResult:
    """Re-fold every resource from scratch."""
    return _run(store, full=True)


@dataclass(frozen=True)
class _Counts:
    resources: int
    watermark: int
    resumed: int = 0
    refolded: int = 0
    events: int | None = 0


def _run(store: Store, *, full: bool) -> RefreshResult:
    started = time.perf_counter()
    counts = store.with_projection_tables(lambda tables: _fold_pending(tables, full=full), full=full)
    if counts is None:  # nothing pending
        return RefreshResult(0, read_watermark(store), time.perf_counter() - started, full,
                             events=None if full else 0)
    return RefreshResult(counts.resources, counts.watermark, time.perf_counter() - started, full,
                         counts.resumed, counts.refolded, counts.events)


def _fold_pending(tables: ProjectionTables, *, full: bool) -> _Counts:
    watermark, high = tables.bounds()
    if not full and high <= watermark:
        return _Counts(0, watermark)
    pending = None if full else tables.pending_count(watermark, high)
    if pending is None or pending > min(PYTHON_FOLD_MAX, tables.python_fold_max):
        count = tables.fold_in_sql(watermark, high, full=full)
        tables.set_watermark(high)
        return _Counts(count, high, refolded=count, events=pending)
    pending_events = dict(fold_rows_by_resource(tables.pending_rows(watermark, high)))
    cuts: list[tuple[Key, int]] = []
    states: list[tuple[Any, ...]] = []
    intervals: list[tuple[Any, ...]] = []
    resumed = 0
    late: list[Key] = []
    stored = {s.key: s for s in tables.stored(list(pending_events))}
    for key, events in pending_events.items():
        prior = stored.get(key)
        start = _resumable(prior, events) if prior is not None else None
        if prior is not None and start is None:
            late.append(key)
            continue
        first_no = 0
        if start is not None:
            resumed += 1
            assert prior is not None  # a resumable fold has a stored one
            first_no = _first_new_interval(prior)
            cuts.append((key, first_no))
        _add_rows(key, fold(events, start), first_no, states, intervals)
    cuts.extend((key, 0) for key in late)
    for key, events in fold_rows_by_resource(tables.histories(late)):
        _add_rows(key, fold(events), 0, states, intervals)
    tables.replace(cuts, states, intervals)
    tables.set_watermark(high)
    return _Counts(len(pending_events), high, resumed=resumed, refolded=len(late), events=pending)


def _resumable(prior: StoredFold, events: list[FoldEvent]) -> FoldStart | None:
    """Where to resume ``prior``'s fold with ``events``, or None when its history must be re-folded.

    Resuming needs every event later than all it folded, and to know its last lifecycle: a live
    resource's is its open interval's; a deleted one's is its last interval's, unless that
    lifecycle kept no interval (created and deleted at the same instant) — then only the history
    tells.
    """
    if min(e.occurred_at for e in events) <= prior.last_event_at:
        return None
    size = orjson.loads(prior.size) if isinstance(prior.size, str) else prior.size
    state = ResourceState(prior.status, prior.project_id, size, prior.created_at,  # type: ignore[arg-type]
                          prior.deleted_at, prior.last_event_at, prior.last_seq, prior.event_count,
                          prior.platform_status)
    if prior.status == "unborn":
        return FoldStart(state, -1, None)
    if prior.status == "live" and prior.open_start is not None and prior.last_lifecycle_no is not None:
        return FoldStart(state, prior.last_lifecycle_no, prior.open_start)
    if (prior.status == "deleted" and prior.last_lifecycle_no is not None
            and prior.created_at is not None and prior.deleted_at is not None
            and prior.created_at < prior.deleted_at):
        return FoldStart(state, prior.last_lifecycle_no, None)
    return None


def _first_new_interval(prior: StoredFold) -> int:
    """The number the resumed fold's first interval takes: the open one's, or the next."""
    last = -1 if prior.last_interval_no is None else prior.last_interval_no
    return last if prior.status == "live" else last + 1


def _add_rows(key: Key, result: Folded, first_no: int, states: list[tuple[Any, ...]], intervals: list[tuple[Any, ...]]) -> None:
    states.append(_state_row(key, result))
    intervals.extend(_interval_rows(key, result, first_no))


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _state_row(key: Key, result: Folded) -> tuple[Any, ...]:
    s = result.state
    return (*key, s.status, s.project_id, _json(s.size), s.created_at, s.deleted_at,
            s.last_event_at, s.last_seq, s.event_count, s.platform_status)


def _interval_rows(key: Key, result: Folded, first_no: int = 0) -> Iterator[tuple[Any, ...]]:
    for number, iv in enumerate(result.intervals, start=first_no):
        yield (*key, number, iv.lifecycle_no, iv.project_id, _json(iv.size), iv.start, iv.end, iv.platform_status)
