"""A one-transaction-per-entity poster: the baseline the set-based poster is measured against.

Same rules, same statements as ``poster.post_batch`` on its Python path (``core.ledger.plan_delta``
per entity, whatever the store), but each entity is its own transaction (make sure its checkpoint
exists, lock it, sum its usage, post, advance): what a straightforward implementation does. The
benchmark runs it on the same data; a test holds both to the same ledger.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta

from tally_pipeline.core.ledger import CycleWindow, EntityKey
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.services.ledger.poster import BatchOutcome, CycleResult, _prepare, post_batch
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.ledger_checkpoints import open_checkpoints


def post_usage_naively(
    store: Store,
    registry: SizeSchemaRegistry,
    keys: Sequence[EntityKey],
    *,
    now: datetime,
    ingest_lag: timedelta | float,
    window_days: int,
) -> CycleResult:
    """Post ``keys`` one transaction each, in order."""
    window = CycleWindow.at(now, ingest_lag=ingest_lag, window_days=window_days)
    cycle = _prepare(store, registry, window, None, None, deltas_in_sql=False)  # the Python rule
    result = CycleResult(cycle.cycle_id, window.now, window.clamp, window.window_start, entities=len(keys))

    def one(uow: UnitOfWork, key: EntityKey) -> BatchOutcome:
        open_checkpoints(uow, cycle.sql, [key])  # the poster's own statement: one writer of the checkpoints
        return post_batch(uow, cycle, [key])

    for key in keys:
        result.merge(store.run(functools.partial(one, key=key)))
    return result
