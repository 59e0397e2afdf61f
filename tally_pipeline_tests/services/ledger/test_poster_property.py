"""Random histories: late intervals, changes, synthetic deletes and cycles, on both backends.

After every cycle the ledger must equal usage through each checkpoint (invariant 1), and every
posting, account by account, must be what the pure Python rules (``core.usage`` + ``plan_delta``)
say: so the SQL arithmetic and the split are held equal to the Python ones as well.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.ledger import Checkpoint, CycleWindow, EntityKey, EntityTotals, plan_delta, split_boundary
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.ledger.verify import verify
from tally_pipeline_tests.ledger_data import (
    HOUR,
    T0,
    Row,
    delete_row,
    insert,
    model_usage,
    postings,
    replace_row,
    vm,
)

LAG = timedelta(hours=1)
WINDOW_DAYS = 2  # short, so that corrections regularly reach behind the window

hours = st.integers(min_value=-10 * 24, max_value=6 * 24)
operations = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["p1", "p2"]), hours, st.one_of(st.none(), st.integers(0, 72)), st.integers(0, 16)),
    st.tuples(st.just("resize"), st.integers(0, 20), st.integers(0, 16)),
    st.tuples(st.just("close"), st.integers(0, 20), hours),  # a synthetic delete, possibly dated long ago
    st.tuples(st.just("drop"), st.integers(0, 20)),
    st.tuples(st.just("cycle"), st.sampled_from([0, 1, 5, 24, 49])),
)


class Model:
    """The ledger the rules say we should have, computed in Python from the same history."""

    def __init__(self, registry):
        self.registry = registry
        self.checkpoints: dict[EntityKey, Checkpoint] = {}
        self.postings: dict[tuple[EntityKey, str], int] = defaultdict(int)

    def cycle(self, rows: list[Row], window: CycleWindow) -> None:
        now_usage = model_usage(self.registry, rows, window.clamp)
        for key in set(now_usage) | set(self.checkpoints):
            checkpoint = self.checkpoints.get(key, Checkpoint())
            split = split_boundary(checkpoint, window)
            totals = EntityTotals(
                now_usage.get(key, 0),
                model_usage(self.registry, rows, split).get(key, 0),
                model_usage(self.registry, rows, window.boundary).get(key, 0),
            )
            delta = plan_delta(checkpoint, totals, window)
            if delta is None:
                continue
            for account, amount in delta.amounts():
                self.postings[(key, account)] += amount
            self.checkpoints[key] = delta.checkpoint


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(operations, min_size=1, max_size=12))
def test_random_histories_keep_the_ledger_equal_to_usage(quick_store, registry, ops) -> None:
    store = quick_store
    for table in ("resource_intervals", "ledger_postings", "usage_checkpoints"):
        store.run(lambda uow, table=table: uow.execute(f"DELETE FROM {table}"))
    rows: list[Row] = []
    model = Model(registry)
    now, last_clamp = T0, None
    for number, op in enumerate([*ops, ("cycle", 1)]):
        kind = op[0]
        if kind == "add":
            _, project, start_h, length_h, vcpus = op
            start = T0 + start_h * HOUR
            row = Row(project, f"vm-{number}", start, None if length_h is None else start + length_h * HOUR, vm(vcpus=vcpus))
            insert(store, row)
            rows.append(row)
        elif kind in ("resize", "close", "drop") and rows:
            index = op[1] % len(rows)
            if kind == "resize":
                rows[index] = replace_row(store, rows[index], size=vm(vcpus=op[2]))
            elif kind == "close":
                rows[index] = replace_row(store, rows[index], end=T0 + op[2] * HOUR)
            else:
                delete_row(store, rows.pop(index))
        elif kind == "cycle":
            now += op[1] * HOUR
            window = CycleWindow.at(now, ingest_lag=LAG, window_days=WINDOW_DAYS)
            post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS, batch_size=3)
            model.cycle(rows, window)
            # (1): postings over both accounts = usage through the checkpoint, per entity. A re-run
            # at the same clamp posts nothing, so history changed since is pending until the next
            # clamp: then only the ledger's own consistency can be asserted.
            rerun = window.clamp == last_clamp
            report = verify(store, registry, include_history=not rerun)
            assert report.ok, report.to_dict()
            last_clamp = window.clamp
            # and each account holds exactly what the Python rules post
            assert {k: v for k, v in postings(store).items() if v} == {k: v for k, v in model.postings.items() if v}
