"""Late usage inside the window's edge: what events folded since a checkpoint changed in the band
between its aged-out boundary and this cycle's.

A checkpoint knows how much of what it posted is dated before its own boundary (``aged_before``),
but not how much is dated before a later one: the history it was posted from has since changed. It
does record the projection watermark that history was read at, and events are never rewritten, so
that history can be folded again. Only resources that received an event dated before this cycle's
boundary since then can differ there (the fold is causal: events at or after an instant never
change usage dated before it), so only those are re-folded, twice: as of the checkpoint's watermark
and as of the batch's. The difference, per entity, is ``late`` in ``core.ledger.aged_part``.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from datetime import datetime

from tally_pipeline.core.fold import FoldEvent, Interval, fold, fold_rows_by_resource
from tally_pipeline.core.ledger import Checkpoint, CycleWindow, EntityKey, late_span, usage_moved
from tally_pipeline.core.registry import Meter
from tally_pipeline.store import ledger_late
from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.ledger_delta import LateRow
from tally_pipeline.store.usage_sql import UsageSQL


def _intervals_as_of(events: list[FoldEvent], seq: int) -> tuple[Interval, ...]:
    seen = [e for e in events if e.seq <= seq]
    return fold(seen).intervals if seen else ()


def late_usage(
    uow: UnitOfWork,
    sql: UsageSQL,
    meters: Iterable[Meter],
    *,
    since: int,
    upto: int,
    start: datetime,
    end: datetime,
) -> dict[EntityKey, int]:
    """Per entity: the change to usage dated in ``[start, end)`` made by the events with
    ``since < seq <= upto``. Reads only the resources that received such an event dated before ``end``."""
    keys = ledger_late.late_resources(uow, since, upto, end)
    if not keys:
        return {}
    meters = list(meters)
    out: dict[EntityKey, int] = {}
    for (cloud, resource_type, _), events in fold_rows_by_resource(sql.histories(uow, keys)):
        moved = usage_moved(meters, cloud, resource_type, _intervals_as_of(events, upto),
                            _intervals_as_of(events, since), start, end)
        for key, micro in moved.items():
            out[key] = out.get(key, 0) + micro
    return out


#: Late usage already computed, per (checkpoint watermark, checkpoint boundary, batch watermark):
#: the entities of one cycle mostly share all three, and each computation reads histories.
LateMemo = dict[tuple[int, datetime, int], dict[EntityKey, int]]


def late_for(
    uow: UnitOfWork,
    sql: UsageSQL,
    meters: Iterable[Meter],
    window: CycleWindow,
    entities: Sequence[tuple[EntityKey, Checkpoint]],
    watermark: int,
    memo: LateMemo,
) -> dict[EntityKey, int]:
    """``late`` (``core.ledger.aged_part``) for each entity whose split needs it (``core.ledger.late_span``)."""
    meters = list(meters)
    out: dict[EntityKey, int] = {}
    for key, checkpoint in entities:
        span = late_span(checkpoint, window, watermark)
        if span is None:
            continue
        since, start = span
        moved = _memoised(uow, sql, meters, window, since, start, watermark, memo)
        if key in moved:
            out[key] = moved[key]
    return out


def late_rows(
    uow: UnitOfWork,
    sql: UsageSQL,
    meters: Iterable[Meter],
    window: CycleWindow,
    spans: Iterable[tuple[int, datetime]],
    watermark: int,
    memo: LateMemo,
    batch: Container[EntityKey],
) -> list[LateRow]:
    """``late`` for the batch's entities, per ``late_span`` result ``(since, start)`` among ``spans``:
    what ``late_for`` gives an entity whose checkpoint has that span, for the store to match to it
    (``store.ledger_delta``) without the checkpoints coming to Python."""
    meters = list(meters)
    out: list[LateRow] = []
    for since, start in spans:
        moved = _memoised(uow, sql, meters, window, since, start, watermark, memo)
        out += [LateRow(key, since, start, micro) for key, micro in moved.items() if key in batch]
    return out


def _memoised(uow: UnitOfWork, sql: UsageSQL, meters: list[Meter], window: CycleWindow, since: int, start: datetime,
              watermark: int, memo: LateMemo) -> dict[EntityKey, int]:
    """``late_usage`` for a checkpoint's ``late_span`` ``(since, start)`` up to the batch's watermark, once per cycle."""
    moved = memo.get((since, start, watermark))
    if moved is None:
        moved = memo[(since, start, watermark)] = late_usage(
            uow, sql, meters, since=since, upto=watermark, start=start, end=window.boundary
        )
    return moved
