"""``ledger_postings``: the poster appends each cycle's signed postings here (the only writer).

The natural key (entity, clamp, account) makes a re-run of a cycle post nothing new; the audit in
``ledger_checkpoints`` reads the postings back against the checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime

from tally_pipeline.core.ledger import CycleWindow, EntityKey
from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.usage_sql import Fragment, UsageSQL, compose, p


def insert_postings(
    uow: UnitOfWork,
    stack: ExitStack,
    sql: UsageSQL,
    meters: Fragment,
    window: CycleWindow,
    cycle_id: str,
    postings: Sequence[tuple[EntityKey, str, int]],
) -> None:
    """Append one cycle's postings (entity, account, micro-units), each in its meter's unit."""
    rows = sql.rows(
        uow,
        stack,
        "r",
        [("cloud", "text"), ("project_id", "text"), ("meter", "text"), ("account", "text"), ("amount", "micro")],
        [
            [k.cloud for k, _, _ in postings],
            [k.project_id for k, _, _ in postings],
            [k.meter for k, _, _ in postings],
            [account for _, account, _ in postings],
            [str(amount) for _, _, amount in postings],
        ],
    )
    statement = compose(
        "INSERT INTO ledger_postings (cloud, project_id, meter, clamp, account, amount, unit, window_start,"
        " cycle_id, posted_at) SELECT r.cloud, r.project_id, r.meter, ",
        p(window.clamp),
        ", r.account, ",
        sql.micro_to_amount("r.amount"),
        ", m.unit, ",
        p(window.window_start),
        ", ",
        p(cycle_id),
        ", ",
        p(datetime.now(UTC)),
        " FROM ",
        rows,
        " JOIN ",
        meters,
        " ON m.meter = r.meter",
    )
    uow.execute(statement.sql, statement.params)
